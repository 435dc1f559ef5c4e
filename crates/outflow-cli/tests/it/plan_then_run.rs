//! `outflow plan` says what `outflow run` then does, on many job shapes.
//!
//! Each case is a job shape drawn by a seeded generator: the sink, the create and write
//! dispositions, the evolution options, the table that exists before (none, the same
//! schema, an older one missing a column, a narrower type, a required column the input has
//! nullable) and the input (CSV or NDJSON, with or without an extra column, a widened type,
//! nulls). For each, the test sets the table up, runs `plan --json` then `run --json`, reads
//! the table back with an independent reader (PyIceberg, Google's Python clients) and checks:
//!
//! - the plan fails exactly when the run fails, for the same reason;
//! - the run's preparation did what the plan said (same action, same changes);
//! - the table shows it: created or not, the columns added, relaxed and promoted, nothing
//!   else changed;
//! - the rows read back are the input's (after the table's old rows when appending), but
//!   for the rows the run reported as rejected, which the plan must have foreseen.
//!
//! A failure prints the case (its seed and number and every dimension); set
//! `OUTFLOW_PLAN_RUN_CASE=N` to run case N alone, `OUTFLOW_PLAN_RUN_SEED` to draw others.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use outflow_testkit::bigquery::{BigQueryEnv, Dataset};
use outflow_testkit::bigtable::{cbt, emulator_host, python_read};
use outflow_testkit::iceberg::{Reader, TestCatalog};
use outflow_testkit::unique_name;
use serde_json::{Value, json};

use crate::outflow;

/// The seed the cases are drawn from, unless `OUTFLOW_PLAN_RUN_SEED` says another.
const SEED: u64 = 18;
/// Cases per sink (the first few pinned, the rest drawn). Each BigQuery case costs the
/// emulator over a second of CPU, each Bigtable one about as much of the CLI's; the test
/// command runs on two cores, so those two sinks get fewer cases (every outcome is still
/// reached: the counts print with `--nocapture`). `OUTFLOW_PLAN_RUN_SEED` draws others.
const ICEBERG_CASES: usize = 40;
const BIGQUERY_CASES: usize = 16;
const BIGTABLE_CASES: usize = 8;

/// SplitMix64: a few lines, the same numbers on every machine.
struct Draw(u64);

impl Draw {
    fn new(sink: u64) -> Draw {
        let seed = std::env::var("OUTFLOW_PLAN_RUN_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(SEED);
        Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ sink)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn flip(&mut self) -> bool {
        self.next() & 1 == 1
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }
}

fn seed() -> String {
    std::env::var("OUTFLOW_PLAN_RUN_SEED").unwrap_or_else(|_| SEED.to_string())
}

/// The cases to run: all, or the one `OUTFLOW_PLAN_RUN_CASE` names.
fn selected<T>(cases: Vec<T>) -> Vec<(usize, T)> {
    let only: Option<usize> = std::env::var("OUTFLOW_PLAN_RUN_CASE")
        .ok()
        .and_then(|s| s.parse().ok());
    cases
        .into_iter()
        .enumerate()
        .filter(|(n, _)| only.is_none_or(|only| only == *n))
        .collect()
}

/// Runs each selected case with `run`, which returns its outcome (the plan's action, or
/// `fail`, `rejected`); a case that fails is named with what reproduces it. Prints how many
/// cases had each outcome (`--nocapture` shows it), so a generator that stopped reaching
/// some outcome shows.
fn run_cases<C: fmt::Display>(sink: &str, cases: Vec<C>, run: impl Fn(&C) -> String) {
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let started = std::time::Instant::now();
    for (n, case) in selected(cases) {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&case))) {
            Ok(outcome) => {
                eprintln!("case {n}: {case}: {outcome}");
                *outcomes.entry(outcome).or_default() += 1
            }
            Err(panic) => {
                eprintln!(
                    "plan_then_run case {n} (seed {}; OUTFLOW_PLAN_RUN_CASE={n} runs it alone): {case}",
                    seed()
                );
                std::panic::resume_unwind(panic);
            }
        }
    }
    eprintln!("{sink}: {outcomes:?} in {:?}", started.elapsed());
}

// ------------------------------------------------------------------ Iceberg and BigQuery

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sink {
    Iceberg,
    BigQuery,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Create {
    IfNeeded,
    Never,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    Append,
    Truncate,
    Empty,
}

/// The table before the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Table {
    Absent,
    /// `id long not null, name string, score int`: what the input has.
    Same,
    /// Without `name`, which the input has.
    MissingColumn,
    /// `id` an int, which the input has as a long.
    Narrower,
    /// `name` required, which the input has nullable.
    RequiredName,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Csv,
    Ndjson,
}

