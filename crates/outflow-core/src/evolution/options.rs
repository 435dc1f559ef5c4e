//! The schema changes a sink may make to a table, and what to do with inputs that need more.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::named::named_enum;
use crate::{Error, Result};

named_enum! {
    /// A kind of schema change a sink may make so that an input fits the table.
    pub enum SchemaEvolutionOption {
        /// Add columns that inputs have and the table lacks, optional at every level. Also
        /// lets a sink create a missing table from the union of its inputs' schemas.
        AllowFieldAddition = "allow_field_addition" | "field_addition" | "addition",
        /// Make a required column optional when an input has nulls in it, carries no null
        /// statistics for it, or lacks it. Table-wide and permanent.
        AllowFieldRelaxation = "allow_field_relaxation" | "field_relaxation" | "relaxation",
        /// Widen a column's type: int to long, float to double, decimal precision.
        AllowTypePromotion = "allow_type_promotion" | "type_promotion" | "promotion",
    }
}

named_enum! {
    /// What happens to inputs whose schema cannot fit the table under the options.
    #[derive(Default)]
    pub enum IncompatibleSchemaHandling {
        /// Commit nothing; the error lists every incompatible input and why (the default).
        #[default]
        Fail = "fail",
        /// Commit the compatible inputs; the others come back as errors with reasons.
        RouteToErrors = "route_to_errors" | "route",
    }
}

named_enum! {
    /// What happens to inputs whose statistics cannot prove what a rule needs (for example
    /// zero nulls in a pinned column of a file without null counts).
    #[derive(Default)]
    pub enum UnverifiableFileHandling {
        /// Treat them as incompatible (the default).
        #[default]
        Reject = "reject",
        /// Trust them: take the unproven column as free of nulls.
        Accept = "accept",
    }
}

/// How a sink may evolve a table's schema, built by [`SchemaEvolutionConfig::builder`].
///
/// With no option, evolution is off: inputs must fit the table as it is. Any other setting
/// given without an option is rejected by `build()`, since it would silently do nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ConfigSpec", into = "ConfigSpec")]
pub struct SchemaEvolutionConfig {
    options: BTreeSet<SchemaEvolutionOption>,
    required_columns: Vec<String>,
    /// `None` when not given: each sink has its default ([`Self::on_incompatible_or`]).
    on_incompatible: Option<IncompatibleSchemaHandling>,
    on_unverifiable: UnverifiableFileHandling,
    dry_run: bool,
}

impl SchemaEvolutionConfig {
    /// A builder with evolution off.
    pub fn builder() -> SchemaEvolutionConfigBuilder {
        SchemaEvolutionConfigBuilder::default()
    }

    /// Evolution off: inputs must fit the table as it is.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// The allowed changes.
    pub fn options(&self) -> &BTreeSet<SchemaEvolutionOption> {
        &self.options
    }

    /// Whether `option` is allowed.
    pub fn allows(&self, option: SchemaEvolutionOption) -> bool {
        self.options.contains(&option)
    }

    /// Whether any change is allowed.
    pub fn is_enabled(&self) -> bool {
        !self.options.is_empty()
    }

    /// The pinned columns: paths that must stay required and hold no nulls, written the
    /// one way [`join_path`](crate::schema::join_path) writes them.
    pub fn required_columns(&self) -> &[String] {
        &self.required_columns
    }

    /// Whether `path` is pinned.
    pub fn is_required_column(&self, path: &str) -> bool {
        self.required_columns.iter().any(|p| p == path)
    }

    /// The pinned columns at or below `path` (the column itself or its descendants).
    pub fn required_columns_under(&self, path: &str) -> impl Iterator<Item = &str> {
        let parent = crate::schema::path_names(path);
        self.required_columns
            .iter()
            .filter(move |p| crate::schema::path_names(p).starts_with(&parent))
            .map(String::as_str)
    }

    /// What happens to incompatible inputs: as given, else `fail`.
    pub fn on_incompatible(&self) -> IncompatibleSchemaHandling {
        self.on_incompatible.unwrap_or_default()
    }

    /// What happens to incompatible inputs: as given, else the sink's own `default` (a
    /// sink that writes row by row routes rows that do not fit to failed records).
    pub fn on_incompatible_or(&self, default: IncompatibleSchemaHandling) -> IncompatibleSchemaHandling {
        self.on_incompatible.unwrap_or(default)
    }

    /// What happens to inputs whose statistics prove too little.
    pub fn on_unverifiable(&self) -> UnverifiableFileHandling {
        self.on_unverifiable
    }

    /// Whether to plan and report without changing anything.
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }
}

