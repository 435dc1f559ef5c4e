//! The evolution planner: pure, deterministic, the same for every sink.
//!
//! Given a table schema (or none) and a window of input schemas with their null statistics,
//! it decides the table's new schema, a verdict per input and the classified changes.
//!
//! How it decides, in three passes:
//! 1. Each input is compared with the table's existing columns. What it needs there
//!    (relaxation, promotion) must be allowed by the options, or the input is incompatible;
//!    conflicts always make it incompatible. Columns the table lacks are noted as additions.
//! 2. The additions of the inputs that survived pass 1 are unioned per column: the kind and
//!    type most inputs can be read as wins (for types that widen into each other, the
//!    widest), optional at every level. An input whose type cannot be read as the winner is
//!    incompatible; the union is recomputed without it until nothing changes.
//! 3. The survivors' needs are applied to the table's schema and new ids are assigned.
//!
//! Inputs are processed in a canonical order (sorted by their serialized form), so the plan
//! does not depend on the order they were given in; verdicts and change inputs still use
//! the caller's indexes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::options::{SchemaEvolutionConfig, SchemaEvolutionOption};
use super::plan::{ChangeKind, EvolutionPlan, InputVerdict, Reason, SchemaChange, Verdict};
use crate::UnverifiableFileHandling;
use crate::schema::{
    ColumnKey, DataType, Field, InputSchema, LIST_ELEMENT, MAP_KEY, MAP_VALUE, MappedField, NameMapping,
    NullCount, PrimitiveType, Schema, join_path, match_level, path_names, quote_name, split_last_name,
    trusts_ids,
};
use crate::{Error, Result};

/// A change's identity while the plan is assembled: path, kind, from, to, applied.
type ChangeKey = (String, ChangeKind, Option<String>, Option<String>, bool);

/// Plans schema evolution for windows of inputs against one table.
#[derive(Clone, Debug)]
pub struct EvolutionPlanner<'a> {
    config: &'a SchemaEvolutionConfig,
    table: Option<&'a Schema>,
    name_mapping: Option<&'a NameMapping>,
    last_column_id: i32,
}

impl<'a> EvolutionPlanner<'a> {
    /// A planner for a table that does not exist yet (see [`EvolutionPlanner::table`]).
    pub fn new(config: &'a SchemaEvolutionConfig) -> Self {
        EvolutionPlanner {
            config,
            table: None,
            name_mapping: None,
            last_column_id: 0,
        }
    }

    /// Plans against an existing table's current schema.
    pub fn table(mut self, schema: &'a Schema) -> Self {
        self.table = Some(schema);
        self
    }

    /// Resolves inputs without matching field ids through this name mapping.
    pub fn name_mapping(mut self, mapping: &'a NameMapping) -> Self {
        self.name_mapping = Some(mapping);
        self
    }

    /// The highest field id the table has ever assigned (Iceberg's `last-column-id`); new
    /// columns get ids above it and above every id in the schema.
    pub fn last_column_id(mut self, id: i32) -> Self {
        self.last_column_id = id;
        self
    }

    /// Plans the window. Fails only on a bug in the planner (an internal error naming the
    /// column it could not change), never because of what the inputs hold.
    pub fn plan(&self, inputs: &[InputSchema]) -> Result<EvolutionPlan> {
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        let keys: Vec<String> = inputs
            .iter()
            .map(|i| serde_json::to_string(i).expect("schemas serialize"))
            .collect();
        order.sort_by(|&a, &b| keys[a].cmp(&keys[b]).then(a.cmp(&b)));

        let addition_allowed = self.config.allows(SchemaEvolutionOption::AllowFieldAddition);
        match self.table {
            Some(table) => self.plan_against(table, false, inputs, &order),
            None if addition_allowed => self.plan_against(&Schema::default(), true, inputs, &order),
            None => {
                // Without field addition a missing table is created from one input schema,
                // the one most inputs share, and the rest are planned against it.
                let base = most_common_schema(inputs, &order);
                let mut table = base.without_ids();
                table.assign_missing_ids(0);
                for path in self.config.required_columns() {
                    // A pinned column the base input lacks is planned as missing.
                    if table.field_at(path).is_some() {
                        set_required(&mut table, path)?;
                    }
                }
                self.plan_against(&table, true, inputs, &order)
            }
        }
    }

    /// Plans the window against `table`, which is the one to create when `creating`.
    fn plan_against(
        &self,
        table: &Schema,
        creating: bool,
        inputs: &[InputSchema],
        order: &[usize],
    ) -> Result<EvolutionPlan> {
        let analyses = self.compare_inputs(table, inputs, order);
        let admission = self.admit_inputs(order, &analyses, creating);
        let needs = ColumnNeeds::gather(&analyses, &admission.alive);
        let schema = self.evolve_schema(table, creating, &needs, &admission.unions)?;
        let changes = list_changes(creating, &schema, &needs, &analyses, &admission);
        let verdicts = verdicts(creating, &analyses, &admission);
        Ok(EvolutionPlan {
            current: if creating { None } else { Some(table.clone()) },
            schema: if creating && admission.alive.is_empty() {
                None
            } else {
                Some(schema)
            },
            creates_table: creating,
            changes,
            verdicts,
        })
    }

