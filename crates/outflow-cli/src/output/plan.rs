//! `outflow plan` for people: each destination's action, and its schema changes as a tree
//! grouped by column path, so a reviewer sees at a glance what a run would change.
//!
//! Marks and colours: `+` added (green), `~` relaxed to optional (yellow), `^` promoted to
//! a wider type (cyan), `!` conflict (red), `x` a change the evolution options do not allow
//! (red). Without colour the marks carry the meaning alone.

use outflow_core::evolution::{ChangeKind, SchemaChange, Verdict};
use outflow_core::schema::{quote_name, split_path};
use outflow_core::{DestinationPlan, EvolutionPlan, PlannedAction};

use super::{Paint, Style};

/// One destination's plan, as text ending in a newline.
pub fn render_plan(plan: &DestinationPlan, style: Style) -> String {
    let action = match plan.action {
        PlannedAction::Create => style.paint(Paint::Green, "create"),
        PlannedAction::Update => style.paint(Paint::Yellow, "update"),
        PlannedAction::Unchanged => "unchanged".to_string(),
        PlannedAction::Fail => style.paint(Paint::Red, "fail"),
    };
    let mut out = format!("{}: {action}\n", style.paint(Paint::Bold, &plan.destination));
    if let Some(evolution) = &plan.evolution {
        render_evolution(evolution, style, &mut out);
    }
    for detail in &plan.details {
        out.push_str(&format!("  - {detail}\n"));
    }
    if let Some(error) = &plan.error {
        out.push_str(&format!("  {} {error}\n", style.paint(Paint::Red, "error:")));
    }
    out
}

fn render_evolution(plan: &EvolutionPlan, style: Style, out: &mut String) {
    let mut tree = Node::default();
    let mut changes: Vec<&SchemaChange> = plan.changes.iter().collect();
    if plan.creates_table
        && let Some(schema) = &plan.schema
    {
        // A new table is shown as its columns, in table order; the planner's additions
        // (sorted by path) would only repeat them.
        for field in &schema.fields {
            let required = if field.required { " not null" } else { "" };
            let name = quote_name(&field.name);
            tree.child(&name)
                .labels
                .push(style.paint(Paint::Green, &format!("+ {name}: {}{required}", field.data_type)));
        }
        changes.retain(|c| !(c.applied && c.kind == ChangeKind::Addition));
    }
    for change in changes {
        let mut node = &mut tree;
        let names = split_path(&change.path).unwrap_or_else(|_| vec![change.path.clone()]);
        for name in &names {
            node = node.child(&quote_name(name));
        }
        let name = names.last().map(|n| quote_name(n)).unwrap_or_default();
        node.labels.push(label(change, &name, style));
    }
    if tree.children.is_empty() {
        out.push_str("  no schema changes\n");
    } else {
        tree.render("  ", style, out);
    }
    let several = plan.verdicts.len() > 1;
    for (index, verdict) in plan.verdicts.iter().enumerate() {
        let name = if several {
            format!("input {index}")
        } else {
            "input".to_string()
        };
        let text = match verdict.verdict {
            Verdict::Fits => "fits the table as it is".to_string(),
            Verdict::FitsAfterEvolution => "fits after these changes".to_string(),
            Verdict::Incompatible => style.paint(Paint::Red, "incompatible"),
            Verdict::Unverifiable => style.paint(Paint::Red, "unverifiable"),
        };
        out.push_str(&format!("  {name}: {text}\n"));
        for reason in &verdict.reasons {
            out.push_str(&format!("    {}\n", style.paint(Paint::Red, &reason.to_string())));
        }
    }
}

fn label(change: &SchemaChange, name: &str, style: Style) -> String {
    let from = change.from.as_deref().unwrap_or("");
    let to = change.to.as_deref().unwrap_or("");
    let (paint, text) = match (change.kind, change.applied) {
        (ChangeKind::Conflict, _) => (
            Paint::Red,
            format!("! {name}: table {from}, input {to} (conflict)"),
        ),
        (kind, false) => (
            Paint::Red,
            format!("x {name}: {} (refused: {kind} is not allowed)", describe(change)),
        ),
        (ChangeKind::Addition, true) => (Paint::Green, format!("+ {name}: {to}")),
        (ChangeKind::Relaxation, true) => (Paint::Yellow, format!("~ {name}: {from} -> {to}")),
        (ChangeKind::Promotion, true) => (Paint::Cyan, format!("^ {name}: {from} -> {to}")),
    };
    style.paint(paint, &text)
}

fn describe(change: &SchemaChange) -> String {
    match (&change.from, &change.to) {
        (None, Some(to)) => format!("add {to}"),
        (Some(from), Some(to)) => format!("{from} -> {to}"),
        (Some(from), None) => from.clone(),
        (None, None) => change.kind.to_string(),
    }
}

