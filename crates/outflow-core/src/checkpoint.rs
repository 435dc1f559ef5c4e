//! Checkpoints of streaming jobs: the source positions a destination holds, committed with
//! the rows they cover.
//!
//! A streaming job reads partitioned logs (Kafka topics). At each checkpoint the sink
//! prepares what it wrote, and its committer commits it together with the [`Checkpoint`]:
//! for every partition read, the offset the checkpoint began at and the next offset to
//! read after it. The destination keeps the ends as its [`Offsets`], under the job's id,
//! so rows and positions become visible together; a restarted job reads them back and
//! goes on from there, and nothing is lost or doubled.
//!
//! The beginnings fence the commit: a committer refuses a checkpoint when the destination
//! holds another offset for one of its partitions than the one it began at. That happens
//! only when another process (a second copy of the job, or the new owner of a partition
//! after a rebalance) committed the same records first; the refused checkpoint's rows are
//! then dropped instead of committed twice.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Error, ErrorKind, Result};

/// One partition of a topic.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TopicPartition {
    /// The topic.
    pub topic: String,
    /// The partition number.
    pub partition: i32,
}

impl TopicPartition {
    /// Partition `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// The next offset to read of each partition: what a destination holds of a job's source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Offsets {
    next: BTreeMap<TopicPartition, i64>,
}

impl Offsets {
    /// No partition.
    pub fn new() -> Offsets {
        Offsets::default()
    }

    /// The next offset to read of `partition`, if held.
    pub fn get(&self, partition: &TopicPartition) -> Option<i64> {
        self.next.get(partition).copied()
    }

    /// Sets the next offset of `partition`.
    pub fn set(&mut self, partition: TopicPartition, next: i64) {
        self.next.insert(partition, next);
    }

    /// Takes the partitions of `older` that this one does not hold: how the offsets of
    /// commits that each name some partitions add up, newest first.
    pub fn fill_from(&mut self, older: Offsets) {
        for (partition, next) in older.next {
            self.next.entry(partition).or_insert(next);
        }
    }

    /// Only the partitions of `partitions` (all of them when `None`).
    pub fn restricted_to(mut self, partitions: Option<&[TopicPartition]>) -> Offsets {
        if let Some(partitions) = partitions {
            self.next.retain(|p, _| partitions.contains(p));
        }
        self
    }

    /// Every partition and its next offset, in topic and partition order.
    pub fn iter(&self) -> impl Iterator<Item = (&TopicPartition, i64)> {
        self.next.iter().map(|(p, n)| (p, *n))
    }

    /// How many partitions are held.
    pub fn len(&self) -> usize {
        self.next.len()
    }

    /// Whether no partition is held.
    pub fn is_empty(&self) -> bool {
        self.next.is_empty()
    }

    /// The text a commit stores them in: `{"topic": {"0": 42, "1": 7}}`, in order, so the
    /// same offsets give the same text.
    pub fn encode(&self) -> String {
        let mut topics: BTreeMap<&str, BTreeMap<String, i64>> = BTreeMap::new();
        for (p, next) in &self.next {
            topics
                .entry(p.topic.as_str())
                .or_default()
                .insert(p.partition.to_string(), *next);
        }
        // Strings and numbers only: serializing cannot fail.
        serde_json::to_string(&topics).unwrap_or_default()
    }

    /// The offsets in a commit's text; `what` names where it came from for the error.
    pub fn decode(text: &str, what: &str) -> Result<Offsets> {
        let unreadable = |why: String| {
            Error::invalid_input(format!(
                "{what}: the stored source offsets are not readable: {why}"
            ))
        };
        let topics: BTreeMap<String, BTreeMap<String, i64>> =
            serde_json::from_str(text).map_err(|e| unreadable(e.to_string()))?;
        let mut offsets = Offsets::new();
        for (topic, partitions) in topics {
            for (partition, next) in partitions {
                let number = partition
                    .parse::<i32>()
                    .map_err(|_| unreadable(format!("partition {partition:?} of {topic} is not a number")))?;
                offsets.set(TopicPartition::new(topic.clone(), number), next);
            }
        }
        Ok(offsets)
    }
}

impl FromIterator<(TopicPartition, i64)> for Offsets {
    fn from_iter<I: IntoIterator<Item = (TopicPartition, i64)>>(iter: I) -> Self {
        Offsets {
            next: iter.into_iter().collect(),
        }
    }
}

/// What one checkpoint read of one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetRange {
    /// The next offset the destination held when the checkpoint began; `None` when it held
    /// none for this partition (the job's first records from it).
    pub from: Option<i64>,
    /// The next offset to read after the checkpoint.
    pub to: i64,
}

/// A checkpoint of a streaming job: the job and what it read of each partition since the
/// last one. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The job's id: a destination keeps offsets per job.
    pub job: String,
    /// Per partition read, where the checkpoint began and ended.
    pub ranges: BTreeMap<TopicPartition, OffsetRange>,
}

impl Checkpoint {
    /// The offsets a destination holds once this checkpoint is committed, for the
    /// partitions it read.
    pub fn ends(&self) -> Offsets {
        self.ranges.iter().map(|(p, r)| (p.clone(), r.to)).collect()
    }