    /// Pass 1: what each input needs of the table's existing columns, and what it adds.
    fn compare_inputs(
        &self,
        table: &Schema,
        inputs: &[InputSchema],
        order: &[usize],
    ) -> BTreeMap<usize, Analysis> {
        let mapping: &[MappedField] = self.name_mapping.map(|m| m.fields.as_slice()).unwrap_or(&[]);
        order
            .iter()
            .map(|&i| (i, self.compare_input(table, mapping, &inputs[i])))
            .collect()
    }

    /// One input against the table, matched by field ids when they agree with the table's.
    fn compare_input(&self, table: &Schema, mapping: &[MappedField], input: &InputSchema) -> Analysis {
        let mut cx = Compare {
            config: self.config,
            input,
            out: Analysis::default(),
            use_ids: trusts_ids(table, self.name_mapping, &input.schema),
        };
        cx.level(&table.fields, mapping, &input.schema.fields, "", "", false);
        // Pinned columns the table does not have yet must be in every input, null-free.
        for path in self.config.required_columns() {
            if table.field_at(path).is_none() {
                cx.new_pinned(path);
            }
        }
        if !self.config.allows(SchemaEvolutionOption::AllowFieldAddition) {
            cx.refuse_additions();
        }
        cx.out
    }

    /// Pass 2: admits the pass-1 survivors whose additions union without anyone losing.
    fn admit_inputs(
        &self,
        order: &[usize],
        analyses: &BTreeMap<usize, Analysis>,
        creating: bool,
    ) -> Admission {
        let survivors = order
            .iter()
            .copied()
            .filter(|i| analyses[i].survives(self.config))
            .collect();
        let mut admission = self.reject_union_losers(order, analyses, survivors, creating);
        self.readmit_losers(order, analyses, &mut admission, creating);
        admission
    }

    /// Unions the additions and rejects the inputs that lose, until no one loses.
    fn reject_union_losers(
        &self,
        order: &[usize],
        analyses: &BTreeMap<usize, Analysis>,
        mut alive: BTreeSet<usize>,
        creating: bool,
    ) -> Admission {
        let mut losses: BTreeMap<usize, Vec<Loss>> = BTreeMap::new();
        loop {
            let unions = self.union_additions(order, analyses, &alive, creating);
            let mut lost = false;
            for (_, u) in &unions {
                for (i, loss) in &u.losers {
                    lost |= alive.remove(i);
                    losses.entry(*i).or_default().push(loss.clone());
                }
            }
            if !lost {
                return Admission {
                    alive,
                    unions,
                    losses,
                };
            }
        }
    }

