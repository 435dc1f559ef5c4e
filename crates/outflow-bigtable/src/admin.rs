//! Creating and reconciling tables: what happens before a destination first receives data,
//! and what `outflow bigtable ensure-table` does.
//!
//! - A missing table is created with the declared families, their rules and their types;
//!   under [`CreateDisposition::CreateNever`] it is an error that names the table.
//! - An existing table is reconciled add-only: declared families it lacks are created, all
//!   in one ModifyColumnFamilies call. Nothing is ever dropped or modified, and an existing
//!   family's GC rule is neither compared nor updated.
//! - When the options declare any aggregate family, every declared family that already
//!   exists must have the declared value type; a mismatch fails before anything is
//!   changed, naming the family and both types. Raw-only options check names only.
//! - Preparing is safe to run from several writers at once: a table or family that another
//!   writer created in between is re-read, not reported as an error.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use async_trait::async_trait;
use gcloud_sdk::google::bigtable::admin::v2::modify_column_families_request::{
    Modification, modification::Mod,
};
use gcloud_sdk::google::bigtable::admin::v2::{
    self as proto, CreateTableRequest, DeleteTableRequest, GetTableRequest, ModifyColumnFamiliesRequest,
};
use gcloud_sdk::tonic::Code;
use outflow_core::{
    CreateDisposition, DestinationPlan, Error, ErrorKind, LoadedFiles, Offsets, PlannedAction,
    PrepareDestination, Result, TopicPartition,
};

use crate::client::BigtableClient;
use crate::options::{ColumnFamily, GcRule, TableCreateOptions, ValueType};
use crate::schema::RowEncoder;
use crate::sink::Shared;

/// How often preparation re-reads a table that other writers keep changing under it.
const MAX_ROUNDS: usize = 8;

/// A column family as the table has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExistingFamily {
    /// The family's name.
    pub name: String,
    /// Its GC rule; `None` when it has none (every cell is kept).
    pub gc_rule: Option<GcRule>,
    /// Its value type, when it is one Outflow declares.
    pub value_type: Option<ValueType>,
    /// The value type in words: `raw`, `sum`... or the type the service reported.
    pub value_type_text: String,
}

/// A table's column families, sorted by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableDescription {
    /// The table id.
    pub table: String,
    /// The families.
    pub families: Vec<ExistingFamily>,
}

impl TableDescription {
    /// The family called `name`.
    pub fn family(&self, name: &str) -> Option<&ExistingFamily> {
        self.families.iter().find(|f| f.name == name)
    }
}

/// The value type of each family of a table, as the writer needs it: `Err` holds the
/// description of a type Outflow cannot write.
pub(crate) type FamilyTypes = HashMap<String, std::result::Result<ValueType, String>>;

fn family_types(families: &HashMap<String, proto::ColumnFamily>) -> FamilyTypes {
    families
        .iter()
        .map(|(name, f)| (name.clone(), ValueType::from_proto(f.value_type.as_ref())))
        .collect()
}

fn type_text(family: &proto::ColumnFamily) -> String {
    match ValueType::from_proto(family.value_type.as_ref()) {
        Ok(t) => t.to_string(),
        Err(other) => other,
    }
}

/// Compares declared families with the table's: the declared families the table lacks,
/// or, for options with aggregates, an error naming every family whose type differs.
pub(crate) fn missing_families<'a>(
    table: &str,
    options: &'a TableCreateOptions,
    existing: &HashMap<String, proto::ColumnFamily>,
) -> Result<Vec<&'a ColumnFamily>> {
    if options.has_aggregates() {
        let mismatches: Vec<String> = options
            .column_families()
            .iter()
            .filter_map(|declared| {
                let actual = existing.get(declared.name())?;
                match ValueType::from_proto(actual.value_type.as_ref()) {
                    Ok(t) if t == declared.value_type() => None,
                    _ => Some(format!(
                        "column family {:?} is declared {} but table {table} has it as {}",
                        declared.name(),
                        declared.value_type(),
                        type_text(actual)
                    )),
                }
            })
            .collect();
        if !mismatches.is_empty() {
            let first = options
                .column_families()
                .iter()
                .find(|d| {
                    existing
                        .get(d.name())
                        .is_some_and(|a| ValueType::from_proto(a.value_type.as_ref()) != Ok(d.value_type()))
                })
                .map(|d| d.name().to_string())
                .unwrap_or_default();
            return Err(Error::new(ErrorKind::SchemaIncompatible, mismatches.join("; "))
                .with_context("table", table)
                .with_context("family", first));
        }
    }
    Ok(options
        .column_families()
        .iter()
        .filter(|f| !existing.contains_key(f.name()))
        .collect())
}