#[derive(Clone, Copy, Debug)]
struct Input {
    format: Format,
    /// A column `note` no table has.
    extra: bool,
    /// `score` a long (values beyond an int), where tables have an int.
    widened: bool,
    /// A row whose `name`, `score` and `note` are null.
    nulls: bool,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    sink: Sink,
    create: Create,
    write: Write,
    addition: bool,
    relaxation: bool,
    promotion: bool,
    /// `schema_evolution.on_incompatible`, when the job sets it.
    on_incompatible: Option<&'static str>,
    table: Table,
    /// Whether the existing table holds rows.
    table_rows: bool,
    input: Input,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} create={:?} write={:?} options={:?} on_incompatible={} table={:?}{} input={:?}{}{}{}",
            self.sink,
            self.create,
            self.write,
            self.options(),
            self.on_incompatible.unwrap_or("default"),
            self.table,
            match (self.table, self.table_rows) {
                (Table::Absent, _) => "",
                (_, true) => " (2 rows)",
                (_, false) => " (no rows)",
            },
            self.input.format,
            if self.input.extra { "+extra" } else { "" },
            if self.input.widened { "+widened" } else { "" },
            if self.input.nulls { "+nulls" } else { "" },
        )
    }
}

/// A column: name, type (as core prints it) and whether it is required.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Column {
    name: String,
    ty: String,
    required: bool,
}

fn column(name: &str, ty: &str, required: bool) -> Column {
    Column {
        name: name.into(),
        ty: ty.into(),
        required,
    }
}

/// One input row: `id`, `name`, `score`, `note`.
type Row = (i64, Option<&'static str>, Option<i64>, Option<&'static str>);

impl Case {
    fn draw(sink: Sink, draw: &mut Draw) -> Case {
        let tables = match sink {
            Sink::Iceberg => &[
                Table::Absent,
                Table::Same,
                Table::MissingColumn,
                Table::Narrower,
                Table::RequiredName,
            ][..],
            // BigQuery has one integer type: no narrower one.
            Sink::BigQuery => &[
                Table::Absent,
                Table::Same,
                Table::MissingColumn,
                Table::RequiredName,
            ][..],
        };
        Case {
            sink,
            create: draw.pick(&[Create::IfNeeded, Create::IfNeeded, Create::Never]),
            write: draw.pick(&[Write::Append, Write::Append, Write::Truncate, Write::Empty]),
            addition: draw.flip(),
            relaxation: draw.flip(),
            // BigQuery refuses the option (no BigQuery schema update promotes), in `plan`
            // as in `run`: now and then, to see both refuse it alike.
            promotion: match sink {
                Sink::Iceberg => draw.flip(),
                Sink::BigQuery => draw.next().is_multiple_of(10),
            },
            on_incompatible: draw.pick(&[None, None, Some("fail"), Some("route_to_errors")]),
            table: draw.pick(tables),
            table_rows: !draw.next().is_multiple_of(4),
            input: Input {
                format: draw.pick(&[Format::Csv, Format::Ndjson]),
                extra: draw.next().is_multiple_of(3),
                widened: draw.next().is_multiple_of(3),
                nulls: draw.flip(),
            },
        }
    }

    /// The issue's shape: the table lacks a column the input has, and field addition is
    /// allowed; the plan must say `update`, adding it.
    fn added_column(sink: Sink, format: Format) -> Case {
        Case {
            sink,
            create: Create::IfNeeded,
            write: Write::Append,
            addition: true,
            relaxation: false,
            promotion: false,
            on_incompatible: None,
            table: Table::MissingColumn,
            table_rows: true,
            input: Input {
                format,
                extra: false,
                widened: false,
                nulls: false,
            },
        }
    }

    fn cases(sink: Sink, count: usize) -> Vec<Case> {
        let mut draw = Draw::new(sink as u64);
        let issue = Case::added_column(sink, Format::Csv);
        let mut cases = vec![
            issue,
            // The same with another column the table lacks too, and nulls.
            Case {
                input: Input {
                    format: Format::Ndjson,
                    extra: true,
                    nulls: true,
                    ..issue.input
                },
                ..issue
            },
            // Without the option (relaxation, so that `on_incompatible` may be set):
            // refused, by the plan and the run alike.
            Case {
                addition: false,
                relaxation: true,
                on_incompatible: Some("fail"),
                ..issue
            },
            // A table to create for an input with a column it would lack: refused before
            // anything is created.
            Case {
                addition: false,
                relaxation: true,
                on_incompatible: Some("fail"),
                table: Table::Absent,
                input: Input {
                    extra: true,
                    ..issue.input
                },
                ..issue
            },
            // Nulls where the table requires a value, routed: the rows come back as failed
            // records naming their lines, which the plan foresaw. (`on_incompatible` needs
            // an option; addition changes nothing here.)
            Case {
                on_incompatible: Some("route_to_errors"),
                table: Table::RequiredName,
                input: Input {
                    nulls: true,
                    ..issue.input
                },
                ..issue
            },
            // The same table and input: unchanged, and `empty` passes on an empty table.
            Case {
                addition: false,
                table: Table::Same,
                table_rows: false,
                write: Write::Empty,
                ..issue
            },
        ];
        while cases.len() < count {
            cases.push(Case::draw(sink, &mut draw));
        }
        cases
    }