    /// Gives a union loser another chance, since it may have lost only to inputs that were
    /// themselves rejected: it is admitted when the union with it makes no one lose.
    ///
    /// A trial is narrowed to what decides it, since thousands of losers made a full union
    /// per trial quadratic. The admitted inputs' unions have no losers, so only the loser's
    /// own new columns are unioned. A union has no losers when its candidates share a kind
    /// and, at each level, a type they all widen to: that depends on which types they have,
    /// not on how many inputs have each, nor their order. So a trial unions one candidate
    /// per type, and its outcome holds until an admission gives the column a new type.
    fn readmit_losers(
        &self,
        order: &[usize],
        analyses: &BTreeMap<usize, Analysis>,
        admission: &mut Admission,
        creating: bool,
    ) {
        /// One candidate per column and type: the types seen, and a candidate of each.
        #[derive(Default)]
        struct Distinct<'a> {
            seen: HashSet<(&'a str, &'a DataType)>,
            at: HashMap<&'a str, Vec<(usize, &'a Field)>>,
        }
        impl<'a> Distinct<'a> {
            /// Notes the candidate unless its column has its type; true when it is new.
            fn add(&mut self, i: usize, add: &'a Addition) -> bool {
                let new = self.seen.insert((&add.path, &add.field.data_type));
                if new {
                    self.at.entry(&add.path).or_default().push((i, &add.field));
                }
                new
            }
        }
        let mut distinct = Distinct::default();
        for &i in &admission.alive {
            for add in &analyses[&i].additions {
                distinct.add(i, add);
            }
        }
        let mut outcomes: HashMap<&str, HashMap<Vec<&DataType>, bool>> = HashMap::new();
        let mut changed = false;
        loop {
            let mut admitted = false;
            for &i in order {
                if !admission.losses.contains_key(&i) {
                    continue;
                }
                let additions = &analyses[&i].additions;
                let fits = additions.iter().all(|add| {
                    let theirs: Vec<(usize, &Field)> = additions
                        .iter()
                        .filter(|a| a.path == add.path)
                        .map(|a| (i, &a.field))
                        .collect();
                    let types = theirs.iter().map(|(_, f)| &f.data_type).collect();
                    *outcomes
                        .entry(&add.path)
                        .or_default()
                        .entry(types)
                        .or_insert_with(|| {
                            let mut trial = distinct.at.get(add.path.as_str()).cloned().unwrap_or_default();
                            trial.extend(theirs);
                            union_field(&add.path, &add.field.name, &trial, self.config, creating)
                                .losers
                                .is_empty()
                        })
                });
                if fits {
                    admission.losses.remove(&i);
                    admission.alive.insert(i);
                    for add in additions {
                        if distinct.add(i, add) {
                            outcomes.remove(add.path.as_str());
                        }
                    }
                    admitted = true;
                }
            }
            if !admitted {
                break;
            }
            changed = true;
        }
        if changed {
            admission.unions = self.union_additions(order, analyses, &admission.alive, creating);
        }
    }

    /// Unions the additions of the `alive` inputs per column path.
    fn union_additions(
        &self,
        order: &[usize],
        analyses: &BTreeMap<usize, Analysis>,
        alive: &BTreeSet<usize>,
        creating: bool,
    ) -> Vec<(String, Union)> {
        let mut by_path: Vec<(String, Vec<(usize, &Field)>)> = Vec::new();
        // A window can add thousands of columns: find a path's entry by hash, not by scan.
        let mut index: HashMap<&str, usize> = HashMap::new();
        for &i in order {
            if !alive.contains(&i) {
                continue;
            }
            for add in &analyses[&i].additions {
                match index.get(add.path.as_str()) {
                    Some(&at) => by_path[at].1.push((i, &add.field)),
                    None => {
                        index.insert(&add.path, by_path.len());
                        by_path.push((add.path.clone(), vec![(i, &add.field)]));
                    }
                }
            }
        }
        by_path
            .into_iter()
            .map(|(path, candidates)| {
                let name = candidates[0].1.name.clone();
                let u = union_field(&path, &name, &candidates, self.config, creating);
                (path, u)
            })
            .collect()
    }

    /// Pass 3: the table's schema with the admitted inputs' needs met; new columns get ids
    /// above every id the table has used, unless an existing table has none.
    fn evolve_schema(
        &self,
        table: &Schema,
        creating: bool,
        needs: &ColumnNeeds,
        unions: &[(String, Union)],
    ) -> Result<Schema> {
        let mut schema = table.clone();
        for path in needs.relaxations.keys() {
            set_optional(&mut schema, path)?;
        }
        for (path, (_, to, _)) in &needs.promotions {
            set_type(&mut schema, path, *to)?;
        }
        let mut next_id = self.last_column_id.max(table.max_field_id());
        let assign_ids = creating || table.max_field_id() > 0;
        for (path, u) in unions {
            let mut field = u.field.clone();
            if assign_ids {
                let mut holder = Schema::new(vec![field]);
                next_id = holder.assign_missing_ids(next_id);
                field = holder.fields.pop().expect("one field");
            }
            insert_field(&mut schema, path, field)?;
        }
        Ok(schema)
    }
}

/// What pass 2 decides: the inputs admitted, the unioned additions, why the others lost.
struct Admission {
    alive: BTreeSet<usize>,
    unions: Vec<(String, Union)>,
    /// Per input that lost a union, each loss; admitted inputs have none.
    losses: BTreeMap<usize, Vec<Loss>>,
}

impl Admission {
    fn losses_of(&self, input: usize) -> &[Loss] {
        self.losses.get(&input).map(Vec::as_slice).unwrap_or_default()
    }
}

/// The relaxations and promotions the admitted inputs need, per column, with those inputs.
struct ColumnNeeds {
    relaxations: BTreeMap<String, BTreeSet<usize>>,
    /// The table's type, the type it widens to and the inputs that need it.
    promotions: BTreeMap<String, (PrimitiveType, PrimitiveType, BTreeSet<usize>)>,
}

impl ColumnNeeds {
    /// Gathers the needs of the `alive` inputs; a column several inputs widen takes the widest.
    fn gather(analyses: &BTreeMap<usize, Analysis>, alive: &BTreeSet<usize>) -> Self {
        let mut relaxations: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
        let mut promotions: BTreeMap<String, (PrimitiveType, PrimitiveType, BTreeSet<usize>)> =
            BTreeMap::new();
        for &i in alive {
            let a = &analyses[&i];
            for path in a.relaxations.keys() {
                relaxations.entry(path.clone()).or_default().insert(i);
            }
            for (path, (from, to)) in &a.promotions {
                let entry = promotions
                    .entry(path.clone())
                    .or_insert((*from, *to, BTreeSet::new()));
                if entry.1.widens_to(*to) {
                    entry.1 = *to;
                }
                entry.2.insert(i);
            }
        }
        ColumnNeeds {
            relaxations,
            promotions,
        }
    }
}

/// Every change, applied or refused, sorted by path, kind, from, to and applied.
fn list_changes(
    creating: bool,
    schema: &Schema,
    needs: &ColumnNeeds,
    analyses: &BTreeMap<usize, Analysis>,
    admission: &Admission,
) -> Vec<SchemaChange> {
    let mut changes = applied_changes(creating, schema, needs, analyses, admission);
    add_refused_changes(&mut changes, analyses, admission);
    changes
        .into_iter()
        .map(|((path, kind, from, to, applied), inputs)| SchemaChange {
            path,
            kind,
            from,
            to,
            applied,
            inputs: inputs.into_iter().collect(),
        })
        .collect()
}