fn names(families: &[&ColumnFamily]) -> String {
    families.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
}

impl BigtableClient {
    /// The table's families, or `None` when the table does not exist.
    pub async fn describe_table(&self, table: &str) -> Result<Option<TableDescription>> {
        let Some(found) = self.get_table(table).await? else {
            return Ok(None);
        };
        let mut families: Vec<ExistingFamily> = found
            .column_families
            .iter()
            .map(|(name, f)| ExistingFamily {
                name: name.clone(),
                gc_rule: f.gc_rule.as_ref().and_then(GcRule::from_proto),
                value_type: ValueType::from_proto(f.value_type.as_ref()).ok(),
                value_type_text: type_text(f),
            })
            .collect();
        families.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Some(TableDescription {
            table: table.to_string(),
            families,
        }))
    }

    /// Creates `table` or reconciles it with `options` (see the module docs), and says what
    /// it did: `create`, `update` (families added, named in the details) or `unchanged`.
    ///
    /// `options` may be `None` only under `CreateNever`, and then only checks that the
    /// table exists.
    pub async fn ensure_table(
        &self,
        table: &str,
        disposition: CreateDisposition,
        options: Option<&TableCreateOptions>,
    ) -> Result<DestinationPlan> {
        Ok(self.prepare_table(table, disposition, options).await?.0)
    }

    /// What [`BigtableClient::ensure_table`] would do, changing nothing. An error preparing
    /// would hit (a type mismatch, a missing table under `CreateNever`) is reported in the
    /// plan with action `fail`; `Err` means the table could not be read.
    pub async fn plan_table(
        &self,
        table: &str,
        disposition: CreateDisposition,
        options: Option<&TableCreateOptions>,
    ) -> Result<DestinationPlan> {
        let path = self.table_path(table);
        let Some(found) = self.get_table(table).await? else {
            return Ok(match (disposition, options) {
                (CreateDisposition::CreateNever, _) => {
                    DestinationPlan::failed(table, &missing_table(&path, disposition))
                }
                (_, None) => DestinationPlan::failed(table, &missing_table(&path, disposition)),
                (_, Some(options)) => options
                    .column_families()
                    .iter()
                    .fold(DestinationPlan::new(table, PlannedAction::Create), |plan, f| {
                        plan.with_detail(format!("create family {}", f.describe()))
                    }),
            });
        };
        let Some(options) = options else {
            return Ok(DestinationPlan::new(table, PlannedAction::Unchanged));
        };
        Ok(match missing_families(table, options, &found.column_families) {
            Err(e) => DestinationPlan::failed(table, &e),
            Ok(missing) if missing.is_empty() => DestinationPlan::new(table, PlannedAction::Unchanged),
            Ok(missing) => missing
                .iter()
                .fold(DestinationPlan::new(table, PlannedAction::Update), |plan, f| {
                    plan.with_detail(format!("add family {}", f.describe()))
                }),
        })
    }

    /// Creates or reconciles, and returns the plan carried out with the table's families.
    pub(crate) async fn prepare_table(
        &self,
        table: &str,
        disposition: CreateDisposition,
        options: Option<&TableCreateOptions>,
    ) -> Result<(DestinationPlan, FamilyTypes)> {
        let path = self.table_path(table);
        for round in 0..MAX_ROUNDS {
            let Some(found) = self.get_table(table).await? else {
                let options = match (disposition, options) {
                    (CreateDisposition::CreateIfNeeded, Some(options)) => options,
                    _ => return Err(missing_table(&path, disposition)),
                };
                match self.create_table(table, options).await {
                    Ok(created) => {
                        tracing::info!(table = %path, families = %names(&options.column_families().iter().collect::<Vec<_>>()), "created Bigtable table");
                        let plan = options
                            .column_families()
                            .iter()
                            .fold(DestinationPlan::new(table, PlannedAction::Create), |plan, f| {
                                plan.with_detail(format!("created family {}", f.describe()))
                            });
                        let families = if created.column_families.is_empty() {
                            options
                                .column_families()
                                .iter()
                                .map(|f| (f.name().to_string(), Ok(f.value_type())))
                                .collect()
                        } else {
                            family_types(&created.column_families)
                        };
                        return Ok((plan, families));
                    }
                    // Another writer created it first: reconcile with what it made.
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                        tracing::debug!(table = %path, round, "table created concurrently; re-reading");
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            };
            let Some(options) = options else {
                return Ok((
                    DestinationPlan::new(table, PlannedAction::Unchanged),
                    family_types(&found.column_families),
                ));
            };
            let missing = missing_families(table, options, &found.column_families)?;
            if missing.is_empty() {
                return Ok((
                    DestinationPlan::new(table, PlannedAction::Unchanged),
                    family_types(&found.column_families),
                ));
            }
            match self.add_families(table, &missing).await {
                Ok(updated) => {
                    tracing::info!(table = %path, families = %names(&missing), "added column families");
                    let plan = missing
                        .iter()
                        .fold(DestinationPlan::new(table, PlannedAction::Update), |plan, f| {
                            plan.with_detail(format!("added family {}", f.describe()))
                        });
                    let mut families = family_types(&found.column_families);
                    if updated.column_families.is_empty() {
                        families.extend(missing.iter().map(|f| (f.name().to_string(), Ok(f.value_type()))));
                    } else {
                        families = family_types(&updated.column_families);
                    }
                    return Ok((plan, families));
                }
                // Another writer added one of them in between: re-read and add what is
                // still missing (checking its type, when types matter).
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    tracing::debug!(table = %path, round, "column family created concurrently; re-reading");
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "table {path} kept changing while it was being prepared; gave up after {MAX_ROUNDS} rounds"
            ),
        )
        .with_context("table", table))
    }

    /// GetTable with the schema view; `None` when the table does not exist.
    async fn get_table(&self, table: &str) -> Result<Option<proto::Table>> {
        let name = self.table_path(table);
        let doing = format!("reading table {name}");
        let message = || GetTableRequest {
            name: name.clone(),
            view: proto::table::View::SchemaView as i32,
        };
        let result = self
            .admin_call(
                &doing,
                ("name", &name),
                message,
                |mut admin, request| async move {
                    match admin.get_table(request).await {
                        Ok(response) => Ok(Some(response.into_inner())),
                        Err(status) if status.code() == Code::NotFound => Ok(None),
                        Err(status) => Err(status),
                    }
                },
            )
            .await?;
        Ok(result)
    }

    async fn create_table(&self, table: &str, options: &TableCreateOptions) -> Result<proto::Table> {
        let parent = self.instance_path();
        let families = names(&options.column_families().iter().collect::<Vec<_>>());
        let doing = format!(
            "creating table {} with column families {families}",
            self.table_path(table)
        );
        let message = || CreateTableRequest {
            parent: parent.clone(),
            table_id: table.to_string(),
            table: Some(proto::Table {
                column_families: options
                    .column_families()
                    .iter()
                    .map(|f| (f.name().to_string(), f.to_proto()))
                    .collect(),
                ..Default::default()
            }),
            initial_splits: Vec::new(),
        };
        self.admin_call(
            &doing,
            ("parent", &parent),
            message,
            |mut admin, request| async move { admin.create_table(request).await.map(|r| r.into_inner()) },
        )
        .await
        .map_err(|e| e.with_context("table", table))
    }

    /// Deletes `table` (what aborting a sink does to a table it created and wrote nothing
    /// to); a table already gone is fine.
    pub(crate) async fn delete_table(&self, table: &str) -> Result<()> {
        let name = self.table_path(table);
        let doing = format!("deleting table {name}");
        let message = || DeleteTableRequest { name: name.clone() };
        self.admin_call(
            &doing,
            ("name", &name),
            message,
            |mut admin, request| async move {
                match admin.delete_table(request).await {
                    Ok(_) => Ok(()),
                    Err(status) if status.code() == Code::NotFound => Ok(()),
                    Err(status) => Err(status),
                }
            },
        )
        .await
        .map_err(|e| e.with_context("table", table))
    }

    async fn add_families(&self, table: &str, families: &[&ColumnFamily]) -> Result<proto::Table> {
        let name = self.table_path(table);
        let doing = format!("adding column families {} to table {name}", names(families));
        let message = || ModifyColumnFamiliesRequest {
            name: name.clone(),
            modifications: families
                .iter()
                .map(|f| Modification {
                    id: f.name().to_string(),
                    update_mask: None,
                    r#mod: Some(Mod::Create(f.to_proto())),
                })
                .collect(),
            ignore_warnings: false,
        };
        self.admin_call(
            &doing,
            ("name", &name),
            message,
            |mut admin, request| async move {
                admin
                    .modify_column_families(request)
                    .await
                    .map(|r| r.into_inner())
            },
        )
        .await
        .map_err(|e| e.with_context("table", table))
    }
}

