//! The registry of Outflow's sinks: the one place that lists them.
//!
//! A job file's `sink:` section names one sink and holds exactly the options of that sink's
//! crate; [`SinkSpec`] is that section. It opens the sink it names ([`SinkSpec::open`]: the
//! writer, the preparer of its destinations and where rows go), or the two halves of a
//! two-phase write ([`SinkSpec::open_two_phase`] for each writer, [`SinkSpec::committer`]
//! for the one commit), and resolves the relative paths in the options against the job
//! file's directory ([`SinkSpec::relative_to`]). The command line and the engine crates
//! (`outflow-datafusion`, `outflow-ballista`) know sinks only through it.
//!
//! Each sink is a Cargo feature (`iceberg`, `bigquery`, `bigtable`; all on by default), so a
//! program compiles only the sinks it asks for. A job that names a sink this build left out
//! fails to parse with an error naming the missing feature (context key `feature`).
//!
//! Adding a sink: a variant of [`SinkSpec`] and an arm in `with_options!` (both in this
//! file), an entry in [`SINKS`], a module with its [`Connector`](connector::Connector)
//! implementation, and a Cargo feature. Nothing else in the workspace names sinks.
#![deny(missing_docs)]
// A build with no sink has nothing to dispatch to; it still compiles, for crates (the
// engine) that name no sink and leave the choice to the program.
#![cfg_attr(
    not(any(feature = "iceberg", feature = "bigquery", feature = "bigtable")),
    allow(unused, unreachable_code)
)]

#[cfg(feature = "bigquery")]
mod bigquery;
#[cfg(feature = "bigtable")]
mod bigtable;
mod connector;
#[cfg(feature = "iceberg")]
mod iceberg;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use arrow_schema::Schema;
use outflow_core::{Destination, DynCommitter, DynTwoPhaseSink, Error, PrepareDestination, Result, Sink};
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::connector::Connector;

/// A sink Outflow has, built into this program or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SinkInfo {
    /// Its key under `sink:` and the name of its Cargo feature.
    pub name: &'static str,
    /// The crate that implements it.
    pub crate_name: &'static str,
    /// Whether this program was built with it.
    pub built: bool,
}

/// Every sink, in the order they are listed to users.
pub const SINKS: &[SinkInfo] = &[
    SinkInfo {
        name: "iceberg",
        crate_name: "outflow-iceberg",
        built: cfg!(feature = "iceberg"),
    },
    SinkInfo {
        name: "bigquery",
        crate_name: "outflow-bigquery",
        built: cfg!(feature = "bigquery"),
    },
    SinkInfo {
        name: "bigtable",
        crate_name: "outflow-bigtable",
        built: cfg!(feature = "bigtable"),
    },
];

/// One sink, keyed by its name, holding exactly the options of that sink's builder. The
/// serde form is the `sink:` section of a job file:
///
/// ```yaml
/// iceberg:
///   catalog: { type: sql, uri: lake/catalog.db, warehouse: lake/warehouse }
///   table: analytics.trips
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SinkSpec {
    /// Apache Iceberg (`outflow-iceberg`; options in docs/iceberg.md).
    #[cfg(feature = "iceberg")]
    Iceberg(Box<outflow_iceberg::IcebergSinkOptions>),
    /// Google BigQuery (`outflow-bigquery`; options in docs/bigquery.md).
    #[cfg(feature = "bigquery")]
    BigQuery(Box<outflow_bigquery::BigQuerySinkOptions>),
    /// Google Cloud Bigtable (`outflow-bigtable`; options in docs/bigtable.md).
    #[cfg(feature = "bigtable")]
    Bigtable(Box<outflow_bigtable::BigtableSinkOptions>),
}

/// Runs `$body` with `$options` bound to the spec's options, whatever the sink: the one
/// match over the sinks.
macro_rules! with_options {
    ($spec:expr, $options:ident => $body:expr) => {
        match *$spec {
            #[cfg(feature = "iceberg")]
            SinkSpec::Iceberg(ref $options) => $body,
            #[cfg(feature = "bigquery")]
            SinkSpec::BigQuery(ref $options) => $body,
            #[cfg(feature = "bigtable")]
            SinkSpec::Bigtable(ref $options) => $body,
        }
    };
}

/// A sink ready for a runner.
pub struct OpenedSink {
    /// Writes the batches.
    pub sink: Box<dyn Sink>,
    /// Prepares (or plans) each destination before its first row.
    pub preparer: Arc<dyn PrepareDestination>,
    /// Where rows go: one table, or a table per row.
    pub destination: Destination,
}

impl fmt::Debug for OpenedSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenedSink")
            .field("destination", &self.destination)
            .finish_non_exhaustive()
    }
}