/// The changes pass 3 made, with the inputs needing each; creating the table instead counts
/// each of its columns as an addition by every admitted input.
fn applied_changes(
    creating: bool,
    schema: &Schema,
    needs: &ColumnNeeds,
    analyses: &BTreeMap<usize, Analysis>,
    admission: &Admission,
) -> BTreeMap<ChangeKey, BTreeSet<usize>> {
    if creating {
        // With every input rejected nothing is created, so nothing is added.
        if admission.alive.is_empty() {
            return BTreeMap::new();
        }
        return schema
            .fields
            .iter()
            .map(|f| {
                let key = (
                    join_path("", &f.name),
                    ChangeKind::Addition,
                    None,
                    Some(f.data_type.to_string()),
                    true,
                );
                (key, admission.alive.clone())
            })
            .collect();
    }
    let mut changes: BTreeMap<ChangeKey, BTreeSet<usize>> = BTreeMap::new();
    for (path, inputs) in &needs.relaxations {
        changes.insert(
            (
                path.clone(),
                ChangeKind::Relaxation,
                Some("required".into()),
                Some("optional".into()),
                true,
            ),
            inputs.clone(),
        );
    }
    for (path, (from, to, inputs)) in &needs.promotions {
        changes.insert(
            (
                path.clone(),
                ChangeKind::Promotion,
                Some(from.to_string()),
                Some(to.to_string()),
                true,
            ),
            inputs.clone(),
        );
    }
    // Who adds each column, in one pass rather than a scan of every input per column.
    let mut having: HashMap<&str, BTreeSet<usize>> = HashMap::new();
    for &i in &admission.alive {
        for add in &analyses[&i].additions {
            having.entry(&add.path).or_default().insert(i);
        }
    }
    for (path, u) in &admission.unions {
        changes.insert(
            (
                path.clone(),
                ChangeKind::Addition,
                None,
                Some(u.field.data_type.to_string()),
                true,
            ),
            having.remove(path.as_str()).unwrap_or_default(),
        );
    }
    changes
}

/// Adds what the rejected inputs would have needed: changes the options refuse, conflicts
/// with the table, and the new columns whose union they lost.
fn add_refused_changes(
    changes: &mut BTreeMap<ChangeKey, BTreeSet<usize>>,
    analyses: &BTreeMap<usize, Analysis>,
    admission: &Admission,
) {
    for (&i, a) in analyses {
        if admission.alive.contains(&i) {
            continue;
        }
        let refused = a
            .refused
            .iter()
            .map(|(kind, path, from, to)| (path.clone(), *kind, from.clone(), to.clone(), false));
        let lost = admission.losses_of(i).iter().map(|loss| {
            (
                loss.path.clone(),
                ChangeKind::Conflict,
                Some(loss.chosen.clone()),
                Some(loss.theirs.clone()),
                false,
            )
        });
        for key in refused.chain(lost) {
            changes.entry(key).or_default().insert(i);
        }
    }
}

/// One verdict per input, in the caller's order (the analyses are keyed by its indexes).
fn verdicts(
    creating: bool,
    analyses: &BTreeMap<usize, Analysis>,
    admission: &Admission,
) -> Vec<InputVerdict> {
    analyses
        .iter()
        .map(|(&i, a)| {
            if admission.alive.contains(&i) {
                a.admitted_verdict(creating)
            } else {
                a.rejected_verdict(admission.losses_of(i))
            }
        })
        .collect()
}

/// A column an input has and the table lacks.
#[derive(Clone, Debug)]
struct Addition {
    /// Where the column goes in the table.
    path: String,
    /// Where it is in the input (differs when a parent was matched under another name).
    input_path: String,
    /// The input's field.
    field: Field,
}

/// What one input needs from the table, found in pass 1.
#[derive(Clone, Debug, Default)]
struct Analysis {
    additions: Vec<Addition>,
    relaxations: BTreeMap<String, String>,
    promotions: BTreeMap<String, (PrimitiveType, PrimitiveType)>,
    incompatible: Vec<Reason>,
    unverifiable: Vec<Reason>,
    /// Changes it needs that the options refuse, and conflicts: (kind, path, from, to).
    refused: Vec<(ChangeKind, String, Option<String>, Option<String>)>,
}

impl Analysis {
    /// Whether the input survives pass 1: nothing rules it out, and unverifiable findings
    /// are accepted or absent.
    fn survives(&self, config: &SchemaEvolutionConfig) -> bool {
        self.incompatible.is_empty()
            && (self.unverifiable.is_empty() || config.on_unverifiable() == UnverifiableFileHandling::Accept)
    }

    /// An admitted input fits, after evolution when it needs anything; its unverifiable
    /// findings stay visible as reasons.
    fn admitted_verdict(&self, creating: bool) -> InputVerdict {
        let mut needs = self.needs();
        if creating {
            needs.insert(
                0,
                Reason {
                    path: String::new(),
                    message: "creates the table".into(),
                },
            );
        }
        InputVerdict {
            verdict: if needs.is_empty() {
                Verdict::Fits
            } else {
                Verdict::FitsAfterEvolution
            },
            reasons: self.unverifiable.clone(),
            needs,
        }
    }

