//! Tables before data: creating them (with their partitioning, sort order, properties and
//! a name mapping), checking dispositions, evolving their schemas through the shared
//! planner, and [`IcebergPreparer`], which says what all that would do (`outflow plan`) or
//! does it ahead of the first row.

use std::collections::HashMap;
use std::slice;
use std::sync::{Arc, Mutex};

use arrow_schema::SchemaRef;
use async_trait::async_trait;
use iceberg::spec::Schema as IcebergSchema;
use iceberg::table::Table;
use iceberg::{TableIdent, TableRequirement, TableUpdate};
use outflow_core::evolution::EvolutionPlan;
use outflow_core::schema::{InputSchema, NameMapping, Schema};
use outflow_core::{
    Aborted, CreateDisposition, DestinationPlan, Error, ErrorKind, EvolutionPlanner,
    IncompatibleSchemaHandling, LoadedFiles, Offsets, PlannedAction, PrepareDestination, Result,
    SchemaEvolutionConfig, TopicPartition, WriteDisposition,
};

use crate::client::{IcebergCatalog, IcebergResultExt};
use crate::commit::{commit_schema, name_mapping, updated_name_mapping};
use crate::options::{IcebergSinkOptions, TableCreateOptions};
use crate::partition::{partition_spec, sort_order};
use crate::schema::{from_iceberg_schema, parse_table_ident, table_name, to_iceberg_schema};
use crate::upsert::{UpsertKey, keyed_schema, planned_input};

/// How many times a schema commit is re-planned after losing a race before giving up.
const SCHEMA_COMMIT_ATTEMPTS: usize = 5;

/// The tables a sink and its preparer created, shared between them.
#[derive(Clone, Debug, Default)]
pub(crate) struct CreatedTables(Arc<Mutex<Vec<TableIdent>>>);

impl CreatedTables {
    pub(crate) fn record(&self, ident: &TableIdent) {
        self.0.lock().expect("not poisoned").push(ident.clone());
    }

    /// The tables created so far; the record is emptied.
    pub(crate) fn take(&self) -> Vec<TableIdent> {
        std::mem::take(&mut *self.0.lock().expect("not poisoned"))
    }
}

/// Removes `ident`, created by this process, when it never received a commit (nothing
/// but its metadata and uncommitted files of this process is there); a table someone
/// committed to meanwhile is kept.
pub(crate) async fn remove_uncommitted(catalog: &IcebergCatalog, ident: &TableIdent, aborted: &mut Aborted) {
    let name = table_name(ident);
    match catalog.load_table(ident).await {
        Ok(None) => {}
        Ok(Some(table)) if table.metadata().current_snapshot().is_some() => {}
        Ok(Some(table)) => match catalog.purge_table(&table).await {
            Ok(()) => aborted.removed_tables.push(name),
            Err(e) => aborted
                .left
                .push(format!("table {name}, created by this run: {}", e.message())),
        },
        Err(e) => aborted.left.push(format!(
            "table {name}, created by this run, could not be checked: {}",
            e.message()
        )),
    }
}

/// Loads or creates the destination table for data shaped like `input`; says whether it
/// created it. Under `write_disposition: empty` a table with rows is an error.
pub(crate) async fn prepare_table(
    catalog: &IcebergCatalog,
    options: &IcebergSinkOptions,
    name: &str,
    input: &InputSchema,
) -> Result<(Table, bool)> {
    let ident = parse_table_ident(name)?;
    let (table, created) = match catalog.load_table(&ident).await? {
        Some(table) => (table, false),
        None if options.create_disposition() == CreateDisposition::CreateNever => {
            return Err(Error::not_found("table", name).with_context("create_disposition", "create_never"));
        }
        None => {
            let plan = EvolutionPlanner::new(options.schema_evolution()).plan(slice::from_ref(input))?;
            let (schema, key) = keyed_schema(creatable_schema(&plan, name)?, options.changes());
            create_with_name_mapping(catalog, &ident, &schema, &key, options.table_options()).await?
        }
    };
    if let Some(changes) = options.changes() {
        UpsertKey::of(&table, changes)?;
    }
    if options.write_disposition() == WriteDisposition::Empty && !created {
        refuse_rows(&table, name).await?;
    }
    Ok((table, created))
}

/// Under `write_disposition: empty`, a table holding rows is an error naming it.
async fn refuse_rows(table: &Table, name: &str) -> Result<()> {
    let rows = table_row_count(table).await?;
    if rows == 0 {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Conflict,
        format!("table {name} holds {rows} rows and write_disposition is empty"),
    )
    .with_context("table", name.to_string()))
}

