//! Iceberg name mappings: the names under which files without field ids may carry a column.
//!
//! A table keeps its mapping in the property `schema.name-mapping.default`, as JSON. Readers
//! use it to resolve the columns of Parquet files written by other tools (no field ids);
//! Outflow creates one for tables it creates and keeps it current when columns are added,
//! never dropping a name a file may still use.

use serde::{Deserialize, Serialize};

use super::{Field, Schema};
use crate::{Error, Result};

/// One mapped field: a field id, the names it is known by, and its children's mappings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MappedField {
    /// The table field id these names resolve to (absent for a name to ignore).
    #[serde(rename = "field-id", default, skip_serializing_if = "Option::is_none")]
    pub field_id: Option<i32>,
    /// The names, current and former.
    pub names: Vec<String>,
    /// Mappings of nested fields (struct fields, `element`, `key`, `value`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<MappedField>,
}

/// A table's name mapping.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NameMapping {
    /// The top-level mapped fields.
    pub fields: Vec<MappedField>,
}

/// The table property under which Iceberg tables keep their default name mapping.
pub const NAME_MAPPING_PROPERTY: &str = "schema.name-mapping.default";

impl NameMapping {
    /// The table property name for the default mapping.
    pub const PROPERTY: &'static str = NAME_MAPPING_PROPERTY;

    /// A mapping naming every field of `schema` by its current name. Fields must have ids.
    pub fn from_schema(schema: &Schema) -> NameMapping {
        NameMapping {
            fields: schema.fields.iter().map(mapped).collect(),
        }
    }

    /// This mapping brought up to date with `schema`: fields new in the schema are added and
    /// a renamed field gains its new name. A field's former names stay, except one that
    /// another field now has: the name goes to the field that holds it now, as Iceberg's
    /// own mapping updates do, so a name never resolves to two fields.
    pub fn updated_with(&self, schema: &Schema) -> NameMapping {
        NameMapping {
            fields: merge_level(&self.fields, &schema.fields),
        }
    }

    /// Parses the JSON form kept in the table property.
    pub fn from_json(json: &str) -> Result<NameMapping> {
        serde_json::from_str(json).map_err(|e| {
            Error::invalid_input(format!(
                "{NAME_MAPPING_PROPERTY} is not a valid name mapping: {e}"
            ))
        })
    }

    /// The JSON form kept in the table property.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a name mapping always serializes")
    }

    /// The field id that `name` maps to among `level` (top level when `level` is this
    /// mapping's fields).
    pub fn lookup(level: &[MappedField], name: &str) -> Option<i32> {
        level
            .iter()
            .find(|m| m.names.iter().any(|n| n == name))
            .and_then(|m| m.field_id)
    }

    /// The mapped children of the entry for `field_id` among `level`.
    pub fn children(level: &[MappedField], field_id: i32) -> &[MappedField] {
        level
            .iter()
            .find(|m| m.field_id == Some(field_id))
            .map(|m| m.fields.as_slice())
            .unwrap_or(&[])
    }
}

fn mapped(field: &Field) -> MappedField {
    MappedField {
        field_id: field.id,
        names: vec![field.name.clone()],
        fields: field.data_type.children().into_iter().map(mapped).collect(),
    }
}

fn merge_level(existing: &[MappedField], fields: &[Field]) -> Vec<MappedField> {
    let mut out: Vec<MappedField> = existing.to_vec();
    for field in fields {
        for other in out.iter_mut().filter(|m| m.field_id != field.id) {
            other.names.retain(|n| *n != field.name);
        }
        let children: Vec<Field> = field.data_type.children().into_iter().cloned().collect();
        match out
            .iter_mut()
            .find(|m| m.field_id.is_some() && m.field_id == field.id)
        {
            Some(entry) => {
                if !entry.names.contains(&field.name) {
                    entry.names.push(field.name.clone());
                }
                entry.fields = merge_level(&entry.fields, &children);
            }
            None => out.push(mapped(field)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{DataType, PrimitiveType};

    fn schema() -> Schema {
        let mut s = Schema::new(vec![
            Field::required("id", PrimitiveType::Long),
            Field::optional(
                "tags",
                DataType::list(Field::optional("element", PrimitiveType::String)),
            ),
        ]);
        s.assign_missing_ids(0);
        s
    }

    #[test]
    fn json_matches_iceberg_layout() {
        let json = NameMapping::from_schema(&schema()).to_json();
        assert_eq!(
            json,
            r#"[{"field-id":1,"names":["id"]},{"field-id":2,"names":["tags"],"fields":[{"field-id":3,"names":["element"]}]}]"#
        );
        assert_eq!(
            NameMapping::from_json(&json).unwrap(),
            NameMapping::from_schema(&schema())
        );
        assert!(NameMapping::from_json("{").is_err());
    }

    #[test]
    fn update_keeps_old_names_and_adds_new_fields() {
        let old = NameMapping::from_schema(&schema());
        let mut evolved = schema();
        evolved.fields[0].name = "record_id".into();
        evolved
            .fields
            .push(Field::optional("extra", PrimitiveType::Int).with_id(4));
        let updated = old.updated_with(&evolved);
        assert_eq!(updated.fields[0].names, vec!["id", "record_id"]);
        assert_eq!(NameMapping::lookup(&updated.fields, "id"), Some(1));
        assert_eq!(NameMapping::lookup(&updated.fields, "record_id"), Some(1));
        assert_eq!(NameMapping::lookup(&updated.fields, "extra"), Some(4));
        assert_eq!(
            NameMapping::lookup(NameMapping::children(&updated.fields, 2), "element"),
            Some(3)
        );
    }

    #[test]
    fn a_name_reused_by_a_new_field_leaves_the_old_one() {
        let mut renamed = schema();
        renamed.fields[0].name = "record_id".into();
        let mapping = NameMapping::from_schema(&schema()).updated_with(&renamed);
        let mut reused = renamed.clone();
        reused
            .fields
            .push(Field::optional("id", PrimitiveType::String).with_id(4));
        let updated = mapping.updated_with(&reused);
        assert_eq!(updated.fields[0].names, vec!["record_id"]);
        assert_eq!(NameMapping::lookup(&updated.fields, "id"), Some(4));
    }
}