    /// A rejected input is incompatible when a finding or a lost union rules it out, and
    /// unverifiable when only missing statistics do.
    fn rejected_verdict(&self, losses: &[Loss]) -> InputVerdict {
        let mut reasons = self.incompatible.clone();
        reasons.extend(losses.iter().map(|loss| Reason {
            path: loss.path.clone(),
            message: loss.message.clone(),
        }));
        let verdict = if reasons.is_empty() {
            Verdict::Unverifiable
        } else {
            Verdict::Incompatible
        };
        reasons.extend(self.unverifiable.iter().cloned());
        InputVerdict {
            verdict,
            reasons,
            needs: Vec::new(),
        }
    }

    /// What an admitted input needs of the table: additions, relaxations, promotions.
    fn needs(&self) -> Vec<Reason> {
        let mut needs = Vec::new();
        for add in &self.additions {
            needs.push(Reason {
                path: add.path.clone(),
                message: format!("adds column ({})", add.field.data_type),
            });
        }
        for (path, why) in &self.relaxations {
            needs.push(Reason {
                path: path.clone(),
                message: format!("makes the column optional: {why}"),
            });
        }
        for (path, (from, to)) in &self.promotions {
            needs.push(Reason {
                path: path.clone(),
                message: format!("widens {from} to {to}"),
            });
        }
        needs
    }
}

/// What an input proves about nulls in one column.
enum Evidence {
    NoNulls,
    /// Nulls, counted when a footer says how many.
    Nulls(Option<u64>),
    Unknown,
}

fn evidence(input: &InputSchema, input_path: &str, field: &Field, under_container: bool) -> Evidence {
    if under_container {
        // Null counts of repeated leaves mix levels; the declaration is all we can trust.
        return if field.required {
            Evidence::NoNulls
        } else {
            Evidence::Nulls(None)
        };
    }
    match input.null_count(input_path) {
        NullCount::Known(0) => Evidence::NoNulls,
        NullCount::Known(n) => Evidence::Nulls(Some(n)),
        // A required declaration is structural proof: the format cannot store a null there.
        NullCount::Unknown if field.required => Evidence::NoNulls,
        NullCount::Unknown => Evidence::Unknown,
    }
}

fn describe_nulls(count: Option<u64>) -> String {
    match count {
        Some(n) => format!("the input holds {n} null{} in it", if n == 1 { "" } else { "s" }),
        None => "the input declares it optional under a list or map".to_string(),
    }
}

/// Pass 1 for one input.
struct Compare<'c> {
    config: &'c SchemaEvolutionConfig,
    input: &'c InputSchema,
    out: Analysis,
    use_ids: bool,
}

