//! Which files a compaction rewrites together: pure, so the rules are tested without a table.

use std::collections::BTreeMap;

/// The sizes a plan is made with, all given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactSettings {
    /// The size of the files written.
    pub target_bytes: u64,
    /// Files smaller than this are candidates.
    pub min_file_bytes: u64,
    /// See [`super::CompactOptions::min_input_files`].
    pub min_input_files: usize,
    /// See [`super::CompactOptions::max_group_bytes`].
    pub max_group_bytes: u64,
    /// Files with at least this many delete files applying to them are rewritten whatever
    /// their size, alone if need be; `None`: deletes do not count.
    pub delete_file_threshold: Option<usize>,
}

/// A live data file, as the plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileInfo {
    /// Its path.
    pub path: String,
    /// The partition spec it was written for.
    pub spec_id: i32,
    /// Its partition, as a path (`region=eu/day=2026-11-30`; empty when unpartitioned).
    pub partition: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its rows.
    pub records: u64,
    /// The delete files that apply to it.
    pub deletes: usize,
}

/// Files to rewrite together: all of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedGroup {
    /// The partition spec.
    pub spec_id: i32,
    /// The partition, as a path.
    pub partition: String,
    /// Indexes of the files, into the plan's input.
    pub files: Vec<usize>,
    /// Their bytes.
    pub bytes: u64,
}

/// Groups `files` for rewriting; see the module docs. Files are packed largest first, so a
/// partition's groups come out even.
pub fn plan_compaction(files: &[FileInfo], settings: &CompactSettings) -> Vec<PlannedGroup> {
    let mut partitions: BTreeMap<(i32, &str), Vec<usize>> = BTreeMap::new();
    let too_many_deletes = |file: &FileInfo| {
        settings
            .delete_file_threshold
            .is_some_and(|n| file.deletes >= n.max(1))
    };
    for (i, file) in files.iter().enumerate() {
        if file.bytes < settings.min_file_bytes || too_many_deletes(file) {
            partitions
                .entry((file.spec_id, &file.partition))
                .or_default()
                .push(i);
        }
    }
    let mut groups = Vec::new();
    for ((spec_id, partition), mut members) in partitions {
        members.sort_by_key(|&i| (std::cmp::Reverse(files[i].bytes), i));
        // First fit into groups of at most max_group_bytes.
        let mut bins: Vec<PlannedGroup> = Vec::new();
        for i in members {
            let bytes = files[i].bytes;
            match bins
                .iter_mut()
                .find(|b| b.bytes + bytes <= settings.max_group_bytes)
            {
                Some(bin) => {
                    bin.files.push(i);
                    bin.bytes += bytes;
                }
                None => bins.push(PlannedGroup {
                    spec_id,
                    partition: partition.to_string(),
                    files: vec![i],
                    bytes,
                }),
            }
        }
        groups.extend(bins.into_iter().filter(|b| {
            b.files.len() >= settings.min_input_files.max(2)
                || (b.files.len() > 1 && b.bytes >= settings.target_bytes)
                || b.files.iter().any(|&i| too_many_deletes(&files[i]))
        }));
    }
    for group in &mut groups {
        group.files.sort_unstable();
    }
    groups
}

/// Consecutive runs of groups (of these input sizes) of at most `max_bytes` each; a group
/// larger than that is a run of its own.
pub fn commit_parts(sizes: &[u64], max_bytes: u64) -> Vec<std::ops::Range<usize>> {
    let mut parts: Vec<(std::ops::Range<usize>, u64)> = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        match parts.last_mut() {
            Some((range, bytes)) if *bytes + size <= max_bytes => {
                range.end = i + 1;
                *bytes += size;
            }
            _ => parts.push((i..i + 1, size)),
        }
    }
    parts.into_iter().map(|(range, _)| range).collect()
}

