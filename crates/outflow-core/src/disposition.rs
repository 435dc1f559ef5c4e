//! What a sink may do to its destination table before and while it writes.
//!
//! The names follow Beam's BigQueryIO: a [`CreateDisposition`] says whether a missing table
//! may be created, a [`WriteDisposition`] what happens to rows already in the table. Each
//! sink documents what creation needs (a schema, column families, the union of file
//! schemas) and checks that precondition when it is built, before any I/O.

use crate::named::named_enum;

named_enum! {
    /// Whether a sink may create a missing destination table.
    #[derive(Default)]
    pub enum CreateDisposition {
        /// Create the table when it does not exist (the default). The sink must have what
        /// creation needs; its builder checks that.
        #[default]
        CreateIfNeeded = "create_if_needed",
        /// Never create: writing to a missing table fails with an error naming it.
        CreateNever = "create_never",
    }
}

named_enum! {
    /// What happens to the rows a destination table already holds.
    #[derive(Default)]
    pub enum WriteDisposition {
        /// Add the new rows to the existing ones (the default).
        #[default]
        Append = "append" | "write_append",
        /// Replace the table's rows with the new ones, atomically: readers see the old rows
        /// or the new ones, never a mix.
        Truncate = "truncate" | "write_truncate",
        /// Write only if the table holds no rows; fail otherwise, before writing anything.
        Empty = "empty" | "write_empty",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        assert_eq!(CreateDisposition::default(), CreateDisposition::CreateIfNeeded);
        assert_eq!(WriteDisposition::default(), WriteDisposition::Append);
    }

    #[test]
    fn parses_beam_flink_and_cli_spellings() {
        for s in [
            "CREATE_IF_NEEDED",
            "CreateIfNeeded",
            "create-if-needed",
            "create_if_needed",
        ] {
            assert_eq!(
                s.parse::<CreateDisposition>().unwrap(),
                CreateDisposition::CreateIfNeeded
            );
        }
        assert_eq!(
            "WRITE_TRUNCATE".parse::<WriteDisposition>().unwrap(),
            WriteDisposition::Truncate
        );
        assert_eq!(
            "empty".parse::<WriteDisposition>().unwrap(),
            WriteDisposition::Empty
        );
    }

    #[test]
    fn unknown_name_lists_the_choices() {
        let err = "sometimes".parse::<CreateDisposition>().unwrap_err();
        assert!(
            err.to_string().contains("create_if_needed, create_never"),
            "{err}"
        );
    }

    #[test]
    fn serde_round_trip_by_name() {
        for d in CreateDisposition::ALL {
            let json = serde_json::to_string(d).unwrap();
            assert_eq!(&serde_json::from_str::<CreateDisposition>(&json).unwrap(), d);
        }
        for d in WriteDisposition::ALL {
            let json = serde_json::to_string(d).unwrap();
            assert_eq!(&serde_json::from_str::<WriteDisposition>(&json).unwrap(), d);
        }
        assert_eq!(
            serde_json::to_string(&WriteDisposition::Truncate).unwrap(),
            "\"truncate\""
        );
    }
}