    fn options(&self) -> Vec<&'static str> {
        let mut options = Vec::new();
        if self.addition {
            options.push("allow_field_addition");
        }
        if self.relaxation {
            options.push("allow_field_relaxation");
        }
        if self.promotion {
            options.push("allow_type_promotion");
        }
        options
    }

    /// The job's `schema_evolution`.
    fn evolution(&self) -> String {
        let on_incompatible = self
            .on_incompatible
            .map(|o| format!(", on_incompatible: {o}"))
            .unwrap_or_default();
        format!("{{ options: [{}]{on_incompatible} }}", self.options().join(", "))
    }

    fn table_columns(&self) -> Vec<Column> {
        let id = column("id", "long", true);
        let name = column("name", "string", false);
        let score = column("score", "int", false);
        match self.table {
            Table::Absent | Table::Same => vec![id, name, score],
            Table::MissingColumn => vec![id, score],
            Table::Narrower => vec![column("id", "int", true), name, score],
            Table::RequiredName => vec![id, column("name", "string", true), score],
        }
    }

    fn input_columns(&self) -> Vec<Column> {
        let mut columns = vec![
            column("id", "long", true),
            column("name", "string", false),
            column("score", if self.input.widened { "long" } else { "int" }, false),
        ];
        if self.input.extra {
            columns.push(column("note", "string", false));
        }
        columns
    }

    /// The rows the table holds before: no `note`, and no `name` where it has none.
    fn table_rows(&self) -> Vec<Row> {
        let names = match self.table {
            Table::MissingColumn => [None, None],
            _ => [Some("old1"), Some("old2")],
        };
        if self.table_rows && self.table != Table::Absent {
            vec![(1, names[0], Some(1), None), (2, names[1], Some(2), None)]
        } else {
            Vec::new()
        }
    }

    fn input_rows(&self) -> Vec<Row> {
        let big = if self.input.widened { 3_000_000_000 } else { 9 };
        let (name, score, note) = if self.input.nulls {
            (None, None, None)
        } else {
            (Some("bob"), Some(8), Some("n11"))
        };
        vec![
            (10, Some("ada"), Some(7), Some("n10")),
            (11, name, score, note),
            (12, Some("cy"), Some(big), Some("n12")),
        ]
    }
}

/// `rows` of `columns` as CSV or NDJSON, with the job's `source:` section for them.
fn source(dir: &Path, file: &str, format: Format, columns: &[Column], rows: &[Row]) -> String {
    let value = |row: &Row, name: &str| -> Value {
        match name {
            "id" => json!(row.0),
            "name" => json!(row.1),
            "score" => json!(row.2),
            _ => json!(row.3),
        }
    };
    let (path, key) = match format {
        Format::Csv => {
            let mut text = columns
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(",");
            text.push('\n');
            for row in rows {
                let cells: Vec<String> = columns
                    .iter()
                    .map(|c| match value(row, &c.name) {
                        Value::Null => String::new(),
                        Value::String(s) => s,
                        other => other.to_string(),
                    })
                    .collect();
                text.push_str(&cells.join(","));
                text.push('\n');
            }
            let path = format!("{file}.csv");
            std::fs::write(dir.join(&path), text).unwrap();
            (path, "csv")
        }
        Format::Ndjson => {
            let mut text = String::new();
            for row in rows {
                let object: serde_json::Map<String, Value> = columns
                    .iter()
                    .map(|c| (c.name.clone(), value(row, &c.name)))
                    .collect();
                text.push_str(&Value::Object(object).to_string());
                text.push('\n');
            }
            let path = format!("{file}.ndjson");
            std::fs::write(dir.join(&path), text).unwrap();
            (path, "ndjson")
        }
    };
    let schema: Vec<String> = columns
        .iter()
        .map(|c| format!("{{name: {}, type: {}, required: {}}}", c.name, c.ty, c.required))
        .collect();
    format!(
        "source:\n  path: {path}\n  format: {key}\n  {key}: {{ schema: [ {} ] }}\n",
        schema.join(", ")
    )
}

/// The BigQuery type and mode of a column.
fn bigquery_type(ty: &str) -> &'static str {
    match ty {
        "int" | "long" => "INT64",
        "string" => "STRING",
        other => panic!("no BigQuery type for {other}"),
    }
}

