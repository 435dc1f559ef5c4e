//! Create dispositions, partitioning and clustering, and `ensure-table`.

use outflow_bigquery::{
    EnsureTable, FieldMode, FieldType, PartitionType, TableField, TableSchema, TimePartitioning, ensure_table,
};
use outflow_core::{CreateDisposition, ErrorKind, PlannedAction, SchemaEvolutionOption, Sink};

use crate::common::*;

fn events_schema() -> TableSchema {
    TableSchema::new(vec![
        TableField::new("id", FieldType::Int64).required(),
        TableField::new("name", FieldType::String),
        TableField::new("ts", FieldType::Timestamp),
    ])
}

#[tokio::test]
async fn create_if_needed_makes_the_table_with_partitioning_and_clustering() {
    let ctx = Ctx::new().await;
    let options = ctx
        .options("events")
        .schema(events_schema())
        .time_partitioning(TimePartitioning::on(PartitionType::Day, "ts"))
        .clustering(["name", "id"])
        .build()
        .unwrap();
    let result = write_all(options, vec![id_name(0..3)]).await;
    assert_eq!(result.rows_written(), 3);
    assert!(result.failed.is_empty(), "{:?}", result.failed);

    let table = ctx.get("events").await.expect("created");
    let partitioning = table.time_partitioning.expect("time partitioning");
    assert_eq!(
        (partitioning.r#type.as_str(), partitioning.field.as_deref()),
        ("DAY", Some("ts"))
    );
    assert_eq!(table.clustering.expect("clustering").fields, ["name", "id"]);
    assert_eq!(
        ctx.columns("events"),
        [
            "id INT64 REQUIRED",
            "name STRING NULLABLE",
            "ts TIMESTAMP NULLABLE"
        ]
    );
    assert_eq!(ctx.ids("events"), [0, 1, 2]);
    assert_eq!(ctx.rows("events")[0]["name"], "n0");
}

#[tokio::test]
async fn the_schema_need_not_match_an_existing_table() {
    let ctx = Ctx::new().await;
    ctx.create("t", &id_name_schema()).await;
    // Configured with another schema: the table exists, so the schema is not used, and the
    // rows (which fit the table) are written.
    let other = TableSchema::new(vec![TableField::new("something_else", FieldType::Date)]);
    let result = write_all(
        ctx.options("t").schema(other).build().unwrap(),
        vec![id_name(0..2)],
    )
    .await;
    assert_eq!(result.rows_written(), 2);
    assert_eq!(ctx.columns("t"), ["id INT64 REQUIRED", "name STRING NULLABLE"]);
}

#[tokio::test]
async fn create_never_fails_on_a_missing_table_naming_it() {
    let ctx = Ctx::new().await;
    let options = ctx
        .options("missing")
        .create_disposition(CreateDisposition::CreateNever)
        .build()
        .unwrap();
    let mut s = sink(options).await;
    let err = s.write(id_name(0..2)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains(&ctx.full("missing")), "{err}");
    assert!(ctx.get("missing").await.is_none(), "nothing was created");
    assert_eq!(s.close().await.unwrap().rows_written(), 0);
}

#[tokio::test]
async fn preparing_reports_what_it_does() {
    let ctx = Ctx::new().await;
    let options = ctx.options("prepared").schema(events_schema()).build().unwrap();
    let s = sink(options).await;
    let preparer = s.preparer();
    let schema = id_name(0..1).schema();
    use outflow_core::PrepareDestination;
    let plan = preparer.plan("prepared", &schema).await.unwrap();
    assert_eq!(plan.action, PlannedAction::Create);
    assert!(ctx.get("prepared").await.is_none(), "plan changes nothing");
    let done = preparer.prepare("prepared", &schema).await.unwrap();
    assert_eq!(done.action, PlannedAction::Create);
    assert!(ctx.get("prepared").await.is_some());
    let again = preparer.plan("prepared", &schema).await.unwrap();
    assert_eq!(again.action, PlannedAction::Unchanged);
    let never = ctx
        .options("nope")
        .create_disposition(CreateDisposition::CreateNever)
        .build()
        .unwrap();
    let plan = sink(never).await.preparer().plan("nope", &schema).await.unwrap();
    assert_eq!(plan.action, PlannedAction::Fail);
    assert!(plan.error.unwrap().contains("nope"));
}

#[tokio::test]
async fn ensure_table_creates_evolves_and_plans() {
    let ctx = Ctx::new().await;
    let file = std::env::temp_dir().join(format!("{}-schema.json", ctx.dataset));
    std::fs::write(
        &file,
        r#"[{"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
            {"name": "must", "type": "STRING", "mode": "REQUIRED"},
            {"name": "ts", "type": "TIMESTAMP"}]"#,
    )
    .unwrap();
    let schema = TableSchema::from_file(&file).unwrap();
    let mut request = EnsureTable::new(ctx.full("t"), schema.clone());
    request.connection = ctx.connection();
    request.retry = Ctx::quick_retry();
    request.time_partitioning = Some(TimePartitioning::on(PartitionType::Day, "ts"));

    request.dry_run = true;
    let report = ensure_table(&request).await.unwrap();
    assert_eq!(report.plan.action, PlannedAction::Create);
    assert!(!report.applied);
    assert!(report.to_string().contains("would create"), "{report}");
    assert!(ctx.get("t").await.is_none());

    request.dry_run = false;
    let report = ensure_table(&request).await.unwrap();
    assert!(report.applied && report.succeeded(), "{report}");
    assert!(report.to_string().contains("created"), "{report}");
    assert_eq!(
        ctx.columns("t"),
        [
            "id INT64 REQUIRED",
            "must STRING REQUIRED",
            "ts TIMESTAMP NULLABLE"
        ]
    );

    let report = ensure_table(&request).await.unwrap();
    assert_eq!(report.plan.action, PlannedAction::Unchanged, "{report}");

    // A new column and a relaxed one: refused without the options, nothing changes.
    let mut evolved = schema.clone();
    evolved.fields[1].mode = FieldMode::Nullable;
    evolved.fields.push(TableField::new("extra", FieldType::Json));
    request.schema = evolved;
    let report = ensure_table(&request).await.unwrap();
    assert_eq!(report.plan.action, PlannedAction::Fail, "{report}");
    let text = report.to_string();
    assert!(text.contains("extra: the table has no such column"), "{text}");
    assert_eq!(ctx.columns("t").len(), 3);

    request.schema_evolution = evolution(&[
        SchemaEvolutionOption::AllowFieldAddition,
        SchemaEvolutionOption::AllowFieldRelaxation,
    ]);
    request.dry_run = true;
    let report = ensure_table(&request).await.unwrap();
    assert_eq!(report.plan.action, PlannedAction::Update);
    assert!(report.to_string().contains("would update"), "{report}");
    assert_eq!(ctx.columns("t").len(), 3, "a dry run changes nothing");

    request.dry_run = false;
    let report = ensure_table(&request).await.unwrap();
    assert!(report.applied, "{report}");
    let text = report.to_string();
    assert!(text.contains("+ extra: json\n"), "{text}");
    assert!(text.contains("~ must: "), "{text}");
    assert_eq!(
        ctx.columns("t"),
        [
            "id INT64 REQUIRED",
            "must STRING NULLABLE",
            "ts TIMESTAMP NULLABLE",
            "extra JSON NULLABLE"
        ]
    );

    // A type conflict is refused whatever the options.
    let mut conflict = schema;
    conflict.fields[0].field_type = FieldType::String;
    request.schema = conflict;
    let report = ensure_table(&request).await.unwrap();
    assert!(!report.succeeded());
    assert!(
        report
            .to_string()
            .contains("id: the table has long, the input string"),
        "{report}"
    );

    let mut never = EnsureTable::new(ctx.full("absent"), id_name_schema());
    never.connection = ctx.connection();
    never.create_disposition = CreateDisposition::CreateNever;
    let report = ensure_table(&never).await.unwrap();
    assert_eq!(report.plan.action, PlannedAction::Fail);
    assert!(ctx.get("absent").await.is_none());
    let _ = std::fs::remove_file(file);
}
