//! The one way schema changes are printed, by `outflow plan`, both `ensure-table` commands,
//! `outflow iceberg add-files` and the sinks' errors: a tree grouped by column path, one
//! line per change, marked `+` added, `~` relaxed to optional, `^` promoted to a wider
//! type, `!` conflict, `x` a change the evolution options do not allow.
//!
//! ```text
//!   ├── + email: string
//!   ├── ! score: table string, input long (conflict)
//!   └── user
//!       ├── ^ age: int -> long
//!       └── x tags: add list<string> (refused: addition is not allowed)
//!   input: incompatible
//!     score: string in the table, long in the input
//! ```
//!
//! Text comes out plain; a caller that colours it (the command line) passes a painter that
//! receives each piece with its [`Tone`]. The marks carry the meaning without colour.

use super::plan::{ChangeKind, EvolutionPlan, SchemaChange, Verdict};
use crate::schema::{quote_name, split_path};

/// What a piece of printed text is, for a painter to colour.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    /// A column added (`+`).
    Added,
    /// A column relaxed to optional (`~`).
    Relaxed,
    /// A column promoted to a wider type (`^`).
    Promoted,
    /// A conflict (`!`), a change refused (`x`), an input that cannot be written and why.
    Refused,
    /// Text that is neither: an input that fits.
    Normal,
    /// The tree's branches, grouping names and notes under a change.
    Faint,
}

/// Paints each piece of text; [`plain`] leaves it as it is.
pub type Painter<'a> = &'a dyn Fn(Tone, &str) -> String;

/// The painter of plain text.
pub fn plain(_: Tone, text: &str) -> String {
    text.to_string()
}

/// Schema changes as a tree grouped by column path, built change by change.
#[derive(Clone, Debug, Default)]
pub struct ChangeTree {
    root: Node,
}

#[derive(Clone, Debug, Default)]
struct Node {
    name: String,
    lines: Vec<(Tone, String)>,
    children: Vec<Node>,
}

impl ChangeTree {
    /// An empty tree.
    pub fn new() -> Self {
        ChangeTree::default()
    }

    /// The changes of `plan`. A table the plan creates is shown as its columns, in table
    /// order; the planner's additions (sorted by path) would only repeat them.
    pub fn of_plan(plan: &EvolutionPlan) -> Self {
        let mut tree = ChangeTree::new();
        let creates = plan.creates_table && plan.schema.is_some();
        if let (true, Some(schema)) = (creates, &plan.schema) {
            for field in &schema.fields {
                let required = if field.required { " not null" } else { "" };
                let name = quote_name(&field.name);
                tree.root
                    .child(&name)
                    .lines
                    .push((Tone::Added, format!("+ {name}: {}{required}", field.data_type)));
            }
        }
        for change in &plan.changes {
            if !(creates && change.applied && change.kind == ChangeKind::Addition) {
                tree.add(change, Vec::new());
            }
        }
        tree
    }

    /// Adds `change`, with `notes` (such as the files that need it) on lines below it.
    pub fn add(&mut self, change: &SchemaChange, notes: Vec<String>) {
        let names = split_path(&change.path).unwrap_or_else(|_| vec![change.path.clone()]);
        let mut node = &mut self.root;
        for name in &names {
            node = node.child(&quote_name(name));
        }
        let name = names
            .last()
            .map(|n| quote_name(n).into_owned())
            .unwrap_or_default();
        node.lines.push(label(change, &name));
        node.lines.extend(notes.into_iter().map(|n| (Tone::Faint, n)));
    }

    /// Whether no change was added.
    pub fn is_empty(&self) -> bool {
        self.root.children.is_empty()
    }

    /// The tree, each line after `indent` and ending in a newline; `no schema changes`
    /// when it is empty.
    pub fn render(&self, indent: &str, paint: Painter<'_>) -> String {
        let mut out = String::new();
        if self.is_empty() {
            out.push_str(&format!("{indent}no schema changes\n"));
        } else {
            self.root.render(indent, paint, &mut out);
        }
        out
    }
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

    fn render(&self, indent: &str, paint: Painter<'_>, out: &mut String) {
        for (i, child) in self.children.iter().enumerate() {
            let last = i + 1 == self.children.len();
            let (branch, below) = if last {
                ("└── ", "    ")
            } else {
                ("├── ", "│   ")
            };
            let mut lines = child.lines.clone();
            if lines.is_empty() {
                // A path segment that only groups changes below it.
                lines.push((Tone::Faint, child.name.clone()));
            }
            for (j, (tone, line)) in lines.iter().enumerate() {
                let lead = paint(Tone::Faint, if j == 0 { branch } else { below });
                out.push_str(&format!("{indent}{lead}{}\n", paint(*tone, line)));
            }
            child.render(&format!("{indent}{}", paint(Tone::Faint, below)), paint, out);
        }
    }
}