/// Creates a table of `schema` laid out as `layout` says, with the `identifier` columns
/// (top-level, required) as its identifier fields, and gives it a name mapping; when
/// another writer created it first, loads theirs. Returns the table and whether this call
/// created it.
pub(crate) async fn create_with_name_mapping(
    catalog: &IcebergCatalog,
    ident: &TableIdent,
    schema: &Schema,
    identifier: &[String],
    layout: &TableCreateOptions,
) -> Result<(Table, bool)> {
    let name = table_name(ident);
    let iceberg_schema = with_identifier_fields(to_iceberg_schema(schema, 0)?, identifier)?;
    let spec = partition_spec(&iceberg_schema, layout.partition_fields())?;
    let order = sort_order(&iceberg_schema, layout.sort_order())?;
    let properties = layout.properties().clone().into_iter().collect();
    let (table, created) = catalog
        .create_table(ident, iceberg_schema, spec, order, properties)
        .await?;
    if !created {
        return Ok((table, false));
    }
    // iceberg-rust renumbers field ids on creation, so the name mapping is built from the
    // table it made, in a second commit.
    let mapping = NameMapping::from_schema(&from_iceberg_schema(table.metadata().current_schema()));
    let requirements = vec![TableRequirement::UuidMatch {
        uuid: table.metadata().uuid(),
    }];
    let updates = vec![TableUpdate::SetProperties {
        updates: HashMap::from([(NameMapping::PROPERTY.to_string(), mapping.to_json())]),
    }];
    catalog.commit(&table, requirements, updates).await?;
    tracing::info!(table = %name, "created");
    Ok((catalog.require_table(ident).await?, true))
}