fn bigquery_schema(columns: &[Column]) -> String {
    let fields: Vec<String> = columns
        .iter()
        .map(|c| {
            let mode = if c.required { "REQUIRED" } else { "NULLABLE" };
            format!(
                "{{name: {}, type: {}, mode: {mode}}}",
                c.name,
                bigquery_type(&c.ty)
            )
        })
        .collect();
    format!("[ {} ]", fields.join(", "))
}

/// Where one sink's cases write, and how their tables are read back.
enum Target {
    Iceberg,
    BigQuery(Dataset),
}

/// A table as read back: its columns and rows, or `None` when it does not exist.
#[derive(Debug, PartialEq)]
struct Read {
    columns: Vec<Column>,
    rows: Vec<Value>,
}

impl Target {
    fn sink(&self, case: &Case, table: &str, create: Create, write: Write, evolution: &str) -> String {
        let create = match create {
            Create::IfNeeded => "create_if_needed",
            Create::Never => "create_never",
        };
        let write = match write {
            Write::Append => "append",
            Write::Truncate => "truncate",
            Write::Empty => "empty",
        };
        let common = format!(
            "    create_disposition: {create}\n    write_disposition: {write}\n    schema_evolution: {evolution}\n"
        );
        match self {
            Target::Iceberg => format!(
                "sink:\n  iceberg:\n    catalog: {{ type: sql, uri: lake/catalog.db, warehouse: lake/wh }}\n    table: db.{table}\n{common}"
            ),
            Target::BigQuery(dataset) => {
                let env = dataset.env();
                // Creation takes the configured schema: the table's, for the setup job.
                let schema = if create == "create_if_needed" {
                    format!("    schema: {}\n", bigquery_schema(&case.table_columns()))
                } else {
                    String::new()
                };
                format!(
                    "sink:\n  bigquery:\n    project: {}\n    dataset: {dataset}\n    table: {table}\n{schema}{common}\
                     \x20   connection: {{ rest_endpoint: '{}', grpc_endpoint: '{}', credentials: anonymous }}\n",
                    env.project, env.rest, env.grpc,
                )
            }
        }
    }

    fn destination(&self, table: &str) -> String {
        match self {
            Target::Iceberg => format!("db.{table}"),
            Target::BigQuery(dataset) => format!("{}.{dataset}.{table}", dataset.env().project),
        }
    }

    fn read(&self, dir: &Path, table: &str) -> Option<Read> {
        match self {
            Target::Iceberg => {
                let catalog = TestCatalog::Sql {
                    name: "outflow".into(),
                    db: dir.join("lake/catalog.db"),
                    warehouse: dir.join("lake/wh"),
                };
                let read = catalog.try_read(Reader::PyIceberg, &format!("db.{table}"))?;
                let columns = outflow_testkit::iceberg::fields(&read)
                    .iter()
                    .map(|f| Column {
                        name: f["name"].as_str().unwrap().into(),
                        ty: f["type"].as_str().unwrap().into(),
                        required: f["required"].as_bool().unwrap(),
                    })
                    .collect();
                Some(Read {
                    columns,
                    rows: outflow_testkit::iceberg::rows(&read).clone(),
                })
            }
            Target::BigQuery(dataset) => {
                let read = dataset.env().try_read_table(dataset, table)?;
                let columns = read["schema"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| Column {
                        name: f["name"].as_str().unwrap().into(),
                        ty: f["type"].as_str().unwrap().into(),
                        required: f["mode"] == "REQUIRED",
                    })
                    .collect();
                Some(Read {
                    columns,
                    rows: read["rows"].as_array().unwrap().clone(),
                })
            }
        }
    }

    /// A column of a plan's schema as this sink's reader names its type.
    fn planned(&self, c: &Value) -> Column {
        let ty = c["type"].as_str().unwrap();
        Column {
            name: c["name"].as_str().unwrap().into(),
            ty: match self {
                Target::Iceberg => ty.into(),
                Target::BigQuery(_) => bigquery_type(ty).into(),
            },
            required: c["required"].as_bool().unwrap(),
        }
    }
}

/// Runs `outflow COMMAND JOB --json`: the exit code and the document.
fn command(name: &str, job: &Path) -> (i32, Value) {
    let out = outflow().arg(name).arg(job).arg("--json").output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{name} printed no JSON document ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), doc)
}