fn missing_table(path: &str, disposition: CreateDisposition) -> Error {
    let why = match disposition {
        CreateDisposition::CreateNever => "and the create disposition is create_never",
        CreateDisposition::CreateIfNeeded => "and no table options say which column families to create",
    };
    Error::new(ErrorKind::NotFound, format!("table {path} does not exist, {why}")).with_context("table", path)
}

/// Prepares Bigtable destination tables (creation, add-only reconciliation of families, the
/// mapping checked against them) or says what it would do; shares what it prepared with the
/// sink it came from ([`BigtableSink::preparer`](crate::BigtableSink::preparer)).
#[derive(Clone)]
pub struct BigtablePreparer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for BigtablePreparer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BigtablePreparer")
            .field("destination", &self.shared.settings().destination)
            .finish_non_exhaustive()
    }
}

impl BigtablePreparer {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        BigtablePreparer { shared }
    }
}

#[async_trait]
impl PrepareDestination for BigtablePreparer {
    async fn plan(&self, destination: &str, schema: &SchemaRef) -> Result<DestinationPlan> {
        let mut plan = self.plan_table(destination).await?;
        if plan.action == PlannedAction::Fail {
            return Ok(plan);
        }
        if let Some(detail) = self.shared.settings().changes_detail() {
            plan = plan.with_detail(detail);
        }
        Ok(match self.mapping_error(destination, schema).await? {
            None => plan,
            Some(e) => DestinationPlan::failed(destination, &e),
        })
    }

