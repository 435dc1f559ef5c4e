//! Where rows came from: each batch's rows' places in their file ([`RowOrigins`]), and,
//! for a run, each row the sink was given mapped back to its file and place
//! ([`SinkRowOrigins`]), so a dead-letter line can name the line a rejected record was on.
//!
//! Both are kept as runs of rows at consecutive places, not one entry per row: a file read
//! without a filter is one run, whatever its size, and a filter adds a run per gap it makes.

use arrow::array::{Array, BooleanArray};
use outflow_core::{RecordSource, SourcePosition};

/// How a format counts places in a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// 1-based lines of a text file (CSV, NDJSON), a header counting as line 1.
    Line,
    /// 0-based row offsets (Parquet).
    Row,
    /// Offsets in a Kafka partition (the "file" is the partition).
    Offset,
}

impl Unit {
    fn position(self, at: u64) -> SourcePosition {
        match self {
            Unit::Line => SourcePosition::Line(at),
            Unit::Row => SourcePosition::Row(at),
            Unit::Offset => SourcePosition::Offset(at as i64),
        }
    }
}

/// A run of rows: rows `row..` (up to the next run) are at places `at..`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    row: usize,
    at: u64,
}

/// The places, in their file, of one batch's rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowOrigins {
    unit: Unit,
    runs: Vec<Run>,
    rows: usize,
}

impl RowOrigins {
    /// No rows yet.
    pub fn new(unit: Unit) -> RowOrigins {
        RowOrigins {
            unit,
            runs: Vec::new(),
            rows: 0,
        }
    }

    /// `rows` rows at consecutive places from `first`.
    pub fn consecutive(unit: Unit, first: u64, rows: usize) -> RowOrigins {
        let mut origins = RowOrigins::new(unit);
        if rows > 0 {
            origins.runs.push(Run { row: 0, at: first });
            origins.rows = rows;
        }
        origins
    }

    /// Appends a row at place `at`.
    pub fn push(&mut self, at: u64) {
        let continues = self
            .runs
            .last()
            .is_some_and(|run| run.at + (self.rows - run.row) as u64 == at);
        if !continues {
            self.runs.push(Run { row: self.rows, at });
        }
        self.rows += 1;
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The rows whose entry in `keep` is true, as `arrow::compute::filter` keeps them (a
    /// null is not kept).
    pub fn filter(&self, keep: &BooleanArray) -> RowOrigins {
        let mut kept = RowOrigins::new(self.unit);
        for (row, at) in self.places().enumerate() {
            if keep.is_valid(row) && keep.value(row) {
                kept.push(at);
            }
        }
        kept
    }

    /// The places of the rows, in order.
    fn places(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs.iter().enumerate().flat_map(|(index, run)| {
            let end = self.runs.get(index + 1).map_or(self.rows, |next| next.row);
            (0..(end - run.row) as u64).map(move |offset| run.at + offset)
        })
    }
}

/// A run of the rows given to a sink: sink indexes `index..` (up to the next span) are
/// places `at..` of file `file`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    index: u64,
    file: usize,
    unit: Unit,
    at: u64,
}

/// Every row given to a sink, by its index among them ([`outflow_core::FailedRecord`]'s
/// `index`), mapped to the file and place it was read from.
///
/// Sinks may report a rejected record well after the batch that held it (Bigtable's
/// requests in flight), so the spans are kept until the run ends: one per run of
/// consecutive places, so reading without a filter keeps one per file.
#[derive(Debug)]
pub struct SinkRowOrigins {
    files: Vec<String>,
    spans: Vec<Span>,
    rows: u64,
}

impl SinkRowOrigins {
    /// No rows yet; `files` are the source's files as they are to be named, in the order
    /// of [`SourceEvent`](super::SourceEvent)'s file indexes.
    pub fn new(files: Vec<String>) -> SinkRowOrigins {
        SinkRowOrigins {
            files,
            spans: Vec::new(),
            rows: 0,
        }
    }

    /// The index of file `name`, added when it is not known yet (the partitions of a
    /// stream are known as they are assigned).
    pub fn file_index(&mut self, name: &str) -> usize {
        match self.files.iter().position(|f| f == name) {
            Some(index) => index,
            None => {
                self.files.push(name.to_string());
                self.files.len() - 1
            }
        }
    }

    /// Counts the rows of a batch given to the sink, read from file `file`.
    pub fn given(&mut self, file: usize, origins: &RowOrigins) {
        for run in &origins.runs {
            let start = self.rows + run.row as u64;
            let continues = self.spans.last().is_some_and(|span| {
                span.file == file && span.unit == origins.unit && span.at + (start - span.index) == run.at
            });
            if !continues {
                self.spans.push(Span {
                    index: start,
                    file,
                    unit: origins.unit,
                    at: run.at,
                });
            }
        }
        self.rows += origins.rows as u64;
    }

