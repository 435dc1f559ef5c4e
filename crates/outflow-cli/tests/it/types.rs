//! Column types in job files, written as Iceberg, Spark and DuckDB write them, and printed
//! by `outflow check` the one way. Needs no server.

use predicates::prelude::*;
use predicates::str::contains;

use crate::cli::{SINK, job as write};
use crate::outflow;

/// `outflow check` on a job of `source` (the `source:` section's body) and the memory
/// sink, with `data` written next to it.
fn check(data: (&str, &str), source: &str) -> assert_cmd::assert::Assert {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), data.0, data.1);
    let job = write(dir.path(), "job.yaml", &format!("source:\n{source}{SINK}"));
    outflow().arg("check").arg(job).assert()
}

#[test]
fn csv_columns_take_the_usual_spellings() {
    check(
        ("in.csv", "id,amount,city,at,ok\n1,2.50,Lisbon,2026-11-01T00:02:00Z,true\n"),
        "  path: in.csv\n  csv:\n    schema:\n      - {name: id, type: BIGINT, required: true}\n      \
         - {name: amount, type: 'decimal(10, 2)'}\n      - {name: city, type: varchar(40)}\n      \
         - {name: at, type: timestamp with time zone}\n      - {name: ok, type: bool}\n\
         transforms:\n  - cast: { id: integer, amount: float64 }\n",
    )
    .success()
    .stdout(contains(
        "Source schema:\n  id: long not null\n  amount: decimal(10,2)\n  city: string\n  at: timestamptz\n  ok: boolean\n",
    ))
    .stdout(contains("Schema after transforms:\n  id: int not null\n  amount: double\n"));
}

#[test]
fn ndjson_columns_take_nested_types_as_text() {
    check(
        (
            "in.ndjson",
            "{\"tags\": [\"a\"], \"attrs\": {\"k\": 1}, \"user\": {\"name\": \"x\", \"age\": 3}, \"pos\": {\"x\": 1.5, \"y\": 2}}\n",
        ),
        "  path: in.ndjson\n  ndjson:\n    schema:\n      - {name: tags, type: 'array<string>'}\n      \
         - {name: attrs, type: 'map<string, long>'}\n      - {name: user, type: 'struct<name: string, age: int not null>'}\n      \
         - name: pos\n        type: STRUCT<x:DOUBLE,y:DOUBLE>\n",
    )
    .success()
    .stdout(contains(
        "  tags: list<string>\n  attrs: map<string, long>\n  user: struct<name: string, age: int not null>\n  \
         pos: struct<x: double, y: double>\n",
    ))
    .stdout(contains("1 rows"));
}

#[test]
fn a_wrong_type_is_named_with_the_nearest() {
    check(
        ("in.csv", "id\n1\n"),
        "  path: in.csv\n  csv:\n    schema:\n      - {name: id, type: integr}\n",
    )
    .code(2)
    .stderr(contains("job.yaml: line 5").and(contains("unknown type \"integr\"; did you mean \"integer\"?")))
    .stderr(contains("untagged").not());
    check(
        ("in.csv", "id\n1\n"),
        "  path: in.csv\ntransforms:\n  - cast: { id: 'list<strng>' }\n",
    )
    .code(2)
    .stderr(contains("line 4").and(contains("did you mean \"string\"?")));
}

#[test]
fn a_time_with_a_zone_says_what_to_write_instead() {
    check(
        ("in.csv", "id,at\n1,10:00:00+01\n"),
        "  path: in.csv\n  csv:\n    schema:\n      - {name: id, type: long}\n      - {name: at, type: time with time zone}\n",
    )
    .code(2)
    .stderr(contains("job.yaml: line 6").and(contains(
        "source.csv.schema[1].type: unsupported type \"time with time zone\": no type here holds a time of day \
         with its zone offset; did you mean \"time\" (the time of day, zone dropped), \"timestamptz\" (an instant) \
         or \"string\" (the text as written)?",
    )))
    .stderr(contains("unexpected").not());
}

#[test]
fn inferred_csv_timestamps_keep_their_zone() {
    check(
        (
            "in.csv",
            "utc,offset,local\n2026-11-01T00:02:00Z,2026-11-01T01:02:00+01:00,2026-11-01T00:02:00\n",
        ),
        "  path: in.csv\n",
    )
    .success()
    .stdout(contains(
        "Source schema:\n  utc: timestamptz\n  offset: timestamptz\n  local: timestamp\n",
    ));
}