/// Builds a [`SchemaEvolutionConfig`]; setters never fail, `build()` validates.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchemaEvolutionConfigBuilder {
    options: BTreeSet<SchemaEvolutionOption>,
    required_columns: Vec<String>,
    on_incompatible: Option<IncompatibleSchemaHandling>,
    on_unverifiable: Option<UnverifiableFileHandling>,
    dry_run: Option<bool>,
}

impl SchemaEvolutionConfigBuilder {
    /// Allows one kind of change.
    pub fn allow(mut self, option: SchemaEvolutionOption) -> Self {
        self.options.insert(option);
        self
    }

    /// Allows several kinds of change.
    pub fn allow_all(mut self, options: impl IntoIterator<Item = SchemaEvolutionOption>) -> Self {
        self.options.extend(options);
        self
    }

    /// Pins a column (dotted path, through lists with `element` and maps with `key` or
    /// `value`): it is never relaxed, and inputs with nulls in it or without it are
    /// incompatible.
    pub fn required_column(mut self, path: impl Into<String>) -> Self {
        self.required_columns.push(path.into());
        self
    }

    /// Pins several columns.
    pub fn required_columns<S: Into<String>>(mut self, paths: impl IntoIterator<Item = S>) -> Self {
        self.required_columns.extend(paths.into_iter().map(Into::into));
        self
    }

    /// Sets what happens to incompatible inputs.
    pub fn on_incompatible(mut self, handling: IncompatibleSchemaHandling) -> Self {
        self.on_incompatible = Some(handling);
        self
    }

    /// Sets what happens to inputs whose statistics prove too little.
    pub fn on_unverifiable(mut self, handling: UnverifiableFileHandling) -> Self {
        self.on_unverifiable = Some(handling);
        self
    }

