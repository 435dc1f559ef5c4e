//! How an input's columns find a table's columns: one rule for the planner and every writer.
//!
//! At every nesting level, an input column is matched
//! 1. by field id, when the input's ids can be trusted (see [`trusts_ids`]);
//! 2. else through the table's name mapping (Iceberg's `schema.name-mapping.default`), which
//!    lists the names a column was known by, so a renamed column still matches its old name;
//! 3. else by its current name.
//!
//! Names are compared exactly, as Iceberg does (BigQuery's case-insensitive names are the
//! BigQuery sink's business: it spells the input's names as the table does first).

use std::collections::BTreeSet;

use super::{Field, MappedField, NameMapping, Schema};

/// A column's identity at one level: its field id, if any, and its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnKey<'a> {
    /// The field id (Iceberg's, or Parquet's `PARQUET:field_id`).
    pub id: Option<i32>,
    /// The name.
    pub name: &'a str,
}

impl<'a> From<&'a Field> for ColumnKey<'a> {
    fn from(field: &'a Field) -> Self {
        ColumnKey {
            id: field.id,
            name: &field.name,
        }
    }
}

/// How the input columns of one level matched the table's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LevelMatch {
    /// For each table column, the index of the input column matched to it.
    pub table_to_input: Vec<Option<usize>>,
    /// Input columns that match no table column (new columns), in input order.
    pub unmatched: Vec<usize>,
    /// Input columns that resolve to a table column another input column already took:
    /// (table column, the input column that took it, the one that came later).
    pub duplicates: Vec<(usize, usize, usize)>,
}