impl Compare<'_> {
    fn level(
        &mut self,
        table_fields: &[Field],
        mapping: &[MappedField],
        input_fields: &[Field],
        table_prefix: &str,
        input_prefix: &str,
        under: bool,
    ) {
        let table_keys: Vec<ColumnKey> = table_fields.iter().map(ColumnKey::from).collect();
        let input_keys: Vec<ColumnKey> = input_fields.iter().map(ColumnKey::from).collect();
        let found = match_level(self.use_ids, &table_keys, mapping, &input_keys);
        for &(t, first, later) in &found.duplicates {
            let path = join_path(table_prefix, &table_fields[t].name);
            self.incompatible(
                &path,
                format!(
                    "input columns {} and {} both resolve to this column",
                    quote_name(&input_fields[first].name),
                    quote_name(&input_fields[later].name)
                ),
            );
        }
        for &i in &found.unmatched {
            let field = &input_fields[i];
            self.out.additions.push(Addition {
                path: join_path(table_prefix, &field.name),
                input_path: join_path(input_prefix, &field.name),
                field: field.clone(),
            });
        }
        for (table_field, input) in table_fields.iter().zip(found.table_to_input) {
            let path = join_path(table_prefix, &table_field.name);
            let children = table_field
                .id
                .map(|id| NameMapping::children(mapping, id))
                .unwrap_or(&[]);
            match input.map(|i| &input_fields[i]) {
                None => self.missing(table_field, &path),
                Some(input_field) => {
                    let input_path = join_path(input_prefix, &input_field.name);
                    self.field(table_field, input_field, children, &path, &input_path, under);
                }
            }
        }
    }

    fn missing(&mut self, table_field: &Field, path: &str) {
        let pinned: Vec<String> = self
            .config
            .required_columns_under(path)
            .map(str::to_string)
            .collect();
        if !pinned.is_empty() {
            // A pinned column is missing when it is, and when a struct above it is.
            for pinned in pinned {
                self.incompatible(&pinned, "the input lacks this required (pinned) column".into());
            }
        } else if table_field.required {
            self.need_relaxation(
                path,
                "the input lacks the column, so its rows would read null".into(),
            );
        }
    }

    fn field(
        &mut self,
        table_field: &Field,
        input_field: &Field,
        mapping: &[MappedField],
        path: &str,
        input_path: &str,
        under: bool,
    ) {
        self.nullability(table_field, input_field, path, input_path, under);
        match (&table_field.data_type, &input_field.data_type) {
            (DataType::Primitive(table), DataType::Primitive(input)) => {
                if input.widens_to(*table) {
                    // Same type, or narrower: readable as the table's type.
                } else if table.widens_to(*input) {
                    self.need_promotion(path, *table, *input);
                } else {
                    self.conflict(path, table.to_string(), input.to_string());
                }
            }
            (DataType::Struct { fields: table }, DataType::Struct { fields: input }) => {
                self.level(table, mapping, input, path, input_path, under);
            }
            (DataType::List { list: table }, DataType::List { list: input }) => {
                let children = table
                    .id
                    .map(|id| NameMapping::children(mapping, id))
                    .unwrap_or(&[]);
                self.field(
                    table,
                    input,
                    children,
                    &join_path(path, LIST_ELEMENT),
                    &join_path(input_path, LIST_ELEMENT),
                    true,
                );
            }
            (DataType::Map { map: table }, DataType::Map { map: input }) => {
                // A map key is never null, in Iceberg and in Arrow: an input declaring
                // optional keys cannot be written, and no table key is ever relaxed.
                let mut key = input.key.clone();
                if !key.required {
                    self.incompatible(
                        &join_path(path, MAP_KEY),
                        "the input declares the map's keys optional; map keys cannot be null".into(),
                    );
                    key.required = true;
                }
                for (t, i, segment) in [
                    (&table.key, &key, MAP_KEY),
                    (&table.value, &input.value, MAP_VALUE),
                ] {
                    let children = t.id.map(|id| NameMapping::children(mapping, id)).unwrap_or(&[]);
                    self.field(
                        t,
                        i,
                        children,
                        &join_path(path, segment),
                        &join_path(input_path, segment),
                        true,
                    );
                }
            }
            (table, input) => self.conflict(path, table.to_string(), input.to_string()),
        }
    }

    fn nullability(
        &mut self,
        table_field: &Field,
        input_field: &Field,
        path: &str,
        input_path: &str,
        under: bool,
    ) {
        let pinned = self.config.is_required_column(path);
        if !pinned && !table_field.required {
            return;
        }
        match evidence(self.input, input_path, input_field, under) {
            Evidence::NoNulls => {}
            Evidence::Nulls(count) if pinned => {
                self.incompatible(
                    path,
                    format!("required (pinned) column, but {}", describe_nulls(count)),
                );
            }
            Evidence::Nulls(count) => self.need_relaxation(path, describe_nulls(count)),
            Evidence::Unknown => self.unproven(path, pinned),
        }
    }

    /// A required or pinned column without null statistics.
    fn unproven(&mut self, path: &str, pinned: bool) {
        if !pinned && self.config.allows(SchemaEvolutionOption::AllowFieldRelaxation) {
            self.out
                .relaxations
                .insert(path.to_string(), "the input carries no null count for it".into());
            return;
        }
        let what = if pinned {
            "required (pinned) column"
        } else {
            "required column"
        };
        self.out.unverifiable.push(Reason {
            path: path.to_string(),
            message: format!("{what}, and the input carries no null count proving it free of nulls"),
        });
    }

    /// Checks a pinned column the table does not have yet.
    fn new_pinned(&mut self, path: &str) {
        let wanted = path_names(path);
        // The input's path of the pinned column: the addition above it, then the rest.
        let found = self.out.additions.iter().find_map(|add| {
            let rest = wanted.strip_prefix(path_names(&add.path).as_slice())?;
            let mut names = path_names(&add.input_path);
            names.extend(rest.iter().cloned());
            Some(names)
        });
        let located = found.and_then(|names| {
            field_at_tracking_containers(&self.input.schema, &names)
                .map(|(f, under)| (crate::schema::path_of(&names), f.clone(), under))
        });
        match located {
            None => self.incompatible(path, "the input lacks this required (pinned) column".into()),
            Some((input_path, field, under)) => match evidence(self.input, &input_path, &field, under) {
                Evidence::NoNulls => {}
                Evidence::Nulls(count) => {
                    self.incompatible(
                        path,
                        format!("required (pinned) column, but {}", describe_nulls(count)),
                    );
                }
                Evidence::Unknown => self.unproven(path, true),
            },
        }
    }

    /// Without field addition, each column the table lacks rules the input out.
    fn refuse_additions(&mut self) {
        for add in &self.out.additions {
            self.out.incompatible.push(Reason {
                path: add.path.clone(),
                message: "the table has no such column and field addition is not allowed".into(),
            });
            self.out.refused.push((
                ChangeKind::Addition,
                add.path.clone(),
                None,
                Some(add.field.data_type.to_string()),
            ));
        }
    }

    fn need_relaxation(&mut self, path: &str, why: String) {
        if self.config.allows(SchemaEvolutionOption::AllowFieldRelaxation) {
            self.out.relaxations.insert(path.to_string(), why);
        } else {
            self.incompatible(
                path,
                format!("required in the table, but {why}; field relaxation is not allowed"),
            );
            self.out.refused.push((
                ChangeKind::Relaxation,
                path.to_string(),
                Some("required".into()),
                Some("optional".into()),
            ));
        }
    }

    fn need_promotion(&mut self, path: &str, from: PrimitiveType, to: PrimitiveType) {
        if self.config.allows(SchemaEvolutionOption::AllowTypePromotion) {
            self.out.promotions.insert(path.to_string(), (from, to));
        } else {
            self.incompatible(
                path,
                format!("the table has {from}, the input the wider {to}; type promotion is not allowed"),
            );
            self.out.refused.push((
                ChangeKind::Promotion,
                path.to_string(),
                Some(from.to_string()),
                Some(to.to_string()),
            ));
        }
    }

    fn conflict(&mut self, path: &str, table: String, input: String) {
        self.incompatible(
            path,
            format!("the table has {table}, the input {input}; no option allows that change"),
        );
        self.out
            .refused
            .push((ChangeKind::Conflict, path.to_string(), Some(table), Some(input)));
    }

    fn incompatible(&mut self, path: &str, message: String) {
        self.out.incompatible.push(Reason {
            path: path.to_string(),
            message,
        });
    }
}