    /// Where the row the sink counts as `index` came from; `None` for an index the sink
    /// was never given.
    pub fn source_of(&self, index: u64) -> Option<RecordSource> {
        if index >= self.rows {
            return None;
        }
        let after = self.spans.partition_point(|span| span.index <= index);
        let span = self.spans[after.checked_sub(1)?];
        Some(RecordSource {
            file: self.files.get(span.file)?.clone(),
            at: span.unit.position(span.at + (index - span.index)),
        })
    }

    /// How many spans are kept (what the mapping costs in memory).
    #[cfg(test)]
    fn spans(&self) -> usize {
        self.spans.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(file: &str, line: u64) -> Option<RecordSource> {
        Some(RecordSource {
            file: file.into(),
            at: SourcePosition::Line(line),
        })
    }

    #[test]
    fn rows_on_consecutive_places_are_one_run() {
        let mut origins = RowOrigins::new(Unit::Line);
        for at in [2, 3, 4, 6, 7, 7, 8] {
            origins.push(at);
        }
        assert_eq!(origins.places().collect::<Vec<_>>(), [2, 3, 4, 6, 7, 7, 8]);
        assert_eq!(origins.runs.len(), 3);
        assert_eq!(
            RowOrigins::consecutive(Unit::Row, 10, 3)
                .places()
                .collect::<Vec<_>>(),
            [10, 11, 12]
        );
        assert!(RowOrigins::consecutive(Unit::Row, 10, 0).is_empty());
    }

    #[test]
    fn a_filter_keeps_the_places_of_the_rows_it_keeps() {
        let origins = RowOrigins::consecutive(Unit::Line, 2, 5);
        let keep = BooleanArray::from(vec![Some(false), Some(true), None, Some(true), Some(true)]);
        let kept = origins.filter(&keep);
        assert_eq!(kept.places().collect::<Vec<_>>(), [3, 5, 6]);
        assert_eq!(kept.len(), 3);
        // Filtering again works on the places that are left.
        let again = kept.filter(&BooleanArray::from(vec![true, false, true]));
        assert_eq!(again.places().collect::<Vec<_>>(), [3, 6]);
    }

    #[test]
    fn sink_indexes_map_to_file_and_line_across_batches_and_files() {
        let mut origins = SinkRowOrigins::new(vec!["a.csv".into(), "b.csv".into()]);
        // a.csv: lines 2..=5 in two batches; b.csv: lines 2..=3.
        origins.given(0, &RowOrigins::consecutive(Unit::Line, 2, 2));
        origins.given(0, &RowOrigins::consecutive(Unit::Line, 4, 2));
        origins.given(1, &RowOrigins::consecutive(Unit::Line, 2, 2));
        assert_eq!(origins.spans(), 2, "one span per file");
        assert_eq!(origins.source_of(0), line("a.csv", 2));
        assert_eq!(origins.source_of(3), line("a.csv", 5));
        assert_eq!(origins.source_of(4), line("b.csv", 2));
        assert_eq!(origins.source_of(5), line("b.csv", 3));
        assert_eq!(origins.source_of(6), None);
    }

    #[test]
    fn after_a_filter_indexes_count_the_rows_the_sink_was_given() {
        let mut origins = SinkRowOrigins::new(vec!["a.csv".into(), "b.csv".into()]);
        // a.csv lines 2..=6, the filter drops lines 3 and 4; b.csv lines 2..=4, it drops 2.
        let a = RowOrigins::consecutive(Unit::Line, 2, 5)
            .filter(&BooleanArray::from(vec![true, false, false, true, true]));
        let b =
            RowOrigins::consecutive(Unit::Line, 2, 3).filter(&BooleanArray::from(vec![false, true, true]));
        origins.given(0, &a);
        origins.given(1, &b);
        let found: Vec<_> = (0..5).map(|i| origins.source_of(i)).collect();
        assert_eq!(
            found,
            [
                line("a.csv", 2),
                line("a.csv", 5),
                line("a.csv", 6),
                line("b.csv", 3),
                line("b.csv", 4)
            ]
        );
    }

    #[test]
    fn parquet_rows_are_offsets() {
        let mut origins = SinkRowOrigins::new(vec!["a.parquet".into()]);
        origins.given(0, &RowOrigins::consecutive(Unit::Row, 0, 3));
        assert_eq!(
            origins.source_of(2),
            Some(RecordSource {
                file: "a.parquet".into(),
                at: SourcePosition::Row(2)
            })
        );
    }
}
