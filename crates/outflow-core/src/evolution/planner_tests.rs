//! The planner's rules, one named case each, and properties over random windows.

use proptest::prelude::*;

use super::*;
use crate::evolution::{IncompatibleSchemaHandling, SchemaEvolutionOption::*};
use crate::schema::{DataType, Field, InputSchema, NameMapping, PrimitiveType::*, Schema};

fn config(options: &[SchemaEvolutionOption]) -> SchemaEvolutionConfig {
    SchemaEvolutionConfig::builder()
        .allow_all(options.iter().copied())
        .build()
        .unwrap()
}

fn pinned(options: &[SchemaEvolutionOption], paths: &[&str]) -> SchemaEvolutionConfig {
    SchemaEvolutionConfig::builder()
        .allow_all(options.iter().copied())
        .required_columns(paths.iter().copied())
        .build()
        .unwrap()
}

fn table(fields: Vec<Field>) -> Schema {
    let mut s = Schema::new(fields);
    s.assign_missing_ids(0);
    s
}

fn input(fields: Vec<Field>) -> InputSchema {
    InputSchema::new(Schema::new(fields))
}

fn dec(precision: u8, scale: i8) -> PrimitiveType {
    Decimal { precision, scale }
}

fn plan(t: Option<&Schema>, c: &SchemaEvolutionConfig, inputs: &[InputSchema]) -> EvolutionPlan {
    let mut p = EvolutionPlanner::new(c);
    if let Some(t) = t {
        p = p.table(t);
    }
    p.plan(inputs).expect("the planner plans")
}

fn verdicts(p: &EvolutionPlan) -> Vec<Verdict> {
    p.verdicts.iter().map(|v| v.verdict).collect()
}

fn applied(p: &EvolutionPlan) -> Vec<(ChangeKind, &str)> {
    p.applied_changes().map(|c| (c.kind, c.path.as_str())).collect()
}

fn new_field<'p>(p: &'p EvolutionPlan, path: &str) -> &'p Field {
    p.schema
        .as_ref()
        .unwrap()
        .field_at(path)
        .unwrap_or_else(|| panic!("no {path} in {:?}", p.schema))
}

// Rule 5: outside lists and maps, statistics beat declarations.

#[test]
fn zero_null_footer_beats_declared_optional_outside_lists() {
    let t = table(vec![Field::required("id", Long)]);
    let i = input(vec![Field::optional("id", Long)]).with_null_count("id", 0);
    for c in [config(&[]), config(&[AllowFieldRelaxation])] {
        let p = plan(Some(&t), &c, std::slice::from_ref(&i));
        assert_eq!(verdicts(&p), [Verdict::Fits]);
        assert!(!p.changes_schema());
        assert!(new_field(&p, "id").required);
    }
}