/// Whether a partition path holds every `field=value` of `wanted`.
pub(super) fn matches_partitions(partition: &str, wanted: &[(String, String)]) -> bool {
    wanted.iter().all(|(field, value)| {
        partition
            .split('/')
            .any(|part| part.split_once('=') == Some((field.as_str(), value.as_str())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(partition: &str, bytes: u64) -> FileInfo {
        FileInfo {
            path: format!("{partition}-{bytes}"),
            spec_id: 0,
            partition: partition.to_string(),
            bytes,
            records: 1,
            deletes: 0,
        }
    }

    fn settings(min_input_files: usize, max_group_bytes: u64) -> CompactSettings {
        CompactSettings {
            target_bytes: 100,
            min_file_bytes: 75,
            min_input_files,
            max_group_bytes,
            delete_file_threshold: None,
        }
    }

    fn shape(groups: &[PlannedGroup]) -> Vec<(&str, Vec<usize>)> {
        groups
            .iter()
            .map(|g| (g.partition.as_str(), g.files.clone()))
            .collect()
    }

    #[test]
    fn small_files_group_by_partition_and_large_ones_stay() {
        let files = vec![
            file("a", 10),
            file("b", 10),
            file("a", 80),
            file("a", 20),
            file("b", 10),
            file("a", 30),
        ];
        assert_eq!(
            shape(&plan_compaction(&files, &settings(2, 1000))),
            [("a", vec![0, 3, 5]), ("b", vec![1, 4])]
        );
    }

    #[test]
    fn too_few_files_stay_unless_they_fill_a_target_file() {
        let few = vec![file("a", 10), file("a", 10)];
        assert_eq!(plan_compaction(&few, &settings(5, 1000)), []);
        let full = vec![file("a", 60), file("a", 50)];
        assert_eq!(
            shape(&plan_compaction(&full, &settings(5, 1000))),
            [("a", vec![0, 1])]
        );
        // One file alone is never rewritten.
        assert_eq!(plan_compaction(&[file("a", 10)], &settings(1, 1000)), []);
    }

    #[test]
    fn files_with_enough_deletes_are_rewritten_whatever_their_size() {
        let mut deleted = file("a", 500);
        deleted.deletes = 2;
        let files = vec![file("a", 500), deleted, file("b", 10)];
        let with = CompactSettings {
            delete_file_threshold: Some(2),
            ..settings(5, 1000)
        };
        // Alone in its partition, and large: rewritten for its deletes.
        assert_eq!(shape(&plan_compaction(&files, &with)), [("a", vec![1])]);
        let fewer = CompactSettings {
            delete_file_threshold: Some(3),
            ..with
        };
        assert_eq!(plan_compaction(&files, &fewer), []);
        assert_eq!(plan_compaction(&files, &settings(5, 1000)), []);
    }

    #[test]
    fn groups_are_bounded_in_bytes() {
        let files: Vec<FileInfo> = (0..6).map(|_| file("a", 50)).collect();
        let groups = plan_compaction(&files, &settings(2, 100));
        assert_eq!(groups.len(), 3);
        assert!(groups.iter().all(|g| g.bytes == 100 && g.files.len() == 2));
    }

    #[test]
    fn files_of_different_specs_never_share_a_group() {
        let mut other = file("a", 10);
        other.spec_id = 1;
        let files = vec![file("a", 10), other.clone(), file("a", 10), other];
        let groups = plan_compaction(&files, &settings(2, 1000));
        assert_eq!(
            groups
                .iter()
                .map(|g| (g.spec_id, g.files.clone()))
                .collect::<Vec<_>>(),
            [(0, vec![0, 2]), (1, vec![1, 3])]
        );
    }

    #[test]
    fn partial_progress_commits_runs_of_groups_up_to_the_size() {
        assert_eq!(commit_parts(&[40, 40, 40, 10], 100), [0..2, 2..4]);
        assert_eq!(commit_parts(&[150, 10, 10], 100), [0..1, 1..3]);
        assert_eq!(commit_parts(&[5, 5, 5], 5), [0..1, 1..2, 2..3]);
        assert_eq!(commit_parts(&[], 5), Vec::<std::ops::Range<usize>>::new());
    }

    #[test]
    fn partition_filters_match_path_segments() {
        let wanted = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let path = "region=eu/day=2026-11-30";
        assert!(matches_partitions(path, &[]));
        assert!(matches_partitions(path, &wanted(&[("day", "2026-11-30")])));
        assert!(matches_partitions(
            path,
            &wanted(&[("region", "eu"), ("day", "2026-11-30")])
        ));
        assert!(!matches_partitions(path, &wanted(&[("region", "e")])));
        assert!(!matches_partitions(
            path,
            &wanted(&[("day", "2026-11-30"), ("region", "us")])
        ));
    }
}