/// The applied changes of an evolution plan, as (kind, path).
fn applied(evolution: &Value) -> BTreeSet<(String, String)> {
    evolution["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["applied"] == true)
        .map(|c| {
            (
                c["kind"].as_str().unwrap().into(),
                c["path"].as_str().unwrap().into(),
            )
        })
        .collect()
}

/// The changes that turn `before` into `after`, as (kind, path).
fn difference(before: &[Column], after: &[Column]) -> BTreeSet<(String, String)> {
    let old: BTreeMap<&str, &Column> = before.iter().map(|c| (c.name.as_str(), c)).collect();
    let mut changes = BTreeSet::new();
    for c in after {
        match old.get(c.name.as_str()) {
            None => {
                changes.insert(("addition".into(), c.name.clone()));
            }
            Some(was) => {
                if was.required && !c.required {
                    changes.insert(("relaxation".into(), c.name.clone()));
                }
                if was.ty != c.ty {
                    changes.insert(("promotion".into(), c.name.clone()));
                }
            }
        }
    }
    changes
}

/// A row as the test compares it: `id`, then `name`, `score` and `note` where the table has them.
fn canonical(row: &Value) -> (i64, Value, Value, Value) {
    let int = |v: &Value| match v {
        Value::String(s) => json!(s.parse::<i64>().unwrap()),
        other => other.clone(),
    };
    (
        int(&row["id"]).as_i64().unwrap(),
        row.get("name").cloned().unwrap_or(Value::Null),
        row.get("score").map(int).unwrap_or(Value::Null),
        row.get("note").cloned().unwrap_or(Value::Null),
    )
}

fn expected_row(row: &Row, columns: &[Column]) -> (i64, Value, Value, Value) {
    let has = |name: &str| columns.iter().any(|c| c.name == name);
    let or_null = |present: bool, v: Value| if present { v } else { Value::Null };
    (
        row.0,
        or_null(has("name"), json!(row.1)),
        or_null(has("score"), json!(row.2)),
        or_null(has("note"), json!(row.3)),
    )
}

/// The first line of an error, which names the reason (later lines list columns or say
/// what was cleaned up).
fn reason(message: &str) -> &str {
    message.lines().next().unwrap_or("").trim()
}

/// The kind of error a failed plan names, as `--json` spells kinds: a destination's error
/// starts with the kind as printed (`schema incompatible: ...`); a job-level error has it.
fn kind(said: &str, plan: &Value) -> Value {
    match plan["error"]["kind"].as_str() {
        Some(kind) => json!(kind),
        None => json!(said.split(':').next().unwrap().replace(' ', "_")),
    }
}

fn run_case(target: &Target, case: &Case) -> String {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::create_dir_all(dir.join("lake/wh")).unwrap();
    let table = unique_name("t");
    let destination = target.destination(&table);

    // The table before: created by a run of its own columns, holding its rows.
    let before = if case.table == Table::Absent {
        None
    } else {
        let setup = format!(
            "{}{}",
            source(
                dir,
                "setup",
                Format::Csv,
                &case.table_columns(),
                &case.table_rows()
            ),
            target.sink(case, &table, Create::IfNeeded, Write::Append, "{ options: [] }")
        );
        let job = dir.join("setup.yaml");
        std::fs::write(&job, setup).unwrap();
        let (code, doc) = command("run", &job);
        assert_eq!(code, 0, "setting up the table failed: {doc}");
        let read = target.read(dir, &table).expect("the setup run created the table");
        assert_eq!(read.columns.len(), case.table_columns().len(), "{read:?}");
        assert_eq!(read.rows.len(), case.table_rows().len(), "{read:?}");
        Some(read)
    };

    let text = format!(
        "{}{}",
        source(
            dir,
            "in",
            case.input.format,
            &case.input_columns(),
            &case.input_rows()
        ),
        target.sink(case, &table, case.create, case.write, &case.evolution())
    );
    let job = dir.join("job.yaml");
    std::fs::write(&job, &text).unwrap();
    let context = format!("job:\n{text}");

    let (plan_code, plan) = command("plan", &job);
    let planned = &plan["destinations"][0];
    let plan_fails = plan_code != 0;
    assert_eq!(
        plan_fails,
        planned["action"] == "fail" || plan["error"].is_object(),
        "plan's exit code {plan_code} and its action disagree: {plan}\n{context}"
    );
    let (run_code, run) = command("run", &job);
    let mut after = target.read(dir, &table);
    let context = format!("{context}plan ({plan_code}): {plan}\nrun ({run_code}): {run}\n");
    // local-bigquery's copy job (how `truncate` swaps the staged rows in) makes every column
    // of the destination NULLABLE, where BigQuery's keeps the modes of the staging table,
    // created with the destination's fields (`Admin::create_staging`). So after a truncate
    // on the emulator the modes are taken as planned; names and types are still compared.
    let copied = matches!(target, Target::BigQuery(_))
        && case.write == Write::Truncate
        && (run_code == 0 || run_code == 3);
    if copied && let Some(after) = &mut after {
        let schema = planned["evolution"]["schema"]["fields"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for c in &mut after.columns {
            c.required = schema
                .iter()
                .any(|f| f["name"] == c.name.as_str() && f["required"] == true);
        }
    }

    // Fails ⇔ fails, for the same reason; nothing changed. Only the data can tell whether
    // a column the input declares nullable holds a null where the table requires a value;
    // a plan that leaves that to the data says what such rows do.
    let run_fails = run_code != 0 && run_code != 3;
    let says = |what: &str| {
        planned["details"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d.as_str().unwrap().contains(what)))
    };
    if !plan_fails && run_fails && says("rows holding a null in name") && says("fail the run") {
        assert!(
            case.input.nulls,
            "the run failed on nulls the input does not have\n{context}"
        );
        let got = run["error"]["message"].as_str().unwrap();
        assert!(got.contains("name: required in the table"), "{context}");
        assert_eq!(before, after, "a failed run changed the table\n{context}");
        return "fail (nulls)".into();
    }
    assert_eq!(
        plan_fails, run_fails,
        "the plan and the run disagree on failing\n{context}"
    );
    if plan_fails {
        let said = planned["error"]
            .as_str()
            .or(plan["error"]["message"].as_str())
            .unwrap_or_else(|| panic!("a failed plan names no error\n{context}"));
        let got = run["error"]["message"].as_str().unwrap();
        assert!(
            got.contains(reason(said)),
            "the run failed for another reason than the plan said ({:?})\n{context}",
            reason(said)
        );
        assert_eq!(run["error"]["kind"], kind(said, &plan), "{context}");
        assert_eq!(before, after, "a failed run changed the table\n{context}");
        return "fail".into();
    }

    // The run's preparation did what the plan said.
    let prepared = &run["prepared"][0];
    assert_eq!(prepared["action"], planned["action"], "{context}");
    assert_eq!(
        applied(&prepared["evolution"]),
        applied(&planned["evolution"]),
        "the run made other changes than the plan said\n{context}"
    );
    let after = after.unwrap_or_else(|| panic!("the run succeeded and there is no table\n{context}"));
    let action = planned["action"].as_str().unwrap();
    match (action, &before) {
        ("create", None) => {
            let schema: Vec<Column> = planned["evolution"]["schema"]["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| target.planned(c))
                .collect();
            assert_eq!(
                after.columns, schema,
                "the table created is not the one planned\n{context}"
            );
        }
        ("unchanged", Some(before)) => {
            assert_eq!(
                after.columns, before.columns,
                "an unchanged table changed\n{context}"
            );
        }
        ("update", Some(before)) => {
            let changes = difference(&before.columns, &after.columns);
            assert!(!changes.is_empty(), "an update changed nothing\n{context}");
            assert_eq!(
                changes,
                applied(&planned["evolution"]),
                "the table changed otherwise than planned\n{context}"
            );
        }
        _ => panic!(
            "the plan says {action} for {}\n{context}",
            if before.is_some() {
                "an existing table"
            } else {
                "a missing table"
            }
        ),
    }

    // The rows: the old ones unless replaced, then the input's, but for those rejected,
    // which only a plan that found the input incompatible may let happen.
    let rejected: BTreeSet<i64> = run["result"]["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["record"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(run_code == 3, !rejected.is_empty(), "{context}");
    // Each lists where it was read: the input's file, on the line of its row.
    for failed in run["result"]["failed"].as_array().unwrap() {
        let id = failed["record"]["id"].as_i64().unwrap();
        let row = case.input_rows().iter().position(|r| r.0 == id).unwrap() as u64;
        let (file, line) = match case.input.format {
            Format::Csv => ("in.csv", row + 2),
            Format::Ndjson => ("in.ndjson", row + 1),
        };
        assert!(
            failed["source"]["file"].as_str().unwrap().ends_with(file),
            "{failed}"
        );
        assert_eq!(failed["source"]["line"], line, "{failed}\n{context}");
    }
    if !rejected.is_empty() {
        let verdict = &planned["evolution"]["verdicts"][0]["verdict"];
        assert!(
            verdict == "incompatible" || verdict == "unverifiable" && says("failed records"),
            "rows were rejected that the plan said fit\n{context}"
        );
    }
    let written: Vec<Row> = case
        .input_rows()
        .into_iter()
        .filter(|r| !rejected.contains(&r.0))
        .collect();
    assert_eq!(
        // A destination no row reached may be left out.
        run["result"]["destinations"][&destination]["rows"]
            .as_u64()
            .unwrap_or(0),
        written.len() as u64,
        "{context}"
    );
    let mut expected: Vec<_> = if case.write == Write::Append {
        case.table_rows()
    } else {
        Vec::new()
    };
    expected.extend(written);
    let mut expected: Vec<_> = expected.iter().map(|r| expected_row(r, &after.columns)).collect();
    expected.sort_by_key(|r| r.0);
    let mut got: Vec<_> = after.rows.iter().map(canonical).collect();
    got.sort_by_key(|r| r.0);
    assert_eq!(got, expected, "the rows read back are not the input's\n{context}");
    if run_code == 3 {
        "rejected".into()
    } else {
        action.into()
    }
}

#[test]
fn plan_then_run_iceberg() {
    let target = Target::Iceberg;
    run_cases("Iceberg", Case::cases(Sink::Iceberg, ICEBERG_CASES), |case| {
        run_case(&target, case)
    });
}

#[test]
fn plan_then_run_bigquery() {
    let env = BigQueryEnv::from_env();
    let dataset = env.new_dataset("plan");
    let target = Target::BigQuery(dataset);
    run_cases("BigQuery", Case::cases(Sink::BigQuery, BIGQUERY_CASES), |case| {
        run_case(&target, case)
    });
}

// ------------------------------------------------------------------------------ Bigtable

const PROJECT: &str = "outflow-cli";
const INSTANCE: &str = "plan";

/// The families of the table before the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Families {
    Absent,
    /// `info` (raw) and `stats` (sum): what the job declares.
    Same,
    /// `info` only.
    MissingFamily,
    /// `stats` raw, where the job declares it a sum.
    WrongType,
}

#[derive(Clone, Copy, Debug)]
struct BigtableCase {
    create: Create,
    families: Families,
    table_rows: bool,
    format: Format,
    /// `note` too, mapped to `info`.
    extra: bool,
    /// `score` a double, which a sum family cannot take.
    widened: bool,
    nulls: bool,
}

impl fmt::Display for BigtableCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Bigtable create={:?} table={:?}{} input={:?}{}{}{}",
            self.create,
            self.families,
            if self.table_rows { " (2 rows)" } else { "" },
            self.format,
            if self.extra { "+extra" } else { "" },
            if self.widened { "+double score" } else { "" },
            if self.nulls { "+nulls" } else { "" },
        )
    }
}

