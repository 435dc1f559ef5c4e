//! The end of a run: a table per destination for people, one JSON document for machines.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use indicatif::{HumanBytes, HumanCount, HumanDuration};
use serde_json::{Value, json};

use super::document::document;
use super::{Paint, Style, some_names, table};
use crate::exit::ExitStatus;
use crate::run::{ReadStats, RunReport};

/// The summary of a run: a line on what was read and written, then a row per destination
/// (rows, files, bytes, failed records), then where rejected records went.
pub fn run_summary(report: &RunReport, style: Style) -> String {
    let result = &report.result;
    let failed = &report.rejected.by_destination;
    let mut names: Vec<&str> = result.destinations.keys().map(String::as_str).collect();
    for name in failed.keys() {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    names.sort();

    let mut out = format!(
        "{} {} rows to {} destination{} in {} ({})\n",
        style.paint(Paint::Bold, "Wrote"),
        HumanCount(result.rows_written()),
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        duration(report.elapsed),
        read_line(&report.read),
    );
    if !names.is_empty() {
        let mut rows = vec![
            ["destination", "rows", "files", "bytes", "failed"]
                .map(String::from)
                .to_vec(),
        ];
        for name in &names {
            let stats = result.destinations.get(*name).cloned().unwrap_or_default();
            let failed = failed.get(*name).copied().unwrap_or(0);
            rows.push(vec![
                name.to_string(),
                HumanCount(stats.rows).to_string(),
                HumanCount(stats.files).to_string(),
                HumanBytes(stats.bytes).to_string(),
                HumanCount(failed).to_string(),
            ]);
        }
        if names.len() > 1 {
            rows.push(vec![
                "total".to_string(),
                HumanCount(result.rows_written()).to_string(),
                HumanCount(result.files_written()).to_string(),
                HumanBytes(result.bytes_written()).to_string(),
                HumanCount(report.rejected.count).to_string(),
            ]);
        }
        out.push('\n');
        out.push_str(&table(&rows, &[false, true, true, true, true]));
    }
    if let Some(line) = skipped_line(report) {
        out.push('\n');
        out.push_str(&style.paint(Paint::Yellow, &line));
        out.push('\n');
    }
    if !report.unrecorded.is_empty() {
        out.push('\n');
        out.push_str(&format!(
            "Not recorded: {} keep{} no record of the files loaded, so running this job again loads them again\n",
            report.unrecorded.join(", "),
            if report.unrecorded.len() == 1 { "s" } else { "" }
        ));
    }
    if let Some(dead) = &report.dead_letter
        && dead.records > 0
    {
        out.push('\n');
        out.push_str(&style.paint(
            Paint::Yellow,
            &format!(
                "{} rejected record{} written to {}",
                HumanCount(dead.records),
                if dead.records == 1 { "" } else { "s" },
                dead.path.display()
            ),
        ));
        out.push('\n');
    }
    out
}

/// What a rerun left out because the destinations already held it, or `None`.
fn skipped_line(report: &RunReport) -> Option<String> {
    if report.skipped.is_empty() {
        return None;
    }
    let mut by_destination: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for skipped in &report.skipped {
        by_destination
            .entry(&skipped.destination)
            .or_default()
            .push(&skipped.file);
    }
    let mut lines = Vec::new();
    for (destination, files) in by_destination {
        lines.push(format!(
            "Skipped {} file{} {destination} already holds from an earlier run: {}",
            files.len(),
            if files.len() == 1 { "" } else { "s" },
            some_names(&files),
        ));
    }
    if report.skipped_rows > 0 {
        lines.push(format!(
            "(left out {} rows of those files; their other rows went to tables that did not hold them)",
            HumanCount(report.skipped_rows)
        ));
    }
    lines.push("--reload (or reload: true in the job) loads them again".to_string());
    Some(lines.join("\n"))
}

/// Seconds with a tenth under a minute, then minutes and hours.
fn duration(elapsed: Duration) -> String {
    if elapsed < Duration::from_secs(60) {
        format!("{:.1}s", elapsed.as_secs_f64())
    } else {
        HumanDuration(elapsed).to_string()
    }
}

/// "read 3 files, 1.2 MiB, 10,000 rows".
pub fn read_line(read: &ReadStats) -> String {
    let mut line = format!(
        "read {} file{}, {}, {} rows",
        read.files,
        if read.files == 1 { "" } else { "s" },
        HumanBytes(read.bytes),
        HumanCount(read.rows_read)
    );
    if read.rows_out != read.rows_read {
        line.push_str(&format!(", {} after transforms", HumanCount(read.rows_out)));
    }
    line
}

/// The `--json` document of a finished run: its status and exit code, the job, the time
/// taken, what was read, what preparing each destination did, the sink's `WriteResult`
/// (per-destination counts and the first few failed records) and how many records were
/// rejected, in all and per destination.
pub fn run_document(job: &Path, status: ExitStatus, report: &RunReport) -> Value {
    document(
        "run",
        status,
        json!({
            "job": job,
            "elapsed_seconds": report.elapsed.as_secs_f64(),
            "read": report.read,
            "prepared": report.prepared,
            "result": report.result,
            "rejected": report.rejected,
            "dead_letter": report.dead_letter,
            "skipped": report.skipped,
            "skipped_rows": report.skipped_rows,
            "unrecorded": report.unrecorded,
        }),
    )
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use outflow_core::sink::DestinationStats;
    use outflow_core::{FailedRecord, RecordSource, SourcePosition, WriteResult};

    use super::*;
    use crate::run::{DeadLetterReport, Rejections};

    fn report() -> RunReport {
        let mut result = WriteResult::default();
        result.record(
            "db.a",
            DestinationStats {
                rows: 1500,
                bytes: 2048,
                files: 2,
                commits: 1,
            },
        );
        result.record(
            "db.b",
            DestinationStats {
                rows: 10,
                bytes: 100,
                files: 1,
                commits: 1,
            },
        );
        result.failed.push(FailedRecord {
            source: Some(RecordSource {
                file: "in.csv".into(),
                at: SourcePosition::Line(5),
            }),
            destination: "db.b".into(),
            index: Some(3),
            record: None,
            reason: "too big".into(),
        });
        RunReport {
            read: ReadStats {
                files: 2,
                bytes: 4096,
                rows_read: 1520,
                rows_out: 1511,
            },
            prepared: Vec::new(),
            result,
            rejected: Rejections {
                count: 1200,
                by_destination: [("db.b".to_string(), 1200)].into(),
            },
            elapsed: Duration::from_millis(1500),
            dead_letter: Some(DeadLetterReport {
                path: PathBuf::from("failed.ndjson"),
                records: 1200,
            }),
            skipped: Vec::new(),
            skipped_rows: 0,
            unrecorded: Vec::new(),
        }
    }

    #[test]
    fn the_summary_has_a_row_per_destination_and_a_total() {
        let text = run_summary(&report(), Style::plain());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "Wrote 1,510 rows to 2 destinations in 1.5s (read 2 files, 4.00 KiB, 1,520 rows, 1,511 after transforms)"
        );
        assert_eq!(lines[2], "destination   rows  files     bytes  failed");
        assert_eq!(lines[3], "db.a         1,500      2  2.00 KiB       0");
        assert_eq!(lines[4], "db.b            10      1     100 B   1,200");
        assert_eq!(lines[5], "total        1,510      3  2.10 KiB   1,200");
        assert_eq!(lines[7], "1,200 rejected records written to failed.ndjson");
    }

    #[test]
    fn the_json_document_carries_the_write_result_and_timing() {
        let doc = run_document(Path::new("job.yaml"), ExitStatus::Rejected, &report());
        assert_eq!(doc["version"], 1);
        assert_eq!(doc["command"], "run");
        assert_eq!(doc["status"], "rejected");
        assert_eq!(doc["exit_code"], 3);
        assert_eq!(doc["elapsed_seconds"], 1.5);
        assert_eq!(doc["read"]["rows_out"], 1511);
        assert_eq!(doc["result"]["destinations"]["db.a"]["rows"], 1500);
        assert_eq!(doc["result"]["failed"][0]["reason"], "too big");
        assert_eq!(
            doc["result"]["failed"][0]["source"],
            json!({"file": "in.csv", "line": 5})
        );
        assert_eq!(doc["rejected"]["count"], 1200);
        assert_eq!(doc["rejected"]["by_destination"]["db.b"], 1200);
        assert_eq!(doc["dead_letter"]["records"], 1200);
    }
}
