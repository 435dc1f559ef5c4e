//! Merging small manifests on append, so a table that takes many small commits keeps a
//! bounded number of manifests per snapshot.
//!
//! The rules are Iceberg's (the table properties `commit.manifest-merge.enabled`, default
//! true; `commit.manifest.min-count-to-merge`, default 100;
//! `commit.manifest.target-size-bytes`, default 8 MiB), applied as Java's merging append
//! applies them: the data manifests of the current partition spec, the new one first, are
//! packed into bins of at most the target size, filling from the oldest end; a bin of one
//! manifest is kept, the bin holding the new manifest is kept while it has fewer manifests
//! than the minimum count, and every other bin becomes one manifest. A merged manifest
//! carries the live entries (the new files as added, earlier ones as existing, with their
//! snapshot and sequence numbers) and drops entries earlier snapshots marked deleted.
//! Delete manifests and manifests of older specs are kept as they are.

use std::collections::HashMap;

use iceberg::io::FileIO;
use iceberg::spec::{
    FormatVersion, ManifestContentType, ManifestFile, ManifestStatus, PartitionSpecRef, Schema,
};
use outflow_core::{Error, ErrorKind, Result};

use super::AppendManifest;
use crate::client::IcebergResultExt;

/// The table property that turns merging on or off.
pub const MERGE_ENABLED: &str = "commit.manifest-merge.enabled";
/// The table property with the number of manifests that makes the newest bin merge.
pub const MIN_COUNT_TO_MERGE: &str = "commit.manifest.min-count-to-merge";
/// The table property with a merged manifest's target size.
pub const TARGET_SIZE_BYTES: &str = "commit.manifest.target-size-bytes";

/// How a table merges manifests, from its properties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeSettings {
    /// Whether appends merge at all.
    pub enabled: bool,
    /// Manifests the newest bin needs before it is merged.
    pub min_count: usize,
    /// A bin's size limit, in bytes of manifests.
    pub target_bytes: i64,
}

impl MergeSettings {
    /// The settings in `properties`, Iceberg's defaults for those not set; a value that
    /// does not parse is an error naming the property.
    pub fn of(properties: &HashMap<String, String>) -> Result<MergeSettings> {
        fn parse<T: std::str::FromStr>(
            properties: &HashMap<String, String>,
            key: &str,
            default: T,
        ) -> Result<T> {
            match properties.get(key) {
                None => Ok(default),
                Some(value) => value.trim().parse().map_err(|_| {
                    Error::invalid_config(
                        key,
                        format!("the table property is {value:?}, which is not valid here"),
                    )
                }),
            }
        }
        Ok(MergeSettings {
            enabled: parse(properties, MERGE_ENABLED, true)?,
            min_count: parse(properties, MIN_COUNT_TO_MERGE, 100)?,
            target_bytes: parse(properties, TARGET_SIZE_BYTES, 8 * 1024 * 1024)?,
        })
    }
}

/// A run of manifests of a group, in the group's order: merged into one, or kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bin {
    /// Positions in the group.
    pub manifests: Vec<usize>,
    /// Whether they become one manifest.
    pub merge: bool,
}

/// The bins of a group of manifests of `lengths` bytes, the newest (position 0) first;
/// see the module docs.
pub fn plan(lengths: &[i64], settings: &MergeSettings) -> Vec<Bin> {
    // Filled from the oldest end, so the bin with the newest manifest takes the remainder.
    let mut bins: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut weight = 0i64;
    for i in (0..lengths.len()).rev() {
        if !current.is_empty() && weight + lengths[i] > settings.target_bytes {
            bins.push(std::mem::take(&mut current));
            weight = 0;
        }
        current.push(i);
        weight += lengths[i];
    }
    if !current.is_empty() {
        bins.push(current);
    }
    bins.reverse();
    bins.into_iter()
        .map(|mut manifests| {
            manifests.reverse();
            let merge =
                manifests.len() > 1 && !(manifests.contains(&0) && manifests.len() < settings.min_count);
            Bin { manifests, merge }
        })
        .collect()
}