/// The field at the path of `names` in `schema`, and whether a list or map lies above it.
fn field_at_tracking_containers<'s>(schema: &'s Schema, names: &[String]) -> Option<(&'s Field, bool)> {
    let (first, rest) = names.split_first()?;
    let mut field = schema.field(first)?;
    let mut under = false;
    for name in rest {
        under |= field.data_type.is_container();
        field = field.data_type.children().into_iter().find(|c| &c.name == name)?;
    }
    Some((field, under))
}

/// Why an input lost the union of a new column.
#[derive(Clone, Debug)]
struct Loss {
    path: String,
    message: String,
    chosen: String,
    theirs: String,
}

/// The union of one new column over the inputs that have it.
#[derive(Clone, Debug)]
struct Union {
    field: Field,
    losers: BTreeMap<usize, Loss>,
}

fn kind_rank(t: &DataType) -> u8 {
    match t {
        DataType::Struct { .. } => 0,
        DataType::List { .. } => 1,
        DataType::Map { .. } => 2,
        DataType::Primitive(_) => 3,
    }
}

/// Unions a new column: the kind most inputs have (ties: struct, list, map, primitive),
/// then the type most inputs can be read as (for a widening chain, the widest), optional at
/// every level except map keys and, when the table is created, pinned columns.
fn union_field(
    path: &str,
    name: &str,
    candidates: &[(usize, &Field)],
    config: &SchemaEvolutionConfig,
    creating: bool,
) -> Union {
    let mut union = ColumnUnion {
        config,
        creating,
        losers: BTreeMap::new(),
    };
    let field = union.field(path, name, candidates);
    Union {
        field,
        losers: union.losers,
    }
}

/// One new column's union under way: what decides required columns, and the losers so far.
struct ColumnUnion<'c> {
    config: &'c SchemaEvolutionConfig,
    creating: bool,
    losers: BTreeMap<usize, Loss>,
}