    async fn prepare(&self, destination: &str, schema: &SchemaRef) -> Result<DestinationPlan> {
        // Rows that cannot be mapped onto the families the table would have fail before it
        // is created or given families, as `plan` says. (A table that cannot be prepared
        // fails in `prepare_once`, with its own error.)
        if self.plan_table(destination).await?.action != PlannedAction::Fail
            && let Some(e) = self.mapping_error(destination, schema).await?
        {
            return Err(e);
        }
        let (plan, prepared) = self.shared.prepare_once(destination).await?;
        let schema = self.shared.settings().encoded_schema(schema);
        let encoder = prepared.encoder(&schema, &self.shared.settings().mapping, destination)?;
        self.shared.settings().check_replays(&encoder, destination)?;
        Ok(plan)
    }

    async fn loaded_files(&self, destination: &str) -> Result<Option<LoadedFiles>> {
        let client = self.shared.client().await?;
        if client.describe_table(destination).await?.is_none() {
            return Ok(Some(LoadedFiles::new()));
        }
        let settled = crate::loads::held(client, destination, &self.shared.load_time).await?;
        Ok(Some(settled.held))
    }

    async fn stored_offsets(
        &self,
        destination: &str,
        job: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Option<Offsets>> {
        let client = self.shared.client().await?;
        Ok(Some(
            crate::offsets::stored_offsets(client, destination, job)
                .await?
                .restricted_to(partitions),
        ))
    }
}

impl BigtablePreparer {
    /// What preparing the table alone would do, changing nothing.
    async fn plan_table(&self, destination: &str) -> Result<DestinationPlan> {
        let settings = self.shared.settings();
        let client = self.shared.client().await?;
        client
            .plan_table(destination, settings.disposition, settings.table_options.as_ref())
            .await
    }