#[test]
fn declared_optional_under_a_list_needs_relaxation_despite_zero_nulls() {
    let t = table(vec![Field::optional(
        "l",
        DataType::list(Field::required("element", Long)),
    )]);
    let i = input(vec![Field::optional(
        "l",
        DataType::list(Field::optional("element", Long)),
    )])
    .with_null_count("l", 0)
    .with_null_count("l.element", 0);
    let p = plan(
        Some(&t),
        &config(&[AllowFieldRelaxation]),
        std::slice::from_ref(&i),
    );
    assert_eq!(verdicts(&p), [Verdict::FitsAfterEvolution]);
    assert_eq!(applied(&p), [(ChangeKind::Relaxation, "l.element")]);
    assert!(!new_field(&p, "l.element").required);

    let p = plan(Some(&t), &config(&[AllowFieldAddition]), &[i]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert!(
        p.verdicts[0].reasons[0]
            .message
            .contains("optional under a list or map")
    );
    assert!(new_field(&p, "l.element").required);
}

#[test]
fn declared_optional_map_value_is_taken_as_is() {
    let t = table(vec![Field::optional(
        "m",
        DataType::map(Field::required("key", String), Field::required("value", Int)),
    )]);
    let i = input(vec![Field::optional(
        "m",
        DataType::map(Field::required("key", String), Field::optional("value", Int)),
    )]);
    let p = plan(Some(&t), &config(&[AllowFieldRelaxation]), &[i]);
    assert_eq!(applied(&p), [(ChangeKind::Relaxation, "m.value")]);
}

#[test]
fn nulls_in_a_required_column_relax_it_only_when_allowed() {
    let t = table(vec![Field::required("id", Long), Field::required("name", String)]);
    let i = input(vec![Field::optional("id", Long), Field::optional("name", String)])
        .with_null_count("id", 0)
        .with_null_count("name", 2);
    let p = plan(
        Some(&t),
        &config(&[AllowFieldRelaxation]),
        std::slice::from_ref(&i),
    );
    assert_eq!(verdicts(&p), [Verdict::FitsAfterEvolution]);
    assert_eq!(applied(&p), [(ChangeKind::Relaxation, "name")]);
    assert!(!new_field(&p, "name").required);
    assert!(new_field(&p, "id").required);

    let p = plan(Some(&t), &config(&[AllowTypePromotion]), &[i]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    let reason = &p.verdicts[0].reasons[0];
    assert_eq!(reason.path, "name");
    assert!(reason.message.contains("holds 2 nulls") && reason.message.contains("relaxation is not allowed"));
    assert_eq!(p.changes.len(), 1);
    assert!(!p.changes[0].applied);
    assert_eq!(p.changes[0].kind, ChangeKind::Relaxation);
}

#[test]
fn an_input_lacking_a_required_column_needs_relaxation() {
    let t = table(vec![Field::required("id", Long), Field::required("name", String)]);
    let i = input(vec![Field::required("id", Long)]);
    let p = plan(
        Some(&t),
        &config(&[AllowFieldRelaxation]),
        std::slice::from_ref(&i),
    );
    assert_eq!(applied(&p), [(ChangeKind::Relaxation, "name")]);
    let p = plan(Some(&t), &config(&[]), &[i]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert!(p.verdicts[0].reasons[0].message.contains("lacks the column"));
}

#[test]
fn missing_null_count_relaxes_when_allowed_and_is_unverifiable_otherwise() {
    let t = table(vec![Field::required("id", Long)]);
    let i = input(vec![Field::optional("id", Long)]);
    let p = plan(
        Some(&t),
        &config(&[AllowFieldRelaxation]),
        std::slice::from_ref(&i),
    );
    assert_eq!(applied(&p), [(ChangeKind::Relaxation, "id")]);
    assert!(p.verdicts[0].needs[0].message.contains("no null count"));

    let p = plan(Some(&t), &config(&[AllowFieldAddition]), std::slice::from_ref(&i));
    assert_eq!(verdicts(&p), [Verdict::Unverifiable]);
    let accept = SchemaEvolutionConfig::builder()
        .allow(AllowFieldAddition)
        .on_unverifiable(UnverifiableFileHandling::Accept)
        .build()
        .unwrap();
    let p = plan(Some(&t), &accept, &[i]);
    assert_eq!(verdicts(&p), [Verdict::Fits]);
    assert!(!p.changes_schema());
}

#[test]
fn a_required_declaration_without_statistics_proves_no_nulls() {
    let t = table(vec![Field::required("id", Long)]);
    let p = plan(
        Some(&t),
        &config(&[]),
        &[input(vec![Field::required("id", Long)])],
    );
    assert_eq!(verdicts(&p), [Verdict::Fits]);
}

// Rule 7: pinned columns.

#[test]
fn pinned_column_with_nulls_is_incompatible_whatever_the_options() {
    let t = table(vec![Field::required("id", Long)]);
    let i = input(vec![Field::optional("id", Long)]).with_null_count("id", 3);
    let c = pinned(
        &[AllowFieldAddition, AllowFieldRelaxation, AllowTypePromotion],
        &["id"],
    );
    let p = plan(Some(&t), &c, &[i]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert!(p.verdicts[0].reasons[0].message.contains("pinned"));
    assert!(new_field(&p, "id").required);
    assert!(!p.changes_schema());
}

#[test]
fn pinned_column_without_statistics_is_unverifiable() {
    let t = table(vec![Field::required("id", Long)]);
    let i = input(vec![Field::optional("id", Long)]);
    let c = pinned(&[AllowFieldRelaxation], &["id"]);
    let p = plan(Some(&t), &c, std::slice::from_ref(&i));
    assert_eq!(verdicts(&p), [Verdict::Unverifiable]);
    assert_eq!(p.verdicts[0].reasons[0].path, "id");
    assert!(!p.changes_schema());

    let accept = SchemaEvolutionConfig::builder()
        .allow(AllowFieldRelaxation)
        .required_column("id")
        .on_unverifiable(UnverifiableFileHandling::Accept)
        .build()
        .unwrap();
    let p = plan(Some(&t), &accept, &[i]);
    assert_eq!(verdicts(&p), [Verdict::Fits]);
    assert!(new_field(&p, "id").required);
}

#[test]
fn an_input_lacking_a_pinned_column_is_incompatible() {
    let t = table(vec![Field::required("id", Long), Field::optional("x", Int)]);
    let c = pinned(&[AllowFieldRelaxation], &["id"]);
    let p = plan(Some(&t), &c, &[input(vec![Field::optional("x", Int)])]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert!(p.verdicts[0].reasons[0].message.contains("lacks this required"));
}

#[test]
fn pinned_path_through_a_list_takes_the_declaration() {
    let element = |required| {
        Field::optional(
            "addresses",
            DataType::list(Field::required(
                "element",
                DataType::structure(vec![if required {
                    Field::required("city", String)
                } else {
                    Field::optional("city", String)
                }]),
            )),
        )
    };
    let t = table(vec![element(true)]);
    let c = pinned(&[AllowFieldRelaxation], &["addresses.element.city"]);
    let p = plan(
        Some(&t),
        &c,
        &[input(vec![element(true)]), input(vec![element(false)])],
    );
    assert_eq!(verdicts(&p), [Verdict::Fits, Verdict::Incompatible]);
    assert_eq!(p.verdicts[1].reasons[0].path, "addresses.element.city");
}

// Rules 3 and 4: additions and the union of a window.

#[test]
fn two_inputs_disagreeing_on_a_new_column_get_the_widest() {
    let t = table(vec![Field::required("id", Long)]);
    let a = input(vec![Field::required("id", Long), Field::required("n", Int)]);
    let b = input(vec![Field::required("id", Long), Field::required("n", Long)]);
    let p = plan(Some(&t), &config(&[AllowFieldAddition]), &[a, b]);
    assert_eq!(verdicts(&p), [Verdict::FitsAfterEvolution; 2]);
    let n = new_field(&p, "n");
    assert_eq!(
        (n.data_type.clone(), n.required, n.id),
        (Long.into(), false, Some(2))
    );
    assert_eq!(applied(&p), [(ChangeKind::Addition, "n")]);
    assert_eq!(p.changes[0].inputs, [0, 1]);
}

#[test]
fn an_input_whose_new_column_cannot_widen_is_incompatible_not_the_window() {
    let t = table(vec![Field::required("id", Long)]);
    let with = |ty: PrimitiveType| input(vec![Field::required("id", Long), Field::optional("n", ty)]);
    let p = plan(
        Some(&t),
        &config(&[AllowFieldAddition]),
        &[with(Int), with(String), with(Long)],
    );
    assert_eq!(
        verdicts(&p),
        [
            Verdict::FitsAfterEvolution,
            Verdict::Incompatible,
            Verdict::FitsAfterEvolution
        ]
    );
    assert_eq!(new_field(&p, "n").data_type, Long.into());
    let reason = &p.verdicts[1].reasons[0];
    assert_eq!(reason.path, "n");
    assert!(
        reason.message.contains("string") && reason.message.contains("long"),
        "{reason}"
    );
    let conflict = p.changes.iter().find(|c| c.kind == ChangeKind::Conflict).unwrap();
    assert_eq!(
        (conflict.inputs.as_slice(), conflict.applied),
        (&[1usize][..], false)
    );
}

#[test]
fn additions_are_optional_at_every_nesting_level() {
    let t = table(vec![
        Field::required("s", DataType::structure(vec![Field::required("a", Int)])),
        Field::optional(
            "l",
            DataType::list(Field::required(
                "element",
                DataType::structure(vec![Field::required("x", Int)]),
            )),
        ),
        Field::optional(
            "m",
            DataType::map(
                Field::required("key", String),
                Field::optional("value", DataType::structure(vec![Field::optional("y", Int)])),
            ),
        ),
    ]);
    let i = input(vec![
        Field::required(
            "s",
            DataType::structure(vec![
                Field::required("a", Int),
                Field::required("b", DataType::structure(vec![Field::required("c", Long)])),
            ]),
        ),
        Field::optional(
            "l",
            DataType::list(Field::required(
                "element",
                DataType::structure(vec![Field::required("x", Int), Field::required("z", String)]),
            )),
        ),
        Field::optional(
            "m",
            DataType::map(
                Field::required("key", String),
                Field::optional(
                    "value",
                    DataType::structure(vec![Field::optional("y", Int), Field::required("w", Double)]),
                ),
            ),
        ),
        Field::required("top", DataType::list(Field::required("element", Int))),
    ])
    .with_null_count("s", 0)
    .with_null_count("s.a", 0);
    let p = plan(Some(&t), &config(&[AllowFieldAddition]), &[i]);
    assert_eq!(verdicts(&p), [Verdict::FitsAfterEvolution]);
    assert_eq!(
        applied(&p),
        [
            (ChangeKind::Addition, "l.element.z"),
            (ChangeKind::Addition, "m.value.w"),
            (ChangeKind::Addition, "s.b"),
            (ChangeKind::Addition, "top"),
        ]
    );
    for path in ["s.b", "s.b.c", "l.element.z", "m.value.w", "top", "top.element"] {
        assert!(!new_field(&p, path).required, "{path} should be optional");
    }
    // Existing columns keep their ids; new ones continue from the table's highest.
    assert_eq!(new_field(&p, "s.a").id, t.field_at("s.a").unwrap().id);
    let max = t.max_field_id();
    assert!(new_field(&p, "s.b").id.unwrap() > max);
    assert!(new_field(&p, "top.element").id.unwrap() > max);
}

#[test]
fn field_addition_not_allowed_makes_the_input_incompatible() {
    let t = table(vec![Field::required("id", Long)]);
    let i = input(vec![Field::required("id", Long), Field::optional("extra", Int)]);
    let p = plan(Some(&t), &config(&[AllowFieldRelaxation]), &[i]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert_eq!(p.verdicts[0].reasons[0].path, "extra");
    assert!(!p.changes[0].applied);
}

#[test]
fn table_creation_from_the_union_keeps_pinned_columns_required() {
    let c = pinned(&[AllowFieldAddition], &["id"]);
    let a = input(vec![Field::optional("id", Long), Field::required("a", Int)]).with_null_count("id", 0);
    let b = input(vec![Field::required("id", Int), Field::optional("b", String)]);
    let p = plan(None, &c, &[a, b]);
    assert!(p.creates_table);
    assert_eq!(verdicts(&p), [Verdict::FitsAfterEvolution; 2]);
    let s = p.schema.as_ref().unwrap();
    assert_eq!(
        s.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        ["id", "a", "b"]
    );
    assert_eq!(s.field("id").unwrap().data_type, Long.into());
    assert!(s.field("id").unwrap().required);
    assert!(!s.field("a").unwrap().required && !s.field("b").unwrap().required);
    assert_eq!(
        s.fields.iter().map(|f| f.id.unwrap()).collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

#[test]
fn a_pinned_column_new_to_an_existing_table_is_added_optional() {
    let t = table(vec![Field::required("id", Long)]);
    let c = pinned(&[AllowFieldAddition], &["key"]);
    let p = plan(
        Some(&t),
        &c,
        &[input(vec![
            Field::required("id", Long),
            Field::required("key", String),
        ])],
    );
    assert_eq!(verdicts(&p), [Verdict::FitsAfterEvolution]);
    assert!(!new_field(&p, "key").required);
}

#[test]
fn creation_without_field_addition_uses_the_common_schema() {
    let s1 = vec![Field::required("id", Long), Field::optional("v", Int)];
    let p = plan(
        None,
        &config(&[]),
        &[
            input(s1.clone()),
            input(vec![Field::required("id", Long)]),
            input(s1),
        ],
    );
    assert!(p.creates_table);
    assert_eq!(verdicts(&p), [Verdict::FitsAfterEvolution; 3]);
    let s = p.schema.as_ref().unwrap();
    assert!(s.field("id").unwrap().required);
    assert_eq!(s.field("id").unwrap().id, Some(1));
    assert!(!s.field("v").unwrap().required);
}

// Rule 6: promotion.

#[test]
fn promotion_widens_when_allowed_and_narrower_inputs_need_nothing() {
    let t = table(vec![Field::required("n", Int), Field::optional("f", Double)]);
    let i = input(vec![Field::required("n", Long), Field::optional("f", Float)]);
    let p = plan(Some(&t), &config(&[AllowTypePromotion]), std::slice::from_ref(&i));
    assert_eq!(applied(&p), [(ChangeKind::Promotion, "n")]);
    let change = &p.changes[0];
    assert_eq!(
        (change.from.as_deref(), change.to.as_deref()),
        (Some("int"), Some("long"))
    );
    assert_eq!(new_field(&p, "n").data_type, Long.into());
    assert_eq!(new_field(&p, "n").id, t.field("n").unwrap().id);

    let p = plan(Some(&t), &config(&[AllowFieldAddition]), &[i]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert!(
        p.verdicts[0].reasons[0]
            .message
            .contains("type promotion is not allowed")
    );
}

#[test]
fn decimal_precision_promotes_at_the_same_scale() {
    let t = table(vec![Field::required("d", dec(10, 2))]);
    let p = plan(
        Some(&t),
        &config(&[AllowTypePromotion]),
        &[
            input(vec![Field::required("d", dec(12, 2))]),
            input(vec![Field::required("d", dec(14, 2))]),
        ],
    );
    assert_eq!(verdicts(&p), [Verdict::FitsAfterEvolution; 2]);
    assert_eq!(new_field(&p, "d").data_type, dec(14, 2).into());
    assert_eq!(p.changes[0].inputs, [0, 1]);
}

#[test]
fn a_decimal_scale_change_is_a_conflict() {
    let t = table(vec![Field::required("d", dec(10, 2))]);
    let all = config(&[AllowFieldAddition, AllowFieldRelaxation, AllowTypePromotion]);
    let p = plan(Some(&t), &all, &[input(vec![Field::required("d", dec(12, 3))])]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert_eq!(p.changes[0].kind, ChangeKind::Conflict);
    assert_eq!(p.changes[0].from.as_deref(), Some("decimal(10,2)"));
    assert_eq!(new_field(&p, "d").data_type, dec(10, 2).into());
}

// Rule 8: conflicts.

#[test]
fn string_against_int_and_struct_against_list_conflict() {
    let t = table(vec![
        Field::required("n", Int),
        Field::optional("s", DataType::structure(vec![Field::optional("x", Int)])),
    ]);
    let all = config(&[AllowFieldAddition, AllowFieldRelaxation, AllowTypePromotion]);
    let i = input(vec![
        Field::required("n", String),
        Field::optional("s", DataType::list(Field::optional("element", Int))),
    ]);
    let p = plan(Some(&t), &all, &[i]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    let conflicts: Vec<&str> = p
        .changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Conflict)
        .map(|c| c.path.as_str())
        .collect();
    assert_eq!(conflicts, ["n", "s"]);
    assert_eq!(p.verdicts[0].reasons.len(), 2);
}

// Rule 1: all or nothing per input.

#[test]
fn one_refused_change_keeps_the_inputs_allowed_changes_out() {
    let t = table(vec![Field::required("id", Long), Field::required("name", String)]);
    let bad = input(vec![
        Field::required("id", Long),
        Field::optional("name", String),
        Field::optional("x", Int),
    ])
    .with_null_count("name", 1);
    let p = plan(Some(&t), &config(&[AllowFieldRelaxation]), &[bad]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert!(!p.changes_schema(), "{p}");
    assert!(new_field(&p, "name").required);
}

#[test]
fn route_to_errors_and_fail_see_the_same_plan() {
    let t = table(vec![Field::required("id", Long)]);
    let inputs = [
        input(vec![Field::required("id", Long)]),
        input(vec![Field::required("id", String)]),
    ];
    let fail = config(&[AllowFieldAddition]);
    let route = SchemaEvolutionConfig::builder()
        .allow(AllowFieldAddition)
        .on_incompatible(IncompatibleSchemaHandling::RouteToErrors)
        .build()
        .unwrap();
    assert_eq!(plan(Some(&t), &fail, &inputs), plan(Some(&t), &route, &inputs));
}

// Matching.

#[test]
fn inputs_with_agreeing_ids_match_by_id_across_a_rename() {
    let t = table(vec![Field::required("id", Long), Field::optional("renamed", Int)]);
    let mapping = NameMapping::from_schema(&t).updated_with(&t);
    let mut old = t.clone();
    old.fields[1].name = "original".into();
    let mapping = NameMapping {
        fields: vec![
            mapping.fields[0].clone(),
            crate::schema::MappedField {
                names: vec!["original".into(), "renamed".into()],
                ..mapping.fields[1].clone()
            },
        ],
    };
    let c = config(&[]);
    // With ids: the rename is followed by id, nothing is added.
    let by_id = EvolutionPlanner::new(&c)
        .table(&t)
        .name_mapping(&mapping)
        .plan(&[InputSchema::new(old.clone())])
        .unwrap();
    assert_eq!(verdicts(&by_id), [Verdict::Fits]);
    // Without ids: the name mapping resolves the old name.
    let by_name = EvolutionPlanner::new(&c)
        .table(&t)
        .name_mapping(&mapping)
        .plan(&[InputSchema::new(old.without_ids())])
        .unwrap();
    assert_eq!(verdicts(&by_name), [Verdict::Fits]);
    // Without ids or mapping, the old name is a new column, refused.
    let unmapped = EvolutionPlanner::new(&c)
        .table(&t)
        .plan(&[InputSchema::new(old.without_ids())])
        .unwrap();
    assert_eq!(verdicts(&unmapped), [Verdict::Incompatible]);
}

#[test]
fn foreign_ids_that_disagree_fall_back_to_names() {
    let t = table(vec![Field::required("id", Long), Field::optional("v", Int)]);
    // A file whose writer numbered its columns the other way round.
    let foreign = InputSchema::new(Schema::new(vec![
        Field::required("id", Long).with_id(2),
        Field::optional("v", Int).with_id(1),
    ]));
    let p = plan(Some(&t), &config(&[]), &[foreign]);
    assert_eq!(verdicts(&p), [Verdict::Fits]);
}

#[test]
fn evolution_off_accepts_fitting_inputs_and_rejects_the_rest() {
    let t = table(vec![Field::required("id", Long)]);
    let p = plan(
        Some(&t),
        &SchemaEvolutionConfig::disabled(),
        &[
            input(vec![Field::required("id", Int)]),
            input(vec![Field::required("id", Long), Field::optional("x", Int)]),
        ],
    );
    assert_eq!(verdicts(&p), [Verdict::Fits, Verdict::Incompatible]);
}

#[test]
fn render_names_changes_and_inputs() {
    let t = table(vec![Field::required("id", Int)]);
    let p = plan(
        Some(&t),
        &config(&[AllowTypePromotion, AllowFieldAddition]),
        &[
            input(vec![Field::required("id", Long), Field::optional("x", String)]),
            input(vec![Field::required("id", Double)]),
        ],
    );
    let text = p.render(Some(&["a.parquet".to_string(), "b.parquet".to_string()]));
    assert!(text.contains("+ x: string\n"), "{text}");
    assert!(text.contains("^ id: int -> long\n"), "{text}");
    assert!(
        text.contains("! id: table int, input double (conflict)\n"),
        "{text}"
    );
    assert!(text.contains("  a.parquet: fits after these changes\n"), "{text}");
    assert!(text.contains("  b.parquet: incompatible\n"), "{text}");
}

// Dotted names, map keys, pinned nested columns, loud edits.

#[test]
fn creating_from_rejected_inputs_adds_nothing_and_dotted_names_stay_quoted() {
    let c = pinned(&[AllowFieldAddition], &["id"]);
    let rejected = input(vec![Field::optional("id", Long)]).with_null_count("id", 2);
    let p = plan(None, &c, &[rejected]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert!(p.schema.is_none());
    assert!(p.applied_changes().next().is_none(), "{p}");
    let created = plan(
        None,
        &config(&[]),
        &[input(vec![Field::required("user.id", Long)])],
    );
    let paths: Vec<&str> = created.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["`user.id`"]);
}

#[test]
fn a_column_with_a_dot_in_its_name_is_added_once() {
    let t = table(vec![Field::required("id", Long)]);
    let c = config(&[AllowFieldAddition, AllowFieldRelaxation]);
    let inputs = [input(vec![
        Field::required("id", Long),
        Field::optional("user.id", String),
        Field::optional("s", DataType::structure(vec![Field::optional("a.b", Int)])),
    ])];
    let first = plan(Some(&t), &c, &inputs);
    let evolved = first.schema.clone().unwrap();
    assert!(evolved.field("user.id").is_some(), "{evolved}");
    assert!(evolved.field_at("s.`a.b`").is_some(), "{evolved}");
    let paths: Vec<&str> = first.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["`user.id`", "s"]);
    // Replanning against the evolved table changes nothing.
    let second = plan(Some(&evolved), &c, &inputs);
    assert!(!second.changes_schema(), "{second}");
    assert_eq!(verdicts(&second), [Verdict::Fits]);
}

#[test]
fn a_dotted_column_is_relaxed_where_it_is() {
    let t = table(vec![
        Field::required("a", DataType::structure(vec![Field::required("b", Int)])),
        Field::required("a.b", Int),
    ]);
    let c = config(&[AllowFieldRelaxation]);
    let p = plan(
        Some(&t),
        &c,
        &[input(vec![Field::required(
            "a",
            DataType::structure(vec![Field::required("b", Int)]),
        )])],
    );
    let evolved = p.schema.unwrap();
    assert!(!evolved.field("a.b").unwrap().required, "{evolved}");
    assert!(evolved.field_at("a.b").unwrap().required, "{evolved}");
}

#[test]
fn a_pinned_column_with_a_dot_in_its_name_is_found() {
    let t = table(vec![Field::required("user.id", Long)]);
    let c = pinned(&[AllowFieldAddition], &["`user.id`"]);
    let with = input(vec![Field::required("user.id", Long)]).with_null_count("`user.id`", 0);
    assert_eq!(verdicts(&plan(Some(&t), &c, &[with])), [Verdict::Fits]);
    let without = input(vec![Field::required("other", Long)]);
    let p = plan(Some(&t), &c, &[without]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert_eq!(p.verdicts[0].reasons[0].path, "`user.id`");
}

#[test]
fn a_pinned_column_under_a_missing_struct_is_missing() {
    let t = table(vec![
        Field::required("id", Long),
        Field::optional("s", DataType::structure(vec![Field::required("x", Int)])),
    ]);
    let c = pinned(&[AllowFieldRelaxation], &["s.x"]);
    let p = plan(Some(&t), &c, &[input(vec![Field::required("id", Long)])]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert_eq!(p.verdicts[0].reasons[0].path, "s.x");
    assert!(
        p.verdicts[0].reasons[0]
            .message
            .contains("lacks this required (pinned) column")
    );
}

#[test]
fn map_keys_are_never_relaxed() {
    // Built by hand: `DataType::map` makes keys required, as every input from Arrow is.
    let map = |key_required: bool| DataType::Map {
        map: Box::new(crate::schema::MapFields {
            key: Field {
                required: key_required,
                ..Field::optional("key", String)
            },
            value: Field::optional("value", Int),
        }),
    };
    let t = table(vec![Field::optional("m", map(true))]);
    let c = config(&[AllowFieldRelaxation, AllowFieldAddition]);
    let p = plan(Some(&t), &c, &[input(vec![Field::optional("m", map(false))])]);
    assert_eq!(verdicts(&p), [Verdict::Incompatible]);
    assert_eq!(p.verdicts[0].reasons[0].path, "m.key");
    assert!(p.schema.unwrap().field_at("m.key").unwrap().required);
    assert!(p.changes.iter().all(|c| c.kind != ChangeKind::Relaxation));
}

#[test]
fn inputs_with_ids_follow_a_rename_without_a_name_mapping() {
    let t = table(vec![Field::required("id", Long), Field::optional("renamed", Int)]);
    let mut old = t.clone();
    old.fields[1].name = "original".into();
    let p = plan(
        Some(&t),
        &config(&[]),
        &[InputSchema::new(old).with_null_count("id", 0)],
    );
    assert_eq!(verdicts(&p), [Verdict::Fits]);
}

#[test]
fn schema_edits_on_a_path_that_is_not_there_are_internal_errors() {
    let mut s = table(vec![Field::required("id", Long)]);
    let err = set_optional(&mut s, "nope").unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Internal);
    assert!(err.to_string().contains("nope"), "{err}");
    let err = insert_field(&mut s, "id.x", Field::optional("x", Int)).unwrap_err();
    assert!(err.to_string().contains("id.x"), "{err}");
    // A parent with a dot in its name is found, not split.
    let mut s = table(vec![Field::optional("a.b", DataType::structure(vec![]))]);
    insert_field(&mut s, "`a.b`.c", Field::optional("c", Int)).unwrap();
    assert!(s.field_at("`a.b`.c").is_some());
}

// Properties over random windows.

/// Cases per property: `default` in the test command, more with `OUTFLOW_PROPERTY_CASES`
/// (`scripts/property.sh` runs them longer).
fn cases(default: u32) -> u32 {
    std::env::var("OUTFLOW_PROPERTY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn primitive() -> impl Strategy<Value = PrimitiveType> {
    prop_oneof![
        Just(Int),
        Just(Long),
        Just(Float),
        Just(Double),
        Just(String),
        Just(dec(10, 2)),
        Just(dec(12, 2)),
        Just(dec(10, 3)),
    ]
}

/// Top-level names: mixed case and a name with a dot in it, which must never be taken for
/// a path.
fn column_name() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("a"), Just("b"), Just("A"), Just("a.b"), Just("d")]
}

fn data_type() -> impl Strategy<Value = DataType> {
    let child = |name: &'static str| {
        (primitive(), any::<bool>()).prop_map(move |(t, r)| Field {
            required: r,
            ..Field::optional(name, t)
        })
    };
    prop_oneof![
        6 => primitive().prop_map(DataType::Primitive),
        1 => child("element").prop_map(DataType::list),
        2 => (child("x"), child("x.y"), proptest::option::of(child("y"))).prop_map(|(x, xy, y)| {
            DataType::structure([Some(x), Some(xy), y].into_iter().flatten().collect())
        }),
        1 => (child("x"), any::<bool>()).prop_map(|(x, r)| DataType::list(Field {
            required: r,
            ..Field::optional("element", DataType::structure(vec![x]))
        })),
        1 => child("value").prop_map(|v| DataType::map(Field::required("key", String), v)),
    ]
}

fn schema() -> impl Strategy<Value = Schema> {
    proptest::collection::btree_map(column_name(), (data_type(), any::<bool>()), 1..4).prop_map(|cols| {
        Schema::new(
            cols.into_iter()
                .map(|(name, (t, required))| Field {
                    required,
                    ..Field::optional(name, t)
                })
                .collect(),
        )
    })
}

/// Null counts for the columns outside lists and maps, some known and some not.
fn with_counts(schema: Schema, counts: &[Option<u64>]) -> InputSchema {
    let mut paths = Vec::new();
    schema.visit(|path, _, under| {
        if !under {
            paths.push(path.to_string());
        }
    });
    let mut input = InputSchema::new(schema);
    for (path, count) in paths.into_iter().zip(counts.iter().cycle()) {
        if let Some(n) = count {
            input = input.with_null_count(path, *n);
        }
    }
    input
}

fn counts() -> impl Strategy<Value = Vec<Option<u64>>> {
    proptest::collection::vec(prop_oneof![Just(None), Just(Some(0u64)), Just(Some(3u64))], 1..8)
}

fn input_schema() -> impl Strategy<Value = InputSchema> {
    (schema(), counts()).prop_map(|(s, counts)| with_counts(s, &counts))
}

fn any_config() -> impl Strategy<Value = SchemaEvolutionConfig> {
    (any::<[bool; 3]>(), proptest::option::of(0..3usize), any::<bool>()).prop_map(|(opts, pin, accept)| {
        let mut b = SchemaEvolutionConfig::builder();
        for (on, o) in opts
            .into_iter()
            .zip([AllowFieldAddition, AllowFieldRelaxation, AllowTypePromotion])
        {
            if on {
                b = b.allow(o);
            }
        }
        if opts.iter().any(|o| *o) {
            if let Some(pin) = pin {
                b = b.required_column(["a", "`a.b`", "b.x"][pin]);
            }
            if accept {
                b = b.on_unverifiable(UnverifiableFileHandling::Accept);
            }
        }
        b.build().unwrap()
    })
}

/// A table, its name mapping, a window of inputs and a config. When the table exists, some
/// inputs may be the table as it was before its first column was renamed (by another
/// engine, recorded in the name mapping), with the table's ids or without them.
type Window = (
    Option<Schema>,
    Option<NameMapping>,
    Vec<InputSchema>,
    SchemaEvolutionConfig,
);

fn window() -> impl Strategy<Value = Window> {
    (
        proptest::option::weighted(0.8, schema()),
        any::<bool>(),
        proptest::collection::vec((input_schema(), 0..4u8, counts()), 1..5),
        any_config(),
    )
        .prop_map(|(t, rename, inputs, c)| {
            let Some(mut before) = t else {
                return (None, None, inputs.into_iter().map(|(i, _, _)| i).collect(), c);
            };
            before.assign_missing_ids(0);
            let mut table = before.clone();
            let mut mapping = NameMapping::from_schema(&before);
            if rename {
                let new_name = format!("{}_renamed", table.fields[0].name);
                table.fields[0].name = new_name;
                mapping = mapping.updated_with(&table);
            }
            let inputs = inputs
                .into_iter()
                .map(|(input, kind, counts)| match kind {
                    // The table as written before the rename, with its ids or without.
                    0 => with_counts(before.clone(), &counts),
                    1 => with_counts(before.without_ids(), &counts),
                    _ => input,
                })
                .collect();
            (Some(table), Some(mapping), inputs, c)
        })
}

fn plan_with(
    t: Option<&Schema>,
    mapping: Option<&NameMapping>,
    c: &SchemaEvolutionConfig,
    inputs: &[InputSchema],
) -> EvolutionPlan {
    let mut p = EvolutionPlanner::new(c);
    if let Some(t) = t {
        p = p.table(t).last_column_id(t.max_field_id());
    }
    if let Some(m) = mapping {
        p = p.name_mapping(m);
    }
    p.plan(inputs).expect("the planner plans")
}

/// Why some column of `input` has no column of `table` to be written to by the matching
/// rule the writers use, or whose type it cannot be read as.
fn unwritable(
    by_id: bool,
    table: &[Field],
    mapping: &[crate::schema::MappedField],
    input: &[Field],
    prefix: &str,
) -> Option<std::string::String> {
    use crate::schema::{ColumnKey, join_path, match_level};
    fn keys(fs: &[Field]) -> Vec<ColumnKey<'_>> {
        fs.iter().map(ColumnKey::from).collect()
    }
    let found = match_level(by_id, &keys(table), mapping, &keys(input));
    if let Some(&i) = found.unmatched.first() {
        return Some(format!("{} has no column", join_path(prefix, &input[i].name)));
    }
    for (t, i) in found.table_to_input.iter().enumerate() {
        let Some(i) = i else { continue };
        let (t, i) = (&table[t], &input[*i]);
        let path = join_path(prefix, &t.name);
        let children =
            t.id.map(|id| NameMapping::children(mapping, id))
                .unwrap_or_default();
        let why = match (&t.data_type, &i.data_type) {
            (DataType::Primitive(tt), DataType::Primitive(it)) => {
                (!it.widens_to(*tt)).then(|| format!("{path}: {it} cannot be read as {tt}"))
            }
            (DataType::Struct { fields: tf }, DataType::Struct { fields: inf }) => {
                unwritable(by_id, tf, children, inf, &path)
            }
            (DataType::List { list: tl }, DataType::List { list: il }) => {
                unwritable(by_id, &[*tl.clone()], children, &[*il.clone()], &path)
            }
            (DataType::Map { map: tm }, DataType::Map { map: im }) => unwritable(
                by_id,
                &[tm.key.clone(), tm.value.clone()],
                children,
                &[im.key.clone(), im.value.clone()],
                &path,
            ),
            (tt, it) => Some(format!(
                "{path}: a {} in the table, a {} in the input",
                tt.kind(),
                it.kind()
            )),
        };
        if why.is_some() {
            return why;
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(400)))]

    #[test]
    fn every_column_of_an_admitted_input_has_a_column_to_be_written_to((t, m, inputs, c) in window()) {
        let p = plan_with(t.as_ref(), m.as_ref(), &c, &inputs);
        let Some(evolved) = &p.schema else { return Ok(()) };
        let m = m.map_or_else(|| NameMapping::from_schema(evolved), |m| m.updated_with(evolved));
        for (i, v) in p.verdicts.iter().enumerate() {
            if !v.verdict.is_compatible() {
                continue;
            }
            let by_id = crate::schema::trusts_ids(evolved, Some(&m), &inputs[i].schema);
            let why = unwritable(by_id, &evolved.fields, &m.fields, &inputs[i].schema.fields, "");
            prop_assert!(why.is_none(), "input {}: {:?}\nplan:\n{}", i, why, p);
        }
    }

    #[test]
    fn the_plan_does_not_depend_on_input_order((t, m, inputs, c) in window(), seed in any::<u64>()) {
        let original = plan_with(t.as_ref(), m.as_ref(), &c, &inputs);
        let mut perm: Vec<usize> = (0..inputs.len()).collect();
        let n = perm.len();
        let mut s = seed;
        for i in (1..n).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            perm.swap(i, (s >> 33) as usize % (i + 1));
        }
        let shuffled: Vec<InputSchema> = perm.iter().map(|&i| inputs[i].clone()).collect();
        let mut p = plan_with(t.as_ref(), m.as_ref(), &c, &shuffled);
        // Relabel the shuffled plan's indexes back to the original ones.
        let mut verdicts = vec![None; n];
        for (pos, v) in p.verdicts.drain(..).enumerate() {
            verdicts[perm[pos]] = Some(v);
        }
        p.verdicts = verdicts.into_iter().map(Option::unwrap).collect();
        for change in &mut p.changes {
            change.inputs = change.inputs.iter().map(|&pos| perm[pos]).collect();
            change.inputs.sort();
        }
        prop_assert_eq!(p, original);
    }

    #[test]
    fn replanning_after_applying_changes_nothing((t, m, inputs, c) in window()) {
        let first = plan_with(t.as_ref(), m.as_ref(), &c, &inputs);
        if let Some(evolved) = &first.schema {
            // The mapping is kept current as the sinks keep it.
            let m = m.map_or_else(|| NameMapping::from_schema(evolved), |m| m.updated_with(evolved));
            let second = plan_with(Some(evolved), Some(&m), &c, &inputs);
            prop_assert!(!second.changes_schema(), "first:\n{}\nsecond:\n{}", first, second);
            prop_assert_eq!(second.schema.as_ref(), Some(evolved));
            for (i, v) in second.verdicts.iter().enumerate() {
                if first.verdicts[i].verdict.is_compatible() {
                    prop_assert_eq!(v.verdict, Verdict::Fits, "input {}: {:?}", i, v);
                }
            }
        }
    }

    #[test]
    fn a_compatible_input_never_needs_a_forbidden_change((t, m, inputs, c) in window()) {
        let p = plan_with(t.as_ref(), m.as_ref(), &c, &inputs);
        for change in &p.changes {
            let option = match change.kind {
                ChangeKind::Addition => Some(AllowFieldAddition),
                ChangeKind::Relaxation => Some(AllowFieldRelaxation),
                ChangeKind::Promotion => Some(AllowTypePromotion),
                ChangeKind::Conflict => None,
            };
            for &i in &change.inputs {
                let compatible = p.verdicts[i].verdict.is_compatible();
                if compatible {
                    prop_assert!(change.applied, "compatible input {} in refused change {:?}", i, change);
                    let creation = p.creates_table && change.kind == ChangeKind::Addition;
                    prop_assert!(creation || option.is_some_and(|o| c.allows(o)), "{:?} not allowed", change);
                } else {
                    prop_assert!(!change.applied, "rejected input {} in applied change {:?}", i, change);
                }
            }
        }
        if let (Some(t), Some(s)) = (t.as_ref(), p.schema.as_ref())
            && !p.verdicts.iter().any(|v| v.verdict.is_compatible())
        {
            prop_assert_eq!(t, s);
        }
    }
}

#[test]
fn an_input_that_lost_only_to_rejected_inputs_is_readmitted() {
    let t = table(vec![Field::required("id", Long)]);
    let id = || Field::required("id", Long);
    let inputs = [
        input(vec![
            id(),
            Field::optional("score", String),
            Field::optional("bucket", String),
        ]),
        input(vec![id(), Field::optional("score", Double)]),
        input(vec![id(), Field::optional("score", Double)]),
        // Loses `bucket` to the first input, which itself loses `score`.
        input(vec![
            id(),
            Field::optional("score", Double),
            Field::optional("bucket", Long),
        ]),
    ];
    let p = plan(Some(&t), &config(&[AllowFieldAddition]), &inputs);
    assert_eq!(
        verdicts(&p),
        [
            Verdict::Incompatible,
            Verdict::FitsAfterEvolution,
            Verdict::FitsAfterEvolution,
            Verdict::FitsAfterEvolution
        ]
    );
    assert_eq!(new_field(&p, "bucket").data_type, Long.into());
}

// The optimized passes against the straightforward versions they replaced.

/// The planner's canonical order of a window.
fn canonical_order(inputs: &[InputSchema]) -> Vec<usize> {
    let keys: Vec<std::string::String> = inputs.iter().map(|i| serde_json::to_string(i).unwrap()).collect();
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by(|&a, &b| keys[a].cmp(&keys[b]).then(a.cmp(&b)));
    order
}

fn union_additions_by_scanning(
    planner: &EvolutionPlanner<'_>,
    order: &[usize],
    analyses: &BTreeMap<usize, Analysis>,
    alive: &BTreeSet<usize>,
    creating: bool,
) -> Vec<(std::string::String, Union)> {
    let mut by_path: Vec<(std::string::String, Vec<(usize, &Field)>)> = Vec::new();
    for &i in order {
        if !alive.contains(&i) {
            continue;
        }
        for add in &analyses[&i].additions {
            match by_path.iter_mut().find(|(p, _)| *p == add.path) {
                Some((_, candidates)) => candidates.push((i, &add.field)),
                None => by_path.push((add.path.clone(), vec![(i, &add.field)])),
            }
        }
    }
    by_path
        .into_iter()
        .map(|(path, candidates)| {
            let name = candidates[0].1.name.clone();
            let u = union_field(&path, &name, &candidates, planner.config, creating);
            (path, u)
        })
        .collect()
}

fn readmit_losers_by_retrying(
    planner: &EvolutionPlanner<'_>,
    order: &[usize],
    analyses: &BTreeMap<usize, Analysis>,
    admission: &mut Admission,
    creating: bool,
) {
    loop {
        let mut admitted = false;
        for &i in order {
            if !admission.losses.contains_key(&i) {
                continue;
            }
            let mut trial = admission.alive.clone();
            trial.insert(i);
            let with = union_additions_by_scanning(planner, order, analyses, &trial, creating);
            if with.iter().all(|(_, u)| u.losers.is_empty()) {
                admission.losses.remove(&i);
                admission.alive = trial;
                admission.unions = with;
                admitted = true;
            }
        }
        if !admitted {
            break;
        }
    }
}

fn adders_by_scanning(
    analyses: &BTreeMap<usize, Analysis>,
    admission: &Admission,
) -> Vec<(std::string::String, BTreeSet<usize>)> {
    admission
        .unions
        .iter()
        .map(|(path, _)| {
            let having = admission
                .alive
                .iter()
                .copied()
                .filter(|i| analyses[i].additions.iter().any(|a| &a.path == path))
                .collect();
            (path.clone(), having)
        })
        .collect()
}

fn most_common_schema_by_scanning(inputs: &[InputSchema], order: &[usize]) -> Schema {
    let mut counts: Vec<(Schema, usize)> = Vec::new();
    for &i in order {
        let s = inputs[i].schema.without_ids();
        match counts.iter_mut().find(|(c, _)| *c == s) {
            Some((_, n)) => *n += 1,
            None => counts.push((s, 1)),
        }
    }
    let best = counts.iter().map(|(_, n)| *n).max().unwrap_or(0);
    counts
        .into_iter()
        .find(|(_, n)| *n == best)
        .map(|(s, _)| s)
        .unwrap_or_default()
}

/// Windows large enough for unions with several losers and readmissions; few inputs
/// share a schema, so most_common_schema also sees ties.
fn wide_window() -> impl Strategy<Value = (Option<Schema>, Vec<InputSchema>, SchemaEvolutionConfig)> {
    (
        proptest::option::weighted(0.8, schema()),
        proptest::collection::vec(input_schema(), 1..24),
        any_config(),
    )
        .prop_map(|(t, inputs, c)| {
            let t = t.map(|mut t| {
                t.assign_missing_ids(0);
                t
            });
            (t, inputs, c)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_optimized_passes_decide_as_the_straightforward_ones((t, inputs, c) in wide_window()) {
        let planner = EvolutionPlanner::new(&c);
        let creating = t.is_none();
        let table = t.unwrap_or_default();
        let order = canonical_order(&inputs);
        let analyses = planner.compare_inputs(&table, &inputs, &order);
        let survivors: BTreeSet<usize> = order.iter().copied().filter(|i| analyses[i].survives(&c)).collect();
        let mut fast = planner.reject_union_losers(&order, &analyses, survivors.clone(), creating);
        let mut slow = planner.reject_union_losers(&order, &analyses, survivors, creating);
        prop_assert_eq!(
            format!("{:?}", fast.unions),
            format!("{:?}", union_additions_by_scanning(&planner, &order, &analyses, &fast.alive, creating))
        );
        planner.readmit_losers(&order, &analyses, &mut fast, creating);
        readmit_losers_by_retrying(&planner, &order, &analyses, &mut slow, creating);
        prop_assert_eq!(&fast.alive, &slow.alive);
        prop_assert_eq!(format!("{:?}", fast.unions), format!("{:?}", slow.unions));
        prop_assert_eq!(format!("{:?}", fast.losses), format!("{:?}", slow.losses));

        let needs = ColumnNeeds::gather(&analyses, &fast.alive);
        let schema = planner.evolve_schema(&table, creating, &needs, &fast.unions).unwrap();
        if !creating {
            let changes = applied_changes(false, &schema, &needs, &analyses, &fast);
            for (path, having) in adders_by_scanning(&analyses, &slow) {
                let added: Vec<&BTreeSet<usize>> = changes
                    .iter()
                    .filter(|(k, _)| k.0 == path && k.1 == ChangeKind::Addition)
                    .map(|(_, inputs)| inputs)
                    .collect();
                prop_assert_eq!(added, vec![&having], "{}", path);
            }
        }
        prop_assert_eq!(most_common_schema(&inputs, &order), most_common_schema_by_scanning(&inputs, &order));
    }
}