impl ColumnUnion<'_> {
    /// The union of the candidates' fields at `path`, into structs, lists and maps.
    fn field(&mut self, path: &str, name: &str, candidates: &[(usize, &Field)]) -> Field {
        let winners = self.most_common_kind(path, candidates);
        let data_type = match &winners[0].1.data_type {
            DataType::Primitive(_) => DataType::Primitive(self.most_readable_type(path, &winners)),
            DataType::Struct { .. } => self.structure(path, &winners),
            DataType::List { .. } => DataType::List {
                list: Box::new(self.child(path, LIST_ELEMENT, &nth_children(&winners, 0))),
            },
            DataType::Map { .. } => self.map(path, &winners),
        };
        Field {
            id: None,
            name: name.to_string(),
            required: self.creating && self.config.is_required_column(path),
            data_type,
            doc: None,
        }
    }

    /// The candidates of the kind most of them have (ties: struct, list, map, primitive);
    /// the others lose.
    fn most_common_kind<'f>(
        &mut self,
        path: &str,
        candidates: &[(usize, &'f Field)],
    ) -> Vec<(usize, &'f Field)> {
        let mut counts = [0usize; 4];
        for (_, f) in candidates {
            counts[kind_rank(&f.data_type) as usize] += 1;
        }
        let winner_rank = (0..4u8)
            .max_by_key(|&r| (counts[r as usize], std::cmp::Reverse(r)))
            .expect("four kinds");
        let winners: Vec<(usize, &Field)> = candidates
            .iter()
            .copied()
            .filter(|(_, f)| kind_rank(&f.data_type) == winner_rank)
            .collect();
        let winner_kind = winners[0].1.data_type.kind();
        for (i, f) in candidates {
            if kind_rank(&f.data_type) != winner_rank {
                self.lose(*i, || Loss {
                    path: path.to_string(),
                    message: format!(
                        "the input has a {}, but the window's other inputs make this new column a {winner_kind}",
                        f.data_type.kind()
                    ),
                    chosen: winner_kind.to_string(),
                    theirs: f.data_type.to_string(),
                });
            }
        }
        winners
    }

    /// The primitive type most candidates can be read as (ties: the greatest); the
    /// candidates that cannot be read as it lose.
    fn most_readable_type(&mut self, path: &str, winners: &[(usize, &Field)]) -> PrimitiveType {
        let types: BTreeSet<PrimitiveType> = winners
            .iter()
            .filter_map(|(_, f)| f.data_type.as_primitive())
            .collect();
        let chosen = *types
            .iter()
            .max_by_key(|c| {
                let readable = winners
                    .iter()
                    .filter(|(_, f)| f.data_type.as_primitive().is_some_and(|t| t.widens_to(**c)))
                    .count();
                (readable, **c)
            })
            .expect("at least one candidate");
        for (i, f) in winners {
            let t = f.data_type.as_primitive().expect("primitive");
            if !t.widens_to(chosen) {
                self.lose(*i, || Loss {
                    path: path.to_string(),
                    message: format!(
                        "the input has {t}, which cannot be read as {chosen}, the type the window's other inputs give this new column"
                    ),
                    chosen: chosen.to_string(),
                    theirs: t.to_string(),
                });
            }
        }
        chosen
    }

    /// A struct with every child any candidate has, in the order first seen.
    fn structure(&mut self, path: &str, winners: &[(usize, &Field)]) -> DataType {
        let mut names: Vec<&str> = Vec::new();
        for (_, f) in winners {
            if let DataType::Struct { fields } = &f.data_type {
                for c in fields {
                    if !names.contains(&c.name.as_str()) {
                        names.push(&c.name);
                    }
                }
            }
        }
        let mut fields = Vec::new();
        for child in names {
            let sub: Vec<(usize, &Field)> = winners
                .iter()
                .filter_map(|(i, f)| {
                    f.data_type
                        .children()
                        .into_iter()
                        .find(|c| c.name == child)
                        .map(|c| (*i, c))
                })
                .collect();
            fields.push(self.child(path, child, &sub));
        }
        DataType::Struct { fields }
    }

    /// A map; its key stays required, since map keys cannot be null.
    fn map(&mut self, path: &str, winners: &[(usize, &Field)]) -> DataType {
        let mut key = self.child(path, MAP_KEY, &nth_children(winners, 0));
        key.required = true;
        let value = self.child(path, MAP_VALUE, &nth_children(winners, 1));
        DataType::Map {
            map: Box::new(crate::schema::MapFields { key, value }),
        }
    }

    /// The union of the child `name` of the column at `path`.
    fn child(&mut self, path: &str, name: &str, candidates: &[(usize, &Field)]) -> Field {
        self.field(&join_path(path, name), name, candidates)
    }

    /// Records why an input loses, unless it already lost: its first loss is its reason.
    fn lose(&mut self, input: usize, loss: impl FnOnce() -> Loss) {
        self.losers.entry(input).or_insert_with(loss);
    }
}

/// The `n`th child of each candidate (a list's element, a map's key or value).
fn nth_children<'f>(winners: &[(usize, &'f Field)], n: usize) -> Vec<(usize, &'f Field)> {
    winners
        .iter()
        .map(|(i, f)| (*i, f.data_type.children()[n]))
        .collect()
}

/// The schema most inputs share (ignoring ids); ties go to the first in canonical order.
fn most_common_schema(inputs: &[InputSchema], order: &[usize]) -> Schema {
    // Per distinct schema: how many inputs have it, and where it first appears.
    let mut counts: HashMap<Schema, (usize, usize)> = HashMap::new();
    for (seen, &i) in order.iter().enumerate() {
        counts
            .entry(inputs[i].schema.without_ids())
            .or_insert((0, seen))
            .0 += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(_, (n, first))| (*n, std::cmp::Reverse(*first)))
        .map(|(s, _)| s)
        .unwrap_or_default()
}

/// The field at `path`; the planner only edits paths it found, so a miss is a bug in it.
fn field_at_mut<'s>(schema: &'s mut Schema, path: &str) -> Result<&'s mut Field> {
    let not_found = || Error::internal(format!("the planner's schema has no column {path} to change"));
    let names = path_names(path);
    let (first, rest) = names.split_first().ok_or_else(not_found)?;
    let mut field = schema
        .fields
        .iter_mut()
        .find(|f| &f.name == first)
        .ok_or_else(not_found)?;
    for name in rest {
        field = field
            .data_type
            .children_mut()
            .into_iter()
            .find(|c| &c.name == name)
            .ok_or_else(not_found)?;
    }
    Ok(field)
}

fn set_optional(schema: &mut Schema, path: &str) -> Result<()> {
    field_at_mut(schema, path)?.required = false;
    Ok(())
}

fn set_required(schema: &mut Schema, path: &str) -> Result<()> {
    field_at_mut(schema, path)?.required = true;
    Ok(())
}

fn set_type(schema: &mut Schema, path: &str, t: PrimitiveType) -> Result<()> {
    field_at_mut(schema, path)?.data_type = DataType::Primitive(t);
    Ok(())
}

fn insert_field(schema: &mut Schema, path: &str, field: Field) -> Result<()> {
    match split_last_name(path) {
        (None, _) => schema.fields.push(field),
        (Some(parent), _) => match &mut field_at_mut(schema, &parent)?.data_type {
            DataType::Struct { fields } => fields.push(field),
            other => {
                return Err(Error::internal(format!(
                    "the planner adds column {path} under {parent}, a {} rather than a struct",
                    other.kind()
                )));
            }
        },
    }
    Ok(())
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