impl BigtableCase {
    fn cases(count: usize) -> Vec<BigtableCase> {
        let mut draw = Draw::new(3);
        (0..count)
            .map(|_| BigtableCase {
                create: draw.pick(&[Create::IfNeeded, Create::IfNeeded, Create::Never]),
                families: draw.pick(&[
                    Families::Absent,
                    Families::Same,
                    Families::MissingFamily,
                    Families::WrongType,
                ]),
                table_rows: draw.flip(),
                format: draw.pick(&[Format::Csv, Format::Ndjson]),
                extra: draw.flip(),
                widened: draw.flip(),
                nulls: draw.flip(),
            })
            .collect()
    }
}

const DECLARED: &str = "{ column_families: [ {name: info, gc_rule: {max_versions: 1}}, {name: stats, type: {aggregate: sum}} ] }";

fn table_names(host: &str) -> BTreeSet<String> {
    cbt(host, PROJECT, INSTANCE, &["ls"])
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn families(read: &Value) -> BTreeMap<String, Value> {
    read["families"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, f)| (name.clone(), f["value_type"].clone()))
        .collect()
}

fn bigtable_case(host: &str, case: &BigtableCase) -> String {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let table = unique_name("t");
    let sink = |create: Create, columns: &str| {
        let create = match create {
            Create::IfNeeded => {
                format!("    create_disposition: create_if_needed\n    table_options: {DECLARED}\n")
            }
            Create::Never => "    create_disposition: create_never\n".to_string(),
        };
        format!(
            "sink:\n  bigtable:\n    project: {PROJECT}\n    instance: {INSTANCE}\n    table: {table}\n    endpoint: {host}\n{create}\
             \x20   row_key: {{ fields: [id] }}\n    columns: {{ explicit: [ {columns} ] }}\n"
        )
    };
    let before = if case.families == Families::Absent {
        None
    } else {
        let options = match case.families {
            Families::Same => DECLARED.to_string(),
            Families::MissingFamily => "{ column_families: [ {name: info} ] }".to_string(),
            _ => "{ column_families: [ {name: info}, {name: stats} ] }".to_string(),
        };
        let file = dir.join("families.yaml");
        std::fs::write(&file, options).unwrap();
        let out = outflow()
            .args([
                "bigtable",
                "ensure-table",
                "--project",
                PROJECT,
                "--instance",
                INSTANCE,
            ])
            .args(["--table", &table, "--endpoint", host, "--options"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        if case.table_rows {
            let rows = [(1, Some("old1"), None, None), (2, Some("old2"), None, None)];
            let names = [column("id", "long", true), column("name", "string", false)];
            let job = dir.join("setup.yaml");
            let text = format!(
                "{}{}",
                source(dir, "setup", Format::Csv, &names, &rows),
                sink(Create::Never, "{field: name, family: info}")
            );
            std::fs::write(&job, text).unwrap();
            let (code, doc) = command("run", &job);
            assert_eq!(code, 0, "setting up the rows failed: {doc}");
        }
        Some(python_read(host, PROJECT, INSTANCE, &table))
    };

    let columns = vec![
        column("id", "long", true),
        column("name", "string", false),
        column("score", if case.widened { "double" } else { "long" }, false),
    ];
    let mut columns = columns;
    let mut mapping = "{field: name, family: info}, {field: score, family: stats}".to_string();
    if case.extra {
        columns.push(column("note", "string", false));
        mapping.push_str(", {field: note, family: info}");
    }
    let (name, note) = if case.nulls {
        (None, None)
    } else {
        (Some("bob"), Some("n11"))
    };
    let rows: Vec<Row> = vec![
        (10, Some("ada"), Some(7), Some("n10")),
        (11, name, None, note),
        (12, Some("cy"), Some(9), Some("n12")),
    ];
    let text = format!(
        "{}{}",
        source(dir, "in", case.format, &columns, &rows),
        sink(case.create, &mapping)
    );
    let job = dir.join("job.yaml");
    std::fs::write(&job, &text).unwrap();
    let (plan_code, plan) = command("plan", &job);
    let (run_code, run) = command("run", &job);
    let exists = table_names(host).contains(&table);
    let after = exists.then(|| python_read(host, PROJECT, INSTANCE, &table));
    let context =
        format!("job:\n{text}plan ({plan_code}): {plan}\nrun ({run_code}): {run}\nafter: {after:?}\n");
    let planned = &plan["destinations"][0];
    let plan_fails = plan_code != 0;
    assert_eq!(
        plan_fails,
        planned["action"] == "fail" || plan["error"].is_object(),
        "{context}"
    );
    assert_eq!(
        plan_fails,
        run_code != 0,
        "the plan and the run disagree on failing\n{context}"
    );
    if plan_fails {
        let said = planned["error"]
            .as_str()
            .or(plan["error"]["message"].as_str())
            .unwrap();
        let got = run["error"]["message"].as_str().unwrap();
        assert!(
            got.contains(reason(said)),
            "the run failed for another reason than the plan said\n{context}"
        );
        assert_eq!(run["error"]["kind"], kind(said, &plan), "{context}");
        let families_after = after.as_ref().map(families);
        assert_eq!(
            before.as_ref().map(families),
            families_after,
            "a failed run changed the table\n{context}"
        );
        return "fail".into();
    }
    let after = after.unwrap_or_else(|| panic!("no table after the run\n{context}"));
    let action = planned["action"].as_str().unwrap();
    assert_eq!(run["prepared"][0]["action"], action, "{context}");
    let now = families(&after);
    match (action, &before) {
        ("create", None) => {
            assert_eq!(now.keys().collect::<Vec<_>>(), ["info", "stats"], "{context}");
        }
        ("unchanged", Some(before)) => assert_eq!(families(before), now, "{context}"),
        ("update", Some(before)) => {
            let added: Vec<&String> = now
                .keys()
                .filter(|k| !families(before).contains_key(*k))
                .collect();
            assert!(!added.is_empty(), "an update added no family\n{context}");
            for family in added {
                assert!(
                    planned.to_string().contains(family.as_str()),
                    "{family} was added unplanned\n{context}"
                );
            }
        }
        _ => panic!("the plan says {action}\n{context}"),
    }
    // Rows: keys are the ids; names in info:name; scores summed (or set) in stats:score.
    let keys: BTreeSet<String> = after["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect();
    let mut expected: BTreeSet<String> = ["10", "11", "12"].iter().map(|s| s.to_string()).collect();
    if case.table_rows && case.families != Families::Absent {
        expected.extend(["1".to_string(), "2".to_string()]);
    }
    if case.nulls {
        // A row whose mapped values are all null sends nothing.
        expected.remove("11");
    }
    assert_eq!(keys, expected, "{context}");
    assert_eq!(run["result"]["destinations"][&table]["rows"], 3, "{context}");
    let row = |key: &str| {
        after["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == key)
            .cloned()
            .unwrap()
    };
    assert_eq!(
        row("10")["cells"]["info"]["name"][0]["value_hex"],
        hex(b"ada"),
        "{context}"
    );
    if case.extra {
        assert_eq!(
            row("12")["cells"]["info"]["note"][0]["value_hex"],
            hex(b"n12"),
            "{context}"
        );
    }
    action.into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn plan_then_run_bigtable() {
    let host = emulator_host();
    run_cases("Bigtable", BigtableCase::cases(BIGTABLE_CASES), |case| {
        bigtable_case(&host, case)
    });
}