    /// The error rows of `schema` would hit against the families `destination` would have
    /// once prepared (its own, plus those the options add), if any.
    async fn mapping_error(&self, destination: &str, schema: &SchemaRef) -> Result<Option<Error>> {
        let settings = self.shared.settings();
        let client = self.shared.client().await?;
        let mut families: FamilyTypes = settings
            .table_options
            .iter()
            .flat_map(|o| o.column_families())
            .map(|f| (f.name().to_string(), Ok(f.value_type())))
            .collect();
        if let Some(described) = client.describe_table(destination).await? {
            for f in described.families {
                families.insert(f.name, f.value_type.ok_or(f.value_type_text));
            }
        }
        let schema = settings.encoded_schema(schema);
        Ok(RowEncoder::new(&schema, &settings.mapping, &families, destination).err())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn existing(families: &[(&str, ValueType)]) -> HashMap<String, proto::ColumnFamily> {
        families
            .iter()
            .map(|(name, t)| {
                (
                    name.to_string(),
                    ColumnFamily::new(*name)
                        .with_value_type(*t)
                        .with_gc_rule(GcRule::MaxVersions(1))
                        .to_proto(),
                )
            })
            .collect()
    }

    fn options(families: &[(&str, ValueType)]) -> TableCreateOptions {
        families
            .iter()
            .fold(TableCreateOptions::builder(), |b, (name, t)| {
                b.column_family(
                    ColumnFamily::new(*name)
                        .with_value_type(*t)
                        .with_gc_rule(GcRule::MaxAge(Duration::from_secs(60))),
                )
            })
            .build()
            .unwrap()
    }

    #[test]
    fn only_missing_families_are_added() {
        let declared = options(&[
            ("a", ValueType::Raw),
            ("b", ValueType::Raw),
            ("c", ValueType::Raw),
        ]);
        let missing = missing_families(
            "t",
            &declared,
            &existing(&[("b", ValueType::Raw), ("z", ValueType::Sum)]),
        )
        .unwrap();
        assert_eq!(missing.iter().map(|f| f.name()).collect::<Vec<_>>(), ["a", "c"]);
    }

    #[test]
    fn raw_only_options_check_names_only() {
        // "b" exists as an aggregate and with another GC rule: neither is compared.
        let declared = options(&[("b", ValueType::Raw)]);
        let missing = missing_families("t", &declared, &existing(&[("b", ValueType::Sum)])).unwrap();
        assert!(missing.is_empty());
    }

    #[test]
    fn aggregate_options_require_matching_types_naming_family_and_types() {
        let declared = options(&[
            ("plain", ValueType::Raw),
            ("clicks", ValueType::Sum),
            ("new", ValueType::Max),
        ]);
        let err = missing_families(
            "t",
            &declared,
            &existing(&[("plain", ValueType::Raw), ("clicks", ValueType::Raw)]),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::SchemaIncompatible);
        assert_eq!(err.context_value("family"), Some("clicks"));
        assert!(
            err.to_string()
                .contains("column family \"clicks\" is declared sum but table t has it as raw"),
            "{err}"
        );
        // A raw declaration against an aggregate family fails too, once types matter.
        let err = missing_families(
            "t",
            &declared,
            &existing(&[("plain", ValueType::Min), ("clicks", ValueType::Sum)]),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("\"plain\" is declared raw but table t has it as min"),
            "{err}"
        );
        // Matching types pass; the missing family is added.
        let missing = missing_families(
            "t",
            &declared,
            &existing(&[("plain", ValueType::Raw), ("clicks", ValueType::Sum)]),
        )
        .unwrap();
        assert_eq!(missing.iter().map(|f| f.name()).collect::<Vec<_>>(), ["new"]);
    }

    #[test]
    fn a_missing_table_error_names_the_table_and_why() {
        let err = missing_table("projects/p/instances/i/tables/t", CreateDisposition::CreateNever);
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(
            err.context_value("table"),
            Some("projects/p/instances/i/tables/t")
        );
        assert!(err.to_string().contains("create_never"), "{err}");
    }
}
