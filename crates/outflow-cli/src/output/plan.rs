//! Plans for people: `outflow plan`, both `ensure-table` commands and `outflow iceberg
//! add-files` print each destination's action and its schema changes with core's one
//! renderer ([`outflow_core::evolution::ChangeTree`]), coloured here.
//!
//! Marks and colours: `+` added (green), `~` relaxed to optional (yellow), `^` promoted to
//! a wider type (cyan), `!` conflict (red), `x` a change the evolution options do not allow
//! (red). Without colour the marks carry the meaning alone.

use outflow_core::evolution::Tone;
use outflow_core::{DestinationPlan, PlannedAction};

use super::{Paint, Style};

/// When a plan is shown: before a run (`plan`, a dry run), or after its changes were made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// What would be done: `create`, `update`, `unchanged`, `fail`.
    Planned,
    /// A dry run of a command that makes changes: the plan, saying nothing was changed.
    DryRun,
    /// What was done: `created`, `updated`, `unchanged`, `fail: nothing changed`.
    Done,
}

/// One destination's plan, as text ending in a newline.
pub fn render_plan(plan: &DestinationPlan, style: Style) -> String {
    render_outcome(plan, Outcome::Planned, style)
}

/// One destination's plan as `outcome` words it, as text ending in a newline.
pub fn render_outcome(plan: &DestinationPlan, outcome: Outcome, style: Style) -> String {
    let done = outcome == Outcome::Done;
    let action = match plan.action {
        PlannedAction::Create => style.paint(Paint::Green, if done { "created" } else { "create" }),
        PlannedAction::Update => style.paint(Paint::Yellow, if done { "updated" } else { "update" }),
        PlannedAction::Unchanged => "unchanged".to_string(),
        PlannedAction::Fail => style.paint(Paint::Red, if done { "fail: nothing changed" } else { "fail" }),
    };
    let note = if outcome == Outcome::DryRun {
        style.paint(Paint::Dim, " (dry run: nothing changed)")
    } else {
        String::new()
    };
    let mut out = format!(
        "{}: {action}{note}\n",
        style.paint(Paint::Bold, &plan.destination)
    );
    if let Some(evolution) = &plan.evolution {
        out.push_str(&evolution.render_with(None, &painter(style)));
    }
    for detail in &plan.details {
        out.push_str(&format!("  - {detail}\n"));
    }
    if let Some(error) = &plan.error {
        out.push_str(&format!("  {} {error}\n", style.paint(Paint::Red, "error:")));
    }
    out
}

/// The colours of core's tones.
pub fn painter(style: Style) -> impl Fn(Tone, &str) -> String {
    move |tone, text| match tone {
        Tone::Added => style.paint(Paint::Green, text),
        Tone::Relaxed => style.paint(Paint::Yellow, text),
        Tone::Promoted => style.paint(Paint::Cyan, text),
        Tone::Refused => style.paint(Paint::Red, text),
        Tone::Faint => style.paint(Paint::Dim, text),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use outflow_core::EvolutionPlan;
    use outflow_core::evolution::{EvolutionPlanner, SchemaEvolutionConfig, SchemaEvolutionOption::*};
    use outflow_core::schema::{Field, InputSchema, PrimitiveType, Schema};

    use super::*;

    /// A real plan: `id` promoted, `name` relaxed, `email` added.
    fn evolving() -> DestinationPlan {
        let mut table = Schema::new(vec![
            Field::required("id", PrimitiveType::Int),
            Field::required("name", PrimitiveType::String),
        ]);
        table.assign_missing_ids(0);
        let input = InputSchema::new(Schema::new(vec![
            Field::required("id", PrimitiveType::Long),
            Field::optional("name", PrimitiveType::String),
            Field::optional("email", PrimitiveType::String),
        ]));
        let config = SchemaEvolutionConfig::builder()
            .allow(AllowFieldAddition)
            .allow(AllowFieldRelaxation)
            .allow(AllowTypePromotion)
            .build()
            .unwrap();
        let plan = EvolutionPlanner::new(&config)
            .table(&table)
            .plan(&[input])
            .unwrap();
        DestinationPlan::new("db.events", PlannedAction::Update).with_evolution(plan)
    }

    #[test]
    fn a_plan_is_its_heading_then_cores_tree() {
        let plan = evolving();
        let text = render_plan(&plan, Style::plain());
        let tree = plan.evolution.as_ref().unwrap().render(None);
        assert_eq!(text, format!("db.events: update\n{tree}"));
        assert!(tree.contains("+ email: string\n"), "{tree}");
        assert_eq!(
            render_outcome(&plan, Outcome::DryRun, Style::plain())
                .lines()
                .next(),
            Some("db.events: update (dry run: nothing changed)")
        );
        assert_eq!(
            render_outcome(&plan, Outcome::Done, Style::plain())
                .lines()
                .next(),
            Some("db.events: updated")
        );
    }

    #[test]
    fn colours_follow_the_kind_of_change() {
        let text = render_plan(&evolving(), Style::colored());
        assert!(text.contains("\x1b[32m+ email: string\x1b[0m"), "{text}");
        assert!(
            text.contains("\x1b[33m~ name: required -> optional\x1b[0m"),
            "{text}"
        );
        assert!(text.contains("\x1b[36m^ id: int -> long\x1b[0m"), "{text}");
        assert!(text.contains("\x1b[33mupdate\x1b[0m"), "{text}");
    }

    #[test]
    fn a_creation_lists_the_new_columns_then_details_and_errors() {
        let input = InputSchema::new(Schema::new(vec![
            Field::optional("name", PrimitiveType::String),
            Field::required("id", PrimitiveType::Long),
        ]));
        let config = SchemaEvolutionConfig::default();
        let evolution: EvolutionPlan = EvolutionPlanner::new(&config).plan(&[input]).unwrap();
        let plan = DestinationPlan::new("db.new", PlannedAction::Create)
            .with_evolution(evolution)
            .with_detail("partitioned by day(ts)");
        let text = render_plan(&plan, Style::plain());
        assert!(
            text.starts_with("db.new: create\n  ├── + name: string\n  └── + id: long not null\n"),
            "{text}"
        );
        assert!(text.ends_with("\n  - partitioned by day(ts)\n"), "{text}");
        let failed = DestinationPlan {
            error: Some("table db.x does not exist".into()),
            ..DestinationPlan::new("db.x", PlannedAction::Fail)
        };
        assert_eq!(
            render_plan(&failed, Style::plain()),
            "db.x: fail\n  error: table db.x does not exist\n"
        );
    }
}