    /// Plans and reports without changing anything.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = Some(dry_run);
        self
    }

    /// Validates and builds the configuration.
    pub fn build(self) -> Result<SchemaEvolutionConfig> {
        if self.options.is_empty() {
            let mut given = Vec::new();
            if !self.required_columns.is_empty() {
                given.push("required_columns");
            }
            if self.on_incompatible.is_some() {
                given.push("on_incompatible");
            }
            if self.on_unverifiable.is_some() {
                given.push("on_unverifiable");
            }
            if self.dry_run.is_some() {
                given.push("dry_run");
            }
            if !given.is_empty() {
                return Err(Error::invalid_config(
                    given[0],
                    format!(
                        "{} given without any schema evolution option; evolution is off \
                         unless `options` allows a change ({})",
                        given.join(", "),
                        SchemaEvolutionOption::ALL
                            .iter()
                            .map(|o| o.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        let mut required_columns = Vec::new();
        for path in self.required_columns {
            validate_column_path(&path)?;
            // One spelling per column: `a`.b and a.b are the same path.
            let path = crate::schema::path_of(&crate::schema::path_names(&path));
            if !required_columns.contains(&path) {
                required_columns.push(path);
            }
        }
        Ok(SchemaEvolutionConfig {
            options: self.options,
            required_columns,
            on_incompatible: self.on_incompatible,
            on_unverifiable: self.on_unverifiable.unwrap_or_default(),
            dry_run: self.dry_run.unwrap_or(false),
        })
    }
}

/// Checks a column path: non-blank, no empty segment, backtick quotes closed (a name
/// with a dot in it is written `` `a.b` ``).
pub fn validate_column_path(path: &str) -> Result<()> {
    if path.trim().is_empty() {
        return Err(Error::invalid_config(
            "required_columns",
            "a column path is blank",
        ));
    }
    crate::schema::split_path(path)
        .map(drop)
        .map_err(|why| Error::invalid_config("required_columns", format!("column {why}")))
}

/// The serialized form: only the settings given, so a round trip rebuilds the same config.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigSpec {
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    options: BTreeSet<SchemaEvolutionOption>,
    #[serde(default, alias = "pinned_columns", skip_serializing_if = "Vec::is_empty")]
    required_columns: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    on_incompatible: Option<IncompatibleSchemaHandling>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    on_unverifiable: Option<UnverifiableFileHandling>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dry_run: Option<bool>,
}

impl TryFrom<ConfigSpec> for SchemaEvolutionConfig {
    type Error = Error;

    fn try_from(spec: ConfigSpec) -> Result<Self> {
        SchemaEvolutionConfigBuilder {
            options: spec.options,
            required_columns: spec.required_columns,
            on_incompatible: spec.on_incompatible,
            on_unverifiable: spec.on_unverifiable,
            dry_run: spec.dry_run,
        }
        .build()
    }
}

impl From<SchemaEvolutionConfig> for ConfigSpec {
    fn from(c: SchemaEvolutionConfig) -> Self {
        let default_if = |v: bool| v.then_some(());
        ConfigSpec {
            on_incompatible: c.on_incompatible,
            on_unverifiable: default_if(c.on_unverifiable != UnverifiableFileHandling::default())
                .map(|_| c.on_unverifiable),
            dry_run: default_if(c.dry_run).map(|_| true),
            options: c.options,
            required_columns: c.required_columns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SchemaEvolutionOption::*;
    use super::*;

    #[test]
    fn defaults() {
        let c = SchemaEvolutionConfig::builder().build().unwrap();
        assert!(!c.is_enabled());
        assert_eq!(c, SchemaEvolutionConfig::disabled());
        assert_eq!(c.on_incompatible(), IncompatibleSchemaHandling::Fail);
        assert_eq!(
            c.on_incompatible_or(IncompatibleSchemaHandling::RouteToErrors),
            IncompatibleSchemaHandling::RouteToErrors
        );
        assert_eq!(c.on_unverifiable(), UnverifiableFileHandling::Reject);
        assert!(!c.dry_run());
        assert!(c.required_columns().is_empty());
    }

    #[test]
    fn setters() {
        let c = SchemaEvolutionConfig::builder()
            .allow(AllowFieldAddition)
            .allow_all([AllowFieldRelaxation, AllowTypePromotion])
            .required_column("id")
            .required_columns(["addresses.element.city", "id"])
            .on_incompatible(IncompatibleSchemaHandling::RouteToErrors)
            .on_unverifiable(UnverifiableFileHandling::Accept)
            .dry_run(true)
            .build()
            .unwrap();
        assert!(
            c.allows(AllowFieldAddition) && c.allows(AllowFieldRelaxation) && c.allows(AllowTypePromotion)
        );
        assert_eq!(c.required_columns(), ["id", "addresses.element.city"]);
        assert!(c.is_required_column("addresses.element.city"));
        assert_eq!(c.on_incompatible(), IncompatibleSchemaHandling::RouteToErrors);
        assert_eq!(c.on_unverifiable(), UnverifiableFileHandling::Accept);
        assert!(c.dry_run());
    }

    #[test]
    fn settings_without_an_option_are_rejected_by_name() {
        let err = SchemaEvolutionConfig::builder()
            .required_column("id")
            .build()
            .unwrap_err();
        assert_eq!(err.context_value("field"), Some("required_columns"));
        let err = SchemaEvolutionConfig::builder()
            .on_unverifiable(UnverifiableFileHandling::Accept)
            .dry_run(false)
            .build()
            .unwrap_err();
        assert!(
            err.to_string().contains("on_unverifiable, dry_run given without"),
            "{err}"
        );
    }

    #[test]
    fn blank_paths_are_rejected() {
        for bad in ["", "  ", "a..b", ".a"] {
            let err = SchemaEvolutionConfig::builder()
                .allow(AllowFieldRelaxation)
                .required_column(bad)
                .build()
                .unwrap_err();
            assert_eq!(err.context_value("field"), Some("required_columns"), "{bad:?}");
        }
    }

    #[test]
    fn serde_round_trip() {
        let configs = [
            SchemaEvolutionConfig::disabled(),
            SchemaEvolutionConfig::builder()
                .allow(AllowTypePromotion)
                .build()
                .unwrap(),
            SchemaEvolutionConfig::builder()
                .allow_all([AllowFieldAddition, AllowFieldRelaxation])
                .required_column("attrs.value.score")
                .on_incompatible(IncompatibleSchemaHandling::RouteToErrors)
                .on_unverifiable(UnverifiableFileHandling::Accept)
                .dry_run(true)
                .build()
                .unwrap(),
        ];
        for c in configs {
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(
                serde_json::from_str::<SchemaEvolutionConfig>(&json).unwrap(),
                c,
                "{json}"
            );
            let yaml = serde_yaml_ng::to_string(&c).unwrap();
            assert_eq!(
                serde_yaml_ng::from_str::<SchemaEvolutionConfig>(&yaml).unwrap(),
                c,
                "{yaml}"
            );
        }
    }

    #[test]
    fn serde_validates_like_the_builder() {
        let yaml = "options: [field-addition, ALLOW_TYPE_PROMOTION]\nrequired_columns: [id]\non_incompatible: route_to_errors\n";
        let c: SchemaEvolutionConfig = serde_yaml_ng::from_str(yaml).unwrap();
        assert!(c.allows(AllowFieldAddition) && c.allows(AllowTypePromotion));
        let err = serde_yaml_ng::from_str::<SchemaEvolutionConfig>("required_columns: [id]\n").unwrap_err();
        assert!(
            err.to_string().contains("without any schema evolution option"),
            "{err}"
        );
        let err = serde_yaml_ng::from_str::<SchemaEvolutionConfig>("optoins: []\n").unwrap_err();
        assert!(err.to_string().contains("optoins"), "{err}");
    }
}