impl SinkSpec {
    /// The sink's name, as written under `sink:`.
    pub fn name(&self) -> &'static str {
        with_options!(self, options => connector::name_of(options.as_ref()))
    }

    /// Whether a two-phase write's committer records the source files a statement loads
    /// ([`outflow_core::Committer::commit_loaded`]): Iceberg in the snapshot, BigQuery in
    /// its ledger table. Bigtable's writers make rows visible as they go, each at its own
    /// time, so a statement's rows cannot be recorded or written again cell for cell.
    pub fn records_statement_loads(&self) -> bool {
        with_options!(self, options => connector::statement_ledger(options.as_ref()))
    }

    /// Checks the options without any I/O, naming the field at fault (what `outflow check`
    /// does with the sink section).
    pub fn validate(&self) -> Result<()> {
        with_options!(self, options => Connector::validate(options.as_ref()))
    }

    /// Checks the options against the schema of the rows the sink will receive, without
    /// I/O, naming the option and the column at fault: the fields a table template names
    /// and every field another option names (partition and sort fields with the types their
    /// transforms take, row-key, column and timestamp fields, clustering columns). What
    /// `outflow check` and `outflow plan` do with the schema after the transforms (or the
    /// engine query's), and what a run does before it reaches a service.
    pub fn check_input(&self, schema: &Schema) -> Result<()> {
        with_options!(self, options => Connector::check_input(options.as_ref(), schema))
    }

    /// The same spec with relative paths in the options (a SQLite catalog, a warehouse, a
    /// key file) made absolute against `base`, as every path in a job file is relative to
    /// the job file. Absolute paths travel to other processes intact.
    pub fn relative_to(&self, base: &Path) -> SinkSpec {
        let base = std::path::absolute(base).unwrap_or_else(|_| base.to_path_buf());
        with_options!(self, options => Connector::relative_to(options.as_ref(), &base).into_spec())
    }

    /// The table every row goes to, when the destination is fixed.
    pub fn fixed_destination(&self) -> Option<String> {
        with_options!(self, options => {
            Connector::destination(options.as_ref()).and_then(|d| d.fixed().map(str::to_string))
        })
    }

    /// Validates the options and opens the sink (connecting, creating nothing yet).
    pub async fn open(&self) -> Result<OpenedSink> {
        with_options!(self, options => Connector::open(options.as_ref()).await)
    }

    /// Opens a writer of a two-phase write: it makes nothing visible itself, and
    /// [`DynTwoPhaseSink::prepare_commit_json`] ends it with what a committer commits.
    pub async fn open_two_phase(&self) -> Result<Box<dyn DynTwoPhaseSink>> {
        with_options!(self, options => Connector::open_two_phase(options.as_ref()).await)
    }

    /// The same spec for the checkpoints of a streaming job: refused, naming the option,
    /// when a restart would change what the sink holds (Bigtable cells timed by the clock),
    /// unless the job accepts at-least-once delivery.
    pub fn for_checkpoints(&self, at_least_once: bool) -> Result<SinkSpec> {
        with_options!(self, options => Ok(Connector::for_checkpoints(options.as_ref(), at_least_once)?.into_spec()))
    }

    /// The committer of a two-phase write: it commits every writer's committables once.
    pub async fn committer(&self) -> Result<Box<dyn DynCommitter>> {
        with_options!(self, options => Connector::committer(options.as_ref()).await)
    }
}

impl Serialize for SinkSpec {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        with_options!(self, options => map.serialize_entry(self.name(), options)?);
        map.end()
    }
}

impl<'de> Deserialize<'de> for SinkSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_map(SpecVisitor)
    }
}

struct SpecVisitor;

impl<'de> Visitor<'de> for SpecVisitor {
    type Value = SinkSpec;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("one sink, keyed by its name (")?;
        f.write_str(&names().join(", "))?;
        f.write_str(")")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<SinkSpec, A::Error> {
        let Some(key) = map.next_key::<String>()? else {
            return Err(de::Error::custom(format!(
                "no sink given: name one of {}",
                names().join(", ")
            )));
        };
        let spec = match key.as_str() {
            #[cfg(feature = "iceberg")]
            "iceberg" => SinkSpec::Iceberg(map.next_value()?),
            #[cfg(feature = "bigquery")]
            "bigquery" => SinkSpec::BigQuery(map.next_value()?),
            #[cfg(feature = "bigtable")]
            "bigtable" => SinkSpec::Bigtable(map.next_value()?),
            other => return Err(de::Error::custom(unknown_sink(other))),
        };
        if map.next_key::<IgnoredAny>()?.is_some() {
            return Err(de::Error::custom(
                "a job writes to one sink: give exactly one of the sink keys",
            ));
        }
        Ok(spec)
    }
}

fn names() -> Vec<&'static str> {
    SINKS.iter().map(|s| s.name).collect()
}

/// Why `name` is not a sink of this program: unknown, or known and left out of this build.
fn unknown_sink(name: &str) -> String {
    match SINKS.iter().find(|s| s.name == name) {
        Some(sink) => not_built(sink).message().to_string(),
        None => format!("unknown sink `{name}`, expected one of {}", names().join(", ")),
    }
}

/// The error for a sink this program was built without, naming its Cargo feature.
pub fn not_built(sink: &SinkInfo) -> Error {
    Error::invalid_config(
        "sink",
        format!(
            "this program was built without the {} sink (Cargo feature `{}`)",
            sink.name, sink.name
        ),
    )
    .with_context("feature", sink.name)
}