/// `schema` with the top-level `columns` as its identifier fields (none: as it is).
fn with_identifier_fields(schema: IcebergSchema, columns: &[String]) -> Result<IcebergSchema> {
    if columns.is_empty() {
        return Ok(schema);
    }
    let ids = columns
        .iter()
        .map(|column| {
            schema.field_by_name(column).map(|f| f.id).ok_or_else(|| {
                Error::invalid_config("changes.key", format!("{column:?} is not a column of the input"))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    schema
        .into_builder()
        .with_identifier_field_ids(ids)
        .build()
        .map_err(|e| Error::invalid_config("changes.key", e.message()))
}

/// The schema a plan creates a table with, or an error listing why it cannot.
fn creatable_schema(plan: &EvolutionPlan, name: &str) -> Result<Schema> {
    match (&plan.schema, plan.all_compatible()) {
        (Some(schema), true) => Ok(schema.clone()),
        _ => Err(plan
            .rejection_error(&format!("cannot create table {name} from the input"))
            .with_context("table", name.to_string())),
    }
}

/// Checks, without I/O, that a table created from `schema` could take upserts: what
/// [`UpsertKey::of`] checks on the table, for `outflow plan` before it exists.
fn creatable_with_key(schema: &Schema, options: &IcebergSinkOptions, name: &str) -> Result<()> {
    let Some(changes) = options.changes() else {
        return Ok(());
    };
    let (mut keyed, key) = keyed_schema(schema.clone(), Some(changes));
    keyed.assign_missing_ids(keyed.max_field_id());
    let created = with_identifier_fields(to_iceberg_schema(&keyed, 0)?, &key)?;
    let partitioned = !options.table_options().partition_fields().is_empty();
    UpsertKey::in_schema(name, &created, partitioned, changes).map(|_| ())
}

/// Rows in the table's current snapshot, from its summary or, failing that, its manifests.
pub async fn table_row_count(table: &Table) -> Result<u64> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(0);
    };
    if let Some(total) = snapshot.summary().additional_properties.get("total-records")
        && let Ok(n) = total.parse()
    {
        return Ok(n);
    }
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .doing("reading the manifest list")?;
    let mut rows = 0;
    for manifest in list.entries() {
        let loaded = manifest
            .load_manifest(table.file_io())
            .await
            .doing("reading a manifest")?;
        rows += loaded
            .entries()
            .iter()
            .filter(|e| e.is_alive())
            .map(|e| e.data_file().record_count())
            .sum::<u64>();
    }
    Ok(rows)
}

/// Plans `input` against `table` with the table's name mapping.
fn plan_against(config: &SchemaEvolutionConfig, table: &Table, input: &InputSchema) -> Result<EvolutionPlan> {
    let current = from_iceberg_schema(table.metadata().current_schema());
    let mapping = name_mapping(table)?;
    let mut planner = EvolutionPlanner::new(config)
        .table(&current)
        .last_column_id(table.metadata().last_column_id());
    if let Some(mapping) = &mapping {
        planner = planner.name_mapping(mapping);
    }
    planner.plan(slice::from_ref(input))
}

/// A table after [`evolve`]: the plan its input was given, and the table as it is now.
pub(crate) struct Evolved {
    /// The plan for the input against the table (the last one made, after any lost race).
    pub plan: EvolutionPlan,
    /// The table, reloaded when its schema changed (by this call or by another writer).
    pub table: Table,
    /// Whether `table` was reloaded.
    pub reloaded: bool,
}

/// Plans `input` against `table` and commits the schema change the plan calls for,
/// re-planning when another writer changed the schema first.
pub(crate) async fn evolve(
    catalog: &IcebergCatalog,
    config: &SchemaEvolutionConfig,
    mut table: Table,
    input: &InputSchema,
) -> Result<Evolved> {
    let ident = table.identifier().clone();
    let name = table_name(&ident);
    let mut reloaded = false;
    for attempt in 1..=SCHEMA_COMMIT_ATTEMPTS {
        let plan = plan_against(config, &table, input)?;
        if !plan.changes_schema() || !plan.verdicts[0].verdict.is_compatible() {
            return Ok(Evolved {
                plan,
                table,
                reloaded,
            });
        }
        let new_schema = plan.schema.clone().expect("a compatible plan has a schema");
        let mapping = updated_name_mapping(&table, &new_schema, false)?;
        let committed = commit_schema(catalog, &table, &new_schema, mapping.as_ref()).await;
        match committed {
            Ok(()) => {
                tracing::info!(table = %name, changes = plan.applied_changes().count(), "schema evolved");
                let table = catalog.require_table(&ident).await?;
                return Ok(Evolved {
                    plan,
                    table,
                    reloaded: true,
                });
            }
            Err(e) if e.kind() == ErrorKind::Conflict && attempt < SCHEMA_COMMIT_ATTEMPTS => {
                table = catalog.require_table(&ident).await?;
                reloaded = true;
            }
            Err(e) => return Err(e),
        }
    }
    unreachable!("the last attempt returns")
}

/// Prepares Iceberg destination tables (creation, evolution) without writing; what
/// `outflow plan` asks. Get one from [`IcebergSink::preparer`](crate::IcebergSink::preparer).
#[derive(Clone, Debug)]
pub struct IcebergPreparer {
    catalog: IcebergCatalog,
    options: IcebergSinkOptions,
    created: CreatedTables,
}

impl IcebergPreparer {
    /// A preparer of the tables `options` names, through `catalog`.
    pub fn new(catalog: IcebergCatalog, options: IcebergSinkOptions) -> Self {
        IcebergPreparer {
            catalog,
            options,
            created: CreatedTables::default(),
        }
    }

    /// The same preparer, recording the tables it creates in `created` (a sink's, so that
    /// aborting the sink removes them when they never received a commit).
    pub(crate) fn recording_into(mut self, created: CreatedTables) -> Self {
        self.created = created;
        self
    }

    /// What preparing `destination` would do, and the error it would hit, if any.
    async fn plan_with_error(
        &self,
        destination: &str,
        schema: &SchemaRef,
    ) -> Result<(DestinationPlan, Option<Error>)> {
        let failed = |e: Error| Ok((DestinationPlan::failed(destination, &e), Some(e)));
        let changes = self.options.changes();
        let mut input = planned_input(schema, changes, changes.map_or(&[], |c| &c.key))?;
        let upsert = changes.map(|changes| {
            format!(
                "upsert by key [{}], operations from column {:?}",
                if changes.key.is_empty() {
                    "the table's identifier fields".to_string()
                } else {
                    changes.key.join(", ")
                },
                changes.operation.column
            )
        });
        let ident = match parse_table_ident(destination) {
            Ok(ident) => ident,
            Err(e) => return failed(e),
        };
        let options = &self.options;
        let Some(table) = self.catalog.load_table(&ident).await? else {
            if options.create_disposition() == CreateDisposition::CreateNever {
                return failed(Error::not_found("table", destination));
            }
            let plan = match EvolutionPlanner::new(options.schema_evolution()).plan(slice::from_ref(&input)) {
                Ok(plan) => plan,
                Err(e) => return failed(e),
            };
            let created = creatable_schema(&plan, destination)
                .and_then(|schema| creatable_with_key(&schema, options, destination));
            let (mut out, error) = match created {
                Ok(()) => (DestinationPlan::new(destination, PlannedAction::Create), None),
                Err(e) => (DestinationPlan::failed(destination, &e), Some(e)),
            };
            for field in options.table_options().partition_fields() {
                out = out.with_detail(format!("partition by {field}"));
            }
            if let Some(upsert) = upsert {
                out = out.with_detail(upsert);
            }
            return Ok((out.with_evolution(plan), error));
        };
        if let Some(changes) = changes {
            match UpsertKey::of(&table, changes) {
                Ok(key) => input = planned_input(schema, Some(changes), &key.columns)?,
                Err(e) => return failed(e),
            }
        }
        if options.write_disposition() == WriteDisposition::Empty
            && let Err(e) = refuse_rows(&table, destination).await
        {
            return failed(e);
        }
        let plan = plan_against(options.schema_evolution(), &table, &input)?;
        let (mut out, error) = if !plan.all_compatible() {
            let err = plan
                .rejection_error("")
                .with_context("table", destination.to_string());
            (DestinationPlan::failed(destination, &err), Some(err))
        } else if plan.changes_schema() {
            (DestinationPlan::new(destination, PlannedAction::Update), None)
        } else {
            (DestinationPlan::new(destination, PlannedAction::Unchanged), None)
        };
        if options.write_disposition() == WriteDisposition::Truncate {
            out = out.with_detail("replace the table's rows");
        }
        if let Some(upsert) = upsert {
            out = out.with_detail(upsert);
        }
        // Under route_to_errors a schema that does not fit is no reason to stop: its rows
        // become failed records when they are written, and the table is used as it is.
        if let Some(e) = &error
            && e.kind() == ErrorKind::SchemaIncompatible
            && options.schema_evolution().on_incompatible() == IncompatibleSchemaHandling::RouteToErrors
        {
            out = out.with_detail(format!(
                "rows that do not fit go to failed records: {}",
                e.message()
            ));
            out.action = PlannedAction::Unchanged;
            out.error = None;
            return Ok((out.with_evolution(plan), None));
        }
        Ok((out.with_evolution(plan), error))
    }
}

#[async_trait]
impl PrepareDestination for IcebergPreparer {
    async fn plan(&self, destination: &str, schema: &SchemaRef) -> Result<DestinationPlan> {
        Ok(self.plan_with_error(destination, schema).await?.0)
    }

    async fn prepare(&self, destination: &str, schema: &SchemaRef) -> Result<DestinationPlan> {
        let (planned, error) = self.plan_with_error(destination, schema).await?;
        if let Some(error) = error {
            return Err(error);
        }
        let changes = self.options.changes();
        let mut input = planned_input(schema, changes, changes.map_or(&[], |c| &c.key))?;
        let (table, created) = prepare_table(&self.catalog, &self.options, destination, &input).await?;
        if created {
            self.created.record(table.identifier());
        }
        // The key named by the table's identifier fields is known now.
        if let Some(changes) = changes.filter(|c| c.key.is_empty()) {
            input = planned_input(schema, Some(changes), &UpsertKey::of(&table, changes)?.columns)?;
        }
        if planned.action == PlannedAction::Update {
            evolve(&self.catalog, self.options.schema_evolution(), table, &input).await?;
        }
        Ok(planned)
    }

    async fn loaded_files(&self, destination: &str) -> Result<Option<LoadedFiles>> {
        // A truncate replaces every row, so a run loads all its files whatever was before
        // (and records them in place of the earlier ones).
        if self.options.write_disposition() == WriteDisposition::Truncate {
            return Ok(Some(LoadedFiles::new()));
        }
        let ident = parse_table_ident(destination)?;
        match self.catalog.load_table(&ident).await? {
            Some(table) => Ok(Some(crate::loads::loaded_files(&table)?)),
            None => Ok(Some(LoadedFiles::new())),
        }
    }

    async fn stored_offsets(
        &self,
        destination: &str,
        job: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Option<Offsets>> {
        let ident = parse_table_ident(destination)?;
        match self.catalog.load_table(&ident).await? {
            Some(table) => Ok(Some(
                crate::offsets::stored_offsets(&table, job)?.restricted_to(partitions),
            )),
            None => Ok(Some(Offsets::new())),
        }
    }
}