/// How a snapshot's manifests would merge: the group that may (data manifests of one spec,
/// in the snapshot's order) and its bins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPlan {
    /// Positions in the snapshot's manifests of the group's members.
    pub group: Vec<usize>,
    /// The group's bins, by position in `group`.
    pub bins: Vec<Bin>,
}

impl GroupPlan {
    /// The plan for `manifests` (the new ones first) of spec `spec_id`, by `settings`;
    /// nothing merges when merging is off.
    pub fn of(manifests: &[ManifestFile], spec_id: i32, settings: &MergeSettings) -> GroupPlan {
        let group: Vec<usize> = (0..manifests.len())
            .filter(|&i| {
                let m = &manifests[i];
                m.content == ManifestContentType::Data && m.partition_spec_id == spec_id
            })
            .collect();
        let bins = if settings.enabled {
            let lengths: Vec<i64> = group.iter().map(|&i| manifests[i].manifest_length).collect();
            plan(&lengths, settings)
        } else {
            Vec::new()
        };
        GroupPlan { group, bins }
    }

    /// How many manifests merging takes away (a merged bin of n becomes one).
    pub fn merged_away(&self) -> usize {
        self.bins
            .iter()
            .filter(|b| b.merge)
            .map(|b| b.manifests.len() - 1)
            .sum()
    }
}

/// What merging did to a snapshot's manifests.
#[derive(Debug, Default)]
pub struct Merged {
    /// The snapshot's manifests, for its manifest list.
    pub manifests: Vec<ManifestFile>,
    /// Manifest files written for it.
    pub written: Vec<String>,
    /// Manifests of this snapshot that were merged into others (written, now unused).
    pub replaced: Vec<String>,
}

/// What a snapshot's new manifests need to be merged: the table's schema and spec, and
/// where merged manifests go.
pub struct MergeContext<'a> {
    /// The table's files.
    pub io: &'a FileIO,
    /// Its format version.
    pub version: FormatVersion,
    /// Its current schema.
    pub schema: &'a Schema,
    /// Its default partition spec: the new files' spec.
    pub spec: &'a PartitionSpecRef,
    /// The snapshot being built.
    pub snapshot_id: i64,
    /// Names a new manifest file.
    pub path: &'a mut (dyn FnMut() -> String + Send),
}