/// The sink a serde error says was left out of this build, if that is what it says: for
/// callers that turn the parse error into advice (the command that builds it).
pub fn missing_feature(message: &str) -> Option<&'static SinkInfo> {
    SINKS
        .iter()
        .filter(|s| !s.built)
        .find(|s| message.contains(&format!("(Cargo feature `{}`)", s.name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_sink_round_trips_by_its_name() {
        #[cfg(feature = "iceberg")]
        {
            let yaml = "iceberg: {catalog: {type: memory}, table: db.t}";
            let spec: SinkSpec = serde_yaml_ng::from_str(yaml).unwrap();
            assert_eq!(spec.name(), "iceberg");
            assert_eq!(spec.fixed_destination().as_deref(), Some("db.t"));
            let json = serde_json::to_string(&spec).unwrap();
            assert!(json.starts_with(r#"{"iceberg":"#), "{json}");
            assert_eq!(serde_json::from_str::<SinkSpec>(&json).unwrap(), spec);
        }
        #[cfg(feature = "bigtable")]
        {
            let yaml = "bigtable: {project: p, instance: i, table: t, create_disposition: create_never, row_key: id, columns: {family: cf}}";
            let spec: SinkSpec = serde_yaml_ng::from_str(yaml).unwrap();
            assert_eq!(spec.name(), "bigtable");
            spec.validate().unwrap();
            assert_eq!(
                serde_json::from_value::<SinkSpec>(serde_json::to_value(&spec).unwrap()).unwrap(),
                spec
            );
        }
        #[cfg(feature = "bigquery")]
        {
            let yaml = "bigquery: {table: p.d.t, create_disposition: create_never}";
            let spec: SinkSpec = serde_yaml_ng::from_str(yaml).unwrap();
            assert_eq!(spec.name(), "bigquery");
            assert_eq!(
                serde_json::from_value::<SinkSpec>(serde_json::to_value(&spec).unwrap()).unwrap(),
                spec
            );
        }
    }

    #[test]
    fn unknown_and_doubled_sinks_are_refused() {
        let err = serde_yaml_ng::from_str::<SinkSpec>("kafka: {}").unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown sink `kafka`, expected one of iceberg, bigquery, bigtable"),
            "{err}"
        );
        let err = serde_yaml_ng::from_str::<SinkSpec>("{}").unwrap_err();
        assert!(err.to_string().contains("no sink given"), "{err}");
        #[cfg(all(feature = "iceberg", feature = "bigtable"))]
        {
            let err = serde_yaml_ng::from_str::<SinkSpec>(
                "iceberg: {catalog: {type: memory}, table: db.t}\nbigtable: {}",
            )
            .unwrap_err();
            assert!(err.to_string().contains("exactly one"), "{err}");
        }
    }

    #[test]
    fn a_sink_left_out_names_its_feature() {
        let sink = SinkInfo {
            name: "bigquery",
            crate_name: "outflow-bigquery",
            built: false,
        };
        let err = not_built(&sink);
        assert_eq!(err.context_value("feature"), Some("bigquery"));
        assert!(err.message().contains("built without the bigquery sink"), "{err}");
    }

    #[test]
    fn check_input_reaches_every_built_sink() {
        use arrow_schema::{DataType, Field};
        let rows = Schema::new(vec![Field::new("id", DataType::Int64, false)]);
        let mut specs = Vec::new();
        #[cfg(feature = "iceberg")]
        specs.push((
            "iceberg: {catalog: {type: memory}, table: db.t, table_options: {partition_fields: [day(ts)]}}",
            "table_options.partition_fields",
        ));
        #[cfg(feature = "bigquery")]
        specs.push((
            "bigquery: {table: 'p.d.t_{region}', create_disposition: create_never}",
            "table",
        ));
        #[cfg(feature = "bigtable")]
        specs.push((
            "bigtable: {project: p, instance: i, table: t, create_disposition: create_never, row_key: key, columns: {family: cf}}",
            "row_key",
        ));
        for (yaml, key) in specs {
            let spec: SinkSpec = serde_yaml_ng::from_str(yaml).unwrap();
            let err = spec.check_input(&rows).unwrap_err();
            assert_eq!(err.context_value("field"), Some(key), "{yaml}: {err}");
        }
    }

    #[cfg(feature = "iceberg")]
    #[test]
    fn relative_paths_resolve_against_the_job_directory() {
        let spec: SinkSpec = serde_yaml_ng::from_str(
            "iceberg: {catalog: {type: sql, uri: lake/catalog.db, warehouse: lake/wh}, table: db.t}",
        )
        .unwrap();
        let moved = spec.relative_to(Path::new("/jobs"));
        let json = serde_json::to_value(&moved).unwrap();
        assert_eq!(json["iceberg"]["catalog"]["uri"], "/jobs/lake/catalog.db");
        assert_eq!(json["iceberg"]["catalog"]["warehouse"], "/jobs/lake/wh");
    }
}