/// Matches the input columns of one level to the table's (`mapping` is the name mapping's
/// entries at this level; empty without one).
pub fn match_level(
    by_id: bool,
    table: &[ColumnKey<'_>],
    mapping: &[MappedField],
    input: &[ColumnKey<'_>],
) -> LevelMatch {
    let mut out = LevelMatch {
        table_to_input: vec![None; table.len()],
        ..LevelMatch::default()
    };
    for (i, column) in input.iter().enumerate() {
        match find(by_id, table, mapping, column) {
            None => out.unmatched.push(i),
            Some(t) => match out.table_to_input[t] {
                None => out.table_to_input[t] = Some(i),
                Some(first) => out.duplicates.push((t, first, i)),
            },
        }
    }
    out
}

/// The table column `column` resolves to.
fn find(
    by_id: bool,
    table: &[ColumnKey<'_>],
    mapping: &[MappedField],
    column: &ColumnKey<'_>,
) -> Option<usize> {
    if by_id {
        return column
            .id
            .and_then(|id| table.iter().position(|t| t.id == Some(id)));
    }
    NameMapping::lookup(mapping, column.name)
        .and_then(|id| table.iter().position(|t| t.id == Some(id)))
        .or_else(|| table.iter().position(|t| t.name == column.name))
}

/// Whether an input's field ids identify the table's columns, so columns match by id.
///
/// Ids are how Iceberg matches columns, and a column renamed since the input was written
/// keeps its id. But inputs also carry ids written for other tables (a Parquet file from
/// another Iceberg table, a batch read from one), which would match unrelated columns. So
/// ids are trusted when every input field has one and none contradicts the table: at each
/// level, an id the table has there is either the same name, a name the name mapping lists
/// for it (a rename), or a name no other column there has now; an id the table does not
/// have there is a new column, whose name no column there has and whose id the table has
/// never used anywhere.
pub fn trusts_ids(table: &Schema, mapping: Option<&NameMapping>, input: &Schema) -> bool {
    if input.fields.is_empty() {
        return false;
    }
    let mut used = BTreeSet::new();
    table.visit(|_, f, _| {
        if let Some(id) = f.id {
            used.insert(id);
        }
    });
    let mapping = mapping.map(|m| m.fields.as_slice()).unwrap_or(&[]);
    ids_agree(Some(&table.fields), mapping, &used, &input.fields)
}

fn ids_agree(
    table: Option<&[Field]>,
    mapping: &[MappedField],
    used: &BTreeSet<i32>,
    input: &[Field],
) -> bool {
    input.iter().all(|f| {
        let Some(id) = f.id else { return false };
        let name_held_by_another = |t: &[Field]| t.iter().any(|t| t.name == f.name && t.id != Some(id));
        match table.and_then(|t| t.iter().find(|t| t.id == Some(id)).map(|found| (t, found))) {
            Some((level, t)) => {
                let renamed_from = mapping
                    .iter()
                    .any(|m| m.field_id == Some(id) && m.names.contains(&f.name));
                if t.name != f.name && !renamed_from && name_held_by_another(level) {
                    return false;
                }
                let children: Vec<Field> = t.data_type.children().into_iter().cloned().collect();
                let input_children: Vec<Field> = f.data_type.children().into_iter().cloned().collect();
                ids_agree(
                    Some(&children),
                    NameMapping::children(mapping, id),
                    used,
                    &input_children,
                )
            }
            None => {
                if table.is_some_and(name_held_by_another) || used.contains(&id) {
                    return false;
                }
                let input_children: Vec<Field> = f.data_type.children().into_iter().cloned().collect();
                ids_agree(None, &[], used, &input_children)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::PrimitiveType::{Int, Long};

    fn table() -> Schema {
        Schema::new(vec![
            Field::required("id", Long).with_id(1),
            Field::optional("renamed", Int).with_id(2),
        ])
    }

    fn keys(s: &Schema) -> Vec<ColumnKey<'_>> {
        s.fields.iter().map(ColumnKey::from).collect()
    }

    #[test]
    fn ids_follow_a_rename_without_a_name_mapping() {
        let input = Schema::new(vec![
            Field::required("id", Long).with_id(1),
            Field::optional("original", Int).with_id(2),
        ]);
        assert!(trusts_ids(&table(), None, &input));
        let m = match_level(true, &keys(&table()), &[], &keys(&input));
        assert_eq!(m.table_to_input, [Some(0), Some(1)]);
        assert!(m.unmatched.is_empty());
    }

    #[test]
    fn ids_that_swap_current_names_are_foreign() {
        let input = Schema::new(vec![
            Field::required("renamed", Long).with_id(1),
            Field::optional("id", Int).with_id(2),
        ]);
        assert!(!trusts_ids(&table(), None, &input));
    }

    #[test]
    fn a_name_reused_after_a_rename_follows_the_mapping() {
        // `original` was renamed to `renamed` (id 2); a new column took the name (id 3).
        let mut t = table();
        t.fields.push(Field::optional("original", Int).with_id(3));
        let mut mapping = NameMapping::from_schema(&table());
        mapping.fields[1].names = vec!["original".into(), "renamed".into()];
        let mapping = mapping.updated_with(&t);
        // Without ids, the name is the new column's: the mapping gave it to id 3.
        let input = Schema::new(vec![Field::optional("original", Int)]);
        let m = match_level(false, &keys(&t), &mapping.fields, &keys(&input));
        assert_eq!(m.table_to_input, [None, None, Some(0)]);
        // With ids the id decides, as Iceberg readers do...
        let with_id = Schema::new(vec![Field::optional("original", Int).with_id(2)]);
        let m = match_level(true, &keys(&t), &mapping.fields, &keys(&with_id));
        assert_eq!(m.table_to_input, [None, Some(0), None]);
        // ...once the ids are trusted: here id 2 comes with the name the table now gives
        // id 3, which an input written for another table shows too, so names decide.
        assert!(!trusts_ids(&t, Some(&mapping), &with_id));
    }

    #[test]
    fn two_input_columns_resolving_to_one_table_column_are_reported() {
        let mut mapping = NameMapping::from_schema(&table());
        mapping.fields[1].names = vec!["original".into(), "renamed".into()];
        let input = Schema::new(vec![
            Field::optional("original", Int),
            Field::optional("renamed", Int),
            Field::optional("new", Int),
        ]);
        let m = match_level(false, &keys(&table()), &mapping.fields, &keys(&input));
        assert_eq!(m.table_to_input, [None, Some(0)]);
        assert_eq!(m.duplicates, [(1, 0, 1)]);
        assert_eq!(m.unmatched, [2]);
    }
}