/// Merges `manifests` (the new ones first, then those carried over from the parent) as
/// `plan` (made of them for the context's spec) says; see the module docs. Nothing changes
/// when this writer cannot write the spec's manifests (see [`AppendManifest::new`]).
pub async fn merge(
    context: MergeContext<'_>,
    manifests: Vec<ManifestFile>,
    plan: &GroupPlan,
) -> Result<Merged> {
    let unchanged = |manifests| Merged {
        manifests,
        ..Merged::default()
    };
    if plan.merged_away() == 0
        || AppendManifest::new(context.version, context.snapshot_id, context.schema, context.spec)?.is_none()
    {
        return Ok(unchanged(manifests));
    }
    let mut out = Merged::default();
    // Each merged bin takes the place of its first manifest; the others are dropped.
    let mut replacement: HashMap<usize, Option<ManifestFile>> = HashMap::new();
    for bin in plan.bins.iter().filter(|b| b.merge) {
        let members: Vec<usize> = bin.manifests.iter().map(|&g| plan.group[g]).collect();
        let mut merged =
            AppendManifest::new(context.version, context.snapshot_id, context.schema, context.spec)?
                .ok_or_else(|| Error::internal("the manifest writer stopped covering the spec"))?;
        for &i in &members {
            let manifest = &manifests[i];
            let loaded = manifest.load_manifest(context.io).await.doing(format_args!(
                "reading manifest {} to merge it",
                manifest.manifest_path
            ))?;
            for entry in loaded.entries() {
                let file = entry.data_file();
                match entry.status() {
                    ManifestStatus::Deleted => {}
                    ManifestStatus::Added if manifest.added_snapshot_id == context.snapshot_id => {
                        merged.add_file(file)?;
                    }
                    ManifestStatus::Added | ManifestStatus::Existing => {
                        let (Some(snapshot), Some(sequence), Some(file_sequence)) = (
                            entry.snapshot_id(),
                            entry.sequence_number(),
                            entry.file_sequence_number,
                        ) else {
                            return Err(Error::new(
                                ErrorKind::InvalidInput,
                                format!(
                                    "{}: an entry for {} has no snapshot or sequence number",
                                    manifest.manifest_path,
                                    file.file_path()
                                ),
                            ));
                        };
                        merged.add_existing(file, snapshot, sequence, file_sequence)?;
                    }
                }
            }
            if manifest.added_snapshot_id == context.snapshot_id {
                out.replaced.push(manifest.manifest_path.clone());
            }
            replacement.insert(i, None);
        }
        let path = (context.path)();
        let (bytes, entry) = merged.finish(path.clone());
        let output = context
            .io
            .new_output(&path)
            .doing(format_args!("writing manifest {path}"))?;
        let wrote = output.write(bytes.into()).await;
        wrote.doing(format_args!("writing manifest {path}"))?;
        out.written.push(path);
        replacement.insert(members[0], Some(entry));
    }
    for (i, manifest) in manifests.into_iter().enumerate() {
        match replacement.remove(&i) {
            None => out.manifests.push(manifest),
            Some(Some(merged)) => out.manifests.push(merged),
            Some(None) => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(min_count: usize, target_bytes: i64) -> MergeSettings {
        MergeSettings {
            enabled: true,
            min_count,
            target_bytes,
        }
    }

    fn shape(bins: &[Bin]) -> Vec<(Vec<usize>, bool)> {
        bins.iter().map(|b| (b.manifests.clone(), b.merge)).collect()
    }

    #[test]
    fn the_newest_bin_merges_at_the_minimum_count() {
        let small = vec![10; 3];
        assert_eq!(shape(&plan(&small, &settings(4, 1000))), [(vec![0, 1, 2], false)]);
        let four = vec![10; 4];
        assert_eq!(
            shape(&plan(&four, &settings(4, 1000))),
            [(vec![0, 1, 2, 3], true)]
        );
    }

    #[test]
    fn full_bins_of_older_manifests_merge_and_lone_manifests_stay() {
        // Target 25: from the oldest end, [4,3] (20), [2,1] (20), then [0] alone.
        let lengths = vec![10; 5];
        assert_eq!(
            shape(&plan(&lengths, &settings(100, 25))),
            [(vec![0], false), (vec![1, 2], true), (vec![3, 4], true)]
        );
        // A manifest over the target is a bin of its own, kept.
        let lengths = vec![10, 100, 10, 10];
        assert_eq!(
            shape(&plan(&lengths, &settings(100, 25))),
            [(vec![0], false), (vec![1], false), (vec![2, 3], true)]
        );
    }

    #[test]
    fn settings_come_from_the_table_properties() {
        let none = HashMap::new();
        assert_eq!(MergeSettings::of(&none).unwrap(), settings(100, 8 * 1024 * 1024));
        let set = HashMap::from([
            (MERGE_ENABLED.to_string(), "false".to_string()),
            (MIN_COUNT_TO_MERGE.to_string(), "5".to_string()),
        ]);
        let of = MergeSettings::of(&set).unwrap();
        assert!(!of.enabled);
        assert_eq!(of.min_count, 5);
        let bad = HashMap::from([(MIN_COUNT_TO_MERGE.to_string(), "lots".to_string())]);
        let err = MergeSettings::of(&bad).unwrap_err();
        assert!(err.to_string().contains(MIN_COUNT_TO_MERGE), "{err}");
    }
}