/// A column path segment, the change labels on it and the segments below it.
#[derive(Default)]
struct Node {
    name: String,
    labels: Vec<String>,
    children: Vec<Node>,
}

impl Node {
    fn child(&mut self, name: &str) -> &mut Node {
        let index = match self.children.iter().position(|c| c.name == name) {
            Some(index) => index,
            None => {
                self.children.push(Node {
                    name: name.to_string(),
                    ..Node::default()
                });
                self.children.len() - 1
            }
        };
        &mut self.children[index]
    }

    fn render(&self, indent: &str, style: Style, out: &mut String) {
        for (i, child) in self.children.iter().enumerate() {
            let last = i + 1 == self.children.len();
            let (branch, below) = if last {
                ("└── ", "    ")
            } else {
                ("├── ", "│   ")
            };
            let branch = style.paint(Paint::Dim, branch);
            let mut lines: Vec<String> = child.labels.clone();
            if lines.is_empty() {
                // A path segment that only groups changes below it.
                lines.push(style.paint(Paint::Dim, &child.name));
            }
            for (j, line) in lines.iter().enumerate() {
                let lead = if j == 0 {
                    branch.clone()
                } else {
                    style.paint(Paint::Dim, below)
                };
                out.push_str(&format!("{indent}{lead}{line}\n"));
            }
            child.render(&format!("{indent}{}", style.paint(Paint::Dim, below)), style, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use outflow_core::evolution::{InputVerdict, Reason};
    use outflow_core::schema::{Field, PrimitiveType, Schema};

    use super::*;

    fn change(
        path: &str,
        kind: ChangeKind,
        from: Option<&str>,
        to: Option<&str>,
        applied: bool,
    ) -> SchemaChange {
        SchemaChange {
            path: path.into(),
            kind,
            from: from.map(String::from),
            to: to.map(String::from),
            applied,
            inputs: vec![0],
        }
    }

    fn evolving() -> DestinationPlan {
        let plan = EvolutionPlan {
            current: Some(Schema::default()),
            schema: Some(Schema::default()),
            creates_table: false,
            changes: vec![
                change("email", ChangeKind::Addition, None, Some("string"), true),
                change("score", ChangeKind::Conflict, Some("string"), Some("long"), false),
                change("user.age", ChangeKind::Promotion, Some("int"), Some("long"), true),
                change(
                    "user.name",
                    ChangeKind::Relaxation,
                    Some("required"),
                    Some("optional"),
                    true,
                ),
                change(
                    "user.tags",
                    ChangeKind::Addition,
                    None,
                    Some("list<string>"),
                    false,
                ),
            ],
            verdicts: vec![InputVerdict {
                verdict: Verdict::Incompatible,
                reasons: vec![Reason {
                    path: "score".into(),
                    message: "string in the table, long in the input".into(),
                }],
                needs: vec![],
            }],
        };
        DestinationPlan::new("db.events", PlannedAction::Update).with_evolution(plan)
    }

    #[test]
    fn changes_render_as_a_tree_grouped_by_path() {
        let text = render_plan(&evolving(), Style::plain());
        assert_eq!(
            text,
            "\
db.events: update
  ├── + email: string
  ├── ! score: table string, input long (conflict)
  └── user
      ├── ^ age: int -> long
      ├── ~ name: required -> optional
      └── x tags: add list<string> (refused: addition is not allowed)
  input: incompatible
    score: string in the table, long in the input
"
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
        assert!(text.contains("\x1b[36m^ age: int -> long\x1b[0m"), "{text}");
        assert!(text.contains("\x1b[31m! score"), "{text}");
        assert!(text.contains("\x1b[33mupdate\x1b[0m"), "{text}");
    }

    #[test]
    fn a_creation_lists_the_new_columns() {
        let schema = Schema::new(vec![
            Field::optional("name", PrimitiveType::String),
            Field::required("id", PrimitiveType::Long),
        ]);
        let plan = EvolutionPlan {
            current: None,
            schema: Some(schema),
            creates_table: true,
            changes: vec![
                change("id", ChangeKind::Addition, None, Some("long"), true),
                change("name", ChangeKind::Addition, None, Some("string"), true),
            ],
            verdicts: vec![InputVerdict {
                verdict: Verdict::FitsAfterEvolution,
                reasons: vec![],
                needs: vec![],
            }],
        };
        let plan = DestinationPlan::new("db.new", PlannedAction::Create)
            .with_evolution(plan)
            .with_detail("partitioned by day(ts)");
        assert_eq!(
            render_plan(&plan, Style::plain()),
            "\
db.new: create
  ├── + name: string
  └── + id: long not null
  input: fits after these changes
  - partitioned by day(ts)
"
        );
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