    /// Whether this checkpoint can be committed to `destination`, which holds `stored` for
    /// this job: every partition must be where the checkpoint began. The error names the
    /// first partition that is not, and is not retryable.
    pub fn check_against(&self, stored: &Offsets, destination: &str) -> Result<()> {
        for (partition, range) in &self.ranges {
            let held = stored.get(partition);
            if held != range.from {
                let held = held.map_or("no offset".to_string(), |o| format!("offset {o}"));
                let began = range
                    .from
                    .map_or("no offset".to_string(), |o| format!("offset {o}"));
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "{destination} holds {held} of partition {partition} for job {}, but this \
                         checkpoint began at {began}: another process committed those records \
                         first (a second copy of the job, or a rebalance), so this checkpoint \
                         is dropped",
                        self.job
                    ),
                )
                .with_context("table", destination.to_string())
                .with_context("partition", partition.to_string())
                .with_retryable(false));
            }
        }
        Ok(())
    }

    /// An id for the commit of this checkpoint: the same job and ranges give the same id.
    pub fn id_text(&self) -> String {
        let mut text = format!("checkpoint:{}", self.job);
        for (p, r) in &self.ranges {
            text.push_str(&format!("\n{p}:{}:{}", r.from.unwrap_or(-1), r.to));
        }
        text
    }
}

/// The snapshot summary (or ledger) key under which a destination keeps `job`'s offsets.
pub fn offsets_key(job: &str) -> String {
    format!("outflow.offsets.{job}")
}

/// Checks a job id: not blank, and only letters, digits and `-_.`, since it becomes part of
/// a property key.
pub fn validate_job_id(job: &str) -> Result<()> {
    let ok = !job.is_empty()
        && job
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_config(
            "id",
            format!("job id {job:?} must be non-blank letters, digits, '-', '_' or '.'"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    #[test]
    fn offsets_round_trip_in_a_stable_text() {
        let offsets: Offsets = [(tp("b", 1), 7), (tp("a.x", 10), 3), (tp("a.x", 2), 42)]
            .into_iter()
            .collect();
        let text = offsets.encode();
        assert_eq!(text, r#"{"a.x":{"10":3,"2":42},"b":{"1":7}}"#);
        assert_eq!(Offsets::decode(&text, "s").unwrap(), offsets);
        let err = Offsets::decode(r#"{"a":{"x":1}}"#, "snapshot 9 of db.t").unwrap_err();
        assert!(err.message().contains("snapshot 9 of db.t"), "{err}");
        assert!(err.message().contains("\"x\""), "{err}");
    }

    #[test]
    fn newer_commits_win_and_older_ones_fill_in_their_partitions() {
        let mut newest: Offsets = [(tp("t", 0), 100)].into_iter().collect();
        newest.fill_from([(tp("t", 0), 50), (tp("t", 1), 60)].into_iter().collect());
        assert_eq!(newest.get(&tp("t", 0)), Some(100));
        assert_eq!(newest.get(&tp("t", 1)), Some(60));
        assert_eq!(newest.len(), 2);
    }

    #[test]
    fn offsets_restricted_to_some_partitions_keep_only_those() {
        let all: Offsets = [(tp("t", 0), 1), (tp("t", 1), 2), (tp("u", 0), 3)]
            .into_iter()
            .collect();
        assert_eq!(all.clone().restricted_to(None), all);
        assert_eq!(
            all.clone()
                .restricted_to(Some(&[tp("t", 1), tp("u", 0), tp("v", 9)])),
            [(tp("t", 1), 2), (tp("u", 0), 3)].into_iter().collect()
        );
        assert!(all.restricted_to(Some(&[])).is_empty());
    }

    #[test]
    fn a_checkpoint_commits_only_where_it_began() {
        let checkpoint = Checkpoint {
            job: "j".into(),
            ranges: [
                (
                    tp("t", 0),
                    OffsetRange {
                        from: Some(10),
                        to: 20,
                    },
                ),
                (tp("t", 1), OffsetRange { from: None, to: 5 }),
            ]
            .into_iter()
            .collect(),
        };
        let stored: Offsets = [(tp("t", 0), 10)].into_iter().collect();
        checkpoint.check_against(&stored, "db.t").unwrap();
        assert_eq!(
            checkpoint.ends(),
            [(tp("t", 0), 20), (tp("t", 1), 5)].into_iter().collect()
        );

        // Another process got partition 0 further first.
        let moved: Offsets = [(tp("t", 0), 15)].into_iter().collect();
        let err = checkpoint.check_against(&moved, "db.t").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict);
        assert!(!err.is_retryable());
        assert!(err.message().contains("offset 15 of partition t/0"), "{err}");
        assert!(err.message().contains("began at offset 10"), "{err}");
        // Or committed partition 1 before this job's first checkpoint of it.
        let both: Offsets = [(tp("t", 0), 10), (tp("t", 1), 3)].into_iter().collect();
        let err = checkpoint.check_against(&both, "db.t").unwrap_err();
        assert!(err.message().contains("began at no offset"), "{err}");
    }

    #[test]
    fn checkpoint_ids_follow_the_ranges() {
        let one = |to| Checkpoint {
            job: "j".into(),
            ranges: [(tp("t", 0), OffsetRange { from: Some(1), to })]
                .into_iter()
                .collect(),
        };
        assert_eq!(one(5).id_text(), one(5).id_text());
        assert_ne!(one(5).id_text(), one(6).id_text());
    }

    #[test]
    fn job_ids_fit_in_a_property_key() {
        validate_job_id("orders-to-lake_v2.1").unwrap();
        for bad in ["", " ", "a b", "a/b", "ü"] {
            let err = validate_job_id(bad).unwrap_err();
            assert!(err.message().contains("job id"), "{err}");
        }
        assert_eq!(offsets_key("j1"), "outflow.offsets.j1");
    }
}