/// One change's line: its mark, its column's name (the last segment of its path) and what
/// changes.
fn label(change: &SchemaChange, name: &str) -> (Tone, String) {
    let from = change.from.as_deref().unwrap_or("");
    let to = change.to.as_deref().unwrap_or("");
    match (change.kind, change.applied) {
        (ChangeKind::Conflict, _) => (
            Tone::Refused,
            format!("! {name}: table {from}, input {to} (conflict)"),
        ),
        (kind, false) => {
            let what = match (&change.from, &change.to) {
                (None, Some(to)) => format!("add {to}"),
                (Some(from), Some(to)) => format!("{from} -> {to}"),
                (Some(from), None) => from.clone(),
                (None, None) => kind.to_string(),
            };
            (
                Tone::Refused,
                format!("x {name}: {what} (refused: {kind} is not allowed)"),
            )
        }
        (ChangeKind::Addition, true) => (Tone::Added, format!("+ {name}: {to}")),
        (ChangeKind::Relaxation, true) => (Tone::Relaxed, format!("~ {name}: {from} -> {to}")),
        (ChangeKind::Promotion, true) => (Tone::Promoted, format!("^ {name}: {from} -> {to}")),
    }
}

/// A verdict in words (`fits the table as it is`, `incompatible`...), painted.
pub fn verdict_text(verdict: Verdict, paint: Painter<'_>) -> String {
    match verdict {
        Verdict::Fits => paint(Tone::Normal, "fits the table as it is"),
        Verdict::FitsAfterEvolution => paint(Tone::Normal, "fits after these changes"),
        Verdict::Incompatible => paint(Tone::Refused, "incompatible"),
        Verdict::Unverifiable => paint(Tone::Refused, "unverifiable"),
    }
}

impl EvolutionPlan {
    /// The plan for people, as the module shows it: the changes as a tree, then one line
    /// per input with its verdict and reasons, naming inputs by `labels` when given (one
    /// per input, e.g. file paths), else `input` (or `input N` when there are several).
    pub fn render(&self, labels: Option<&[String]>) -> String {
        self.render_with(labels, &plain)
    }

    /// [`EvolutionPlan::render`] with each piece painted by `paint`.
    pub fn render_with(&self, labels: Option<&[String]>, paint: Painter<'_>) -> String {
        let mut out = ChangeTree::of_plan(self).render("  ", paint);
        let several = self.verdicts.len() > 1;
        for (index, verdict) in self.verdicts.iter().enumerate() {
            let name = match labels.and_then(|l| l.get(index)) {
                Some(label) => label.clone(),
                None if several => format!("input {index}"),
                None => "input".to_string(),
            };
            out.push_str(&format!("  {name}: {}\n", verdict_text(verdict.verdict, paint)));
            for reason in &verdict.reasons {
                out.push_str(&format!("    {}\n", paint(Tone::Refused, &reason.to_string())));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evolution::{InputVerdict, Reason};
    use crate::schema::{Field, PrimitiveType, Schema};

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

    fn evolving() -> EvolutionPlan {
        EvolutionPlan {
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
        }
    }

    #[test]
    fn changes_render_as_a_tree_grouped_by_path() {
        assert_eq!(
            evolving().render(None),
            "  ├── + email: string
  ├── ! score: table string, input long (conflict)
  └── user
      ├── ^ age: int -> long
      ├── ~ name: required -> optional
      └── x tags: add list<string> (refused: addition is not allowed)
  input: incompatible
    score: string in the table, long in the input
"
        );
        assert!(
            evolving()
                .render(Some(&["a.parquet".into()]))
                .contains("  a.parquet: incompatible\n")
        );
    }

    #[test]
    fn the_painter_sees_each_piece_with_its_tone() {
        let paint = |tone: Tone, text: &str| match tone {
            Tone::Faint => text.to_string(),
            other => format!("<{other:?}>{text}"),
        };
        let text = evolving().render_with(None, &paint);
        assert!(text.contains("<Added>+ email: string"), "{text}");
        assert!(text.contains("<Relaxed>~ name: required -> optional"), "{text}");
        assert!(text.contains("<Promoted>^ age: int -> long"), "{text}");
        assert!(text.contains("<Refused>! score"), "{text}");
    }

    #[test]
    fn a_creation_lists_the_new_columns_and_notes_go_below_their_change() {
        let plan = EvolutionPlan {
            current: None,
            schema: Some(Schema::new(vec![
                Field::optional("name", PrimitiveType::String),
                Field::required("id", PrimitiveType::Long),
            ])),
            creates_table: true,
            changes: vec![
                change("id", ChangeKind::Addition, None, Some("long"), true),
                change("name", ChangeKind::Addition, None, Some("string"), true),
            ],
            verdicts: vec![],
        };
        assert_eq!(
            ChangeTree::of_plan(&plan).render("  ", &plain),
            "  ├── + name: string\n  └── + id: long not null\n"
        );
        let mut tree = ChangeTree::new();
        assert_eq!(tree.render("  ", &plain), "  no schema changes\n");
        tree.add(
            &change("extra", ChangeKind::Addition, None, Some("string"), true),
            vec!["files: a.parquet".into()],
        );
        assert_eq!(
            tree.render("  ", &plain),
            "  └── + extra: string\n      files: a.parquet\n"
        );
    }
}
