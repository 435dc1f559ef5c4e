//! Types as text: the one printer and parser of the names job files, `check` and `plan` use.
//!
//! Types print as Iceberg writes them (`long`, `decimal(10,2)`, `timestamptz`,
//! `list<string>`, `map<string, long>`, `struct<a: int not null, b: string>`), and the
//! parser reads those back plus the spellings people already write in Spark and DuckDB:
//! `bigint`, `varchar`, `array<string>`, `INTEGER[]`, `STRUCT(a INT, b VARCHAR)`,
//! `timestamp with time zone`... Keywords are case-insensitive and spaces are optional;
//! field names keep their case, and a name with spaces or punctuation is quoted in
//! backticks (a backtick in it doubled), as in Spark.
//!
//! `not null` after a struct field's type, a list's element type or a map's value type
//! makes that field required; a map's key is always required.

use std::fmt;
use std::str::FromStr;

use super::{DataType, Field, PrimitiveType};
use crate::{Error, ErrorKind, Result};

/// Every primitive name the parser reads, with the type it means. The first name of each
/// type is how it prints. Decimal, fixed and the sized string spellings (`varchar(255)`)
/// take arguments and are read apart.
pub const PRIMITIVE_NAMES: &[(&str, PrimitiveType)] = {
    use PrimitiveType::*;
    &[
        ("boolean", Boolean),
        ("bool", Boolean),
        ("logical", Boolean),
        ("int", Int),
        ("integer", Int),
        ("int32", Int),
        ("signed", Int),
        ("smallint", Int),
        ("short", Int),
        ("tinyint", Int),
        ("byte", Int),
        ("long", Long),
        ("bigint", Long),
        ("int64", Long),
        ("float", Float),
        ("real", Float),
        ("float4", Float),
        ("float32", Float),
        ("double", Double),
        ("double precision", Double),
        ("float8", Double),
        ("float64", Double),
        ("date", Date),
        ("time", Time),
        ("time without time zone", Time),
        ("timestamp", Timestamp),
        ("timestamp without time zone", Timestamp),
        ("timestamp_ntz", Timestamp),
        ("datetime", Timestamp),
        ("timestamptz", TimestampTz),
        ("timestamp with time zone", TimestampTz),
        ("timestamp_ltz", TimestampTz),
        ("timestamp_ns", TimestampNs),
        ("timestamptz_ns", TimestampTzNs),
        ("string", String),
        ("varchar", String),
        ("text", String),
        ("char", String),
        ("uuid", Uuid),
        ("binary", Binary),
        ("bytes", Binary),
        ("blob", Binary),
        ("bytea", Binary),
        ("varbinary", Binary),
        ("json", Json),
    ]
};

/// What to write for a time of day with a zone offset, which Iceberg has no type for.
const FOR_TIMETZ: &str = "no type here holds a time of day with its zone offset; did you mean \"time\" \
     (the time of day, zone dropped), \"timestamptz\" (an instant) or \"string\" (the text as written)?";

/// Types other systems have and Outflow (like Iceberg) has not, each with what to write
/// instead: DuckDB's and PostgreSQL's time of day with a zone.
const NO_EQUIVALENT: &[(&str, &str)] = &[("time with time zone", FOR_TIMETZ), ("timetz", FOR_TIMETZ)];

/// The nested and parameterized type keywords, for suggestions.
const KEYWORDS: &[&str] = &["list", "array", "map", "struct", "decimal", "numeric", "fixed"];

/// What an unknown name is compared with for a suggestion, when nothing is close.
const EXAMPLES: &str = "long, double, string, timestamptz, decimal(10,2), list<string>, struct<a: int>";

impl fmt::Display for PrimitiveType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrimitiveType::Decimal { precision, scale } => write!(f, "decimal({precision},{scale})"),
            PrimitiveType::Fixed(len) => write!(f, "fixed[{len}]"),
            simple => {
                let name = PRIMITIVE_NAMES
                    .iter()
                    .find(|(_, t)| t == simple)
                    .map_or("?", |(name, _)| name);
                f.write_str(name)
            }
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataType::Primitive(p) => p.fmt(f),
            DataType::Struct { fields } => {
                f.write_str("struct<")?;
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}: ", FieldName(&field.name))?;
                    typed(f, field)?;
                }
                f.write_str(">")
            }
            DataType::List { list } => {
                f.write_str("list<")?;
                typed(f, list)?;
                f.write_str(">")
            }
            DataType::Map { map } => {
                write!(f, "map<{}, ", map.key.data_type)?;
                typed(f, &map.value)?;
                f.write_str(">")
            }
        }
    }
}

/// A field's type, and `not null` when it is required.
fn typed(f: &mut fmt::Formatter<'_>, field: &Field) -> fmt::Result {
    write!(f, "{}", field.data_type)?;
    if field.required {
        f.write_str(" not null")?;
    }
    Ok(())
}

/// A struct field's name, in backticks unless it reads as one word.
struct FieldName<'a>(&'a str);

impl fmt::Display for FieldName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.0.is_empty() && self.0.chars().all(is_word_char) {
            f.write_str(self.0)
        } else {
            write!(f, "`{}`", self.0.replace('`', "``"))
        }
    }
}

fn is_word_char(c: char) -> bool {
    !c.is_whitespace() && !"<>()[],:`\"".contains(c)
}

impl FromStr for DataType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let mut parser = Parser {
            text: s,
            tokens: tokenize(s)?,
            next: 0,
        };
        let data_type = parser.data_type()?;
        match parser.peek() {
            None => Ok(data_type),
            Some(token) => Err(parser.error(format!("unexpected {token} after {data_type}"))),
        }
    }
}

impl FromStr for PrimitiveType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let data_type: DataType = s.parse()?;
        data_type.as_primitive().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "{s:?} is a {} type; a primitive type is needed here (long, double, string...)",
                    data_type.kind()
                ),
            )
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    /// A keyword, a number or an unquoted name.
    Word(String),
    /// A name in backticks or double quotes.
    Quoted(String),
    /// One of `< > ( ) [ ] , :`.
    Punct(char),
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Word(w) => write!(f, "{w:?}"),
            Token::Quoted(q) => write!(f, "`{q}`"),
            Token::Punct(c) => write!(f, "'{c}'"),
        }
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if "<>()[],:".contains(c) {
            tokens.push(Token::Punct(c));
            chars.next();
        } else if c == '`' || c == '"' {
            chars.next();
            let mut name = String::new();
            loop {
                match chars.next() {
                    // A doubled quote is the quote itself.
                    Some(q) if q == c && chars.peek() == Some(&c) => {
                        chars.next();
                        name.push(c);
                    }
                    Some(q) if q == c => break,
                    Some(other) => name.push(other),
                    None => {
                        return Err(type_error(text, format!("the name {c}{name} has no closing {c}")));
                    }
                }
            }
            tokens.push(Token::Quoted(name));
        } else {
            let mut word = String::new();
            while let Some(&c) = chars.peek().filter(|c| is_word_char(**c)) {
                word.push(c);
                chars.next();
            }
            tokens.push(Token::Word(word));
        }
    }
    Ok(tokens)
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    next: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next)
    }

    /// The next token if it is a word, in lower case.
    fn peek_word(&self) -> Option<String> {
        match self.peek() {
            Some(Token::Word(w)) => Some(w.to_ascii_lowercase()),
            _ => None,
        }
    }

    fn take(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.next).cloned();
        self.next += usize::from(token.is_some());
        token
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.peek() == Some(&Token::Punct(c));
        self.next += usize::from(found);
        found
    }

    fn expect(&mut self, c: char, after: &str) -> Result<()> {
        if self.eat(c) {
            return Ok(());
        }
        let found = self.peek().map_or("the end".to_string(), Token::to_string);
        Err(self.error(format!("expected '{c}' {after}, found {found}")))
    }

    fn error(&self, message: String) -> Error {
        type_error(self.text, message)
    }

    /// A type, with DuckDB's `[]` suffixes making lists of it.
    fn data_type(&mut self) -> Result<DataType> {
        let mut data_type = self.base_type()?;
        while self.peek() == Some(&Token::Punct('['))
            && self.tokens.get(self.next + 1) == Some(&Token::Punct(']'))
        {
            self.next += 2;
            data_type = DataType::list(Field::optional("element", data_type));
        }
        Ok(data_type)
    }

    fn base_type(&mut self) -> Result<DataType> {
        let spelled = match self.take() {
            Some(Token::Word(w)) => w,
            Some(other) => return Err(self.error(format!("expected a type, found {other}"))),
            None => return Err(self.error(format!("expected a type such as {EXAMPLES}"))),
        };
        let word = spelled.to_ascii_lowercase();
        match word.as_str() {
            "list" | "array" => {
                let close = self.open(&word)?;
                let element = self.field("element")?;
                self.expect(close, &format!("to end {word}<..."))?;
                Ok(DataType::list(element))
            }
            "map" => {
                let close = self.open(&word)?;
                let key = self.field("key")?;
                self.expect(',', "between a map's key and value types")?;
                let value = self.field("value")?;
                self.expect(close, "to end map<...")?;
                Ok(DataType::map(key, value))
            }
            "struct" | "row" => {
                let close = self.open(&word)?;
                let mut fields = Vec::new();
                while !self.eat(close) {
                    if !fields.is_empty() {
                        self.expect(',', "between struct fields")?;
                    }
                    let name = match self.take() {
                        Some(Token::Word(w) | Token::Quoted(w)) => w,
                        Some(other) => {
                            return Err(self.error(format!("expected a field name, found {other}")));
                        }
                        None => return Err(self.error(format!("expected a field name or '{close}'"))),
                    };
                    self.eat(':');
                    fields.push(self.field(&name)?);
                }
                Ok(DataType::structure(fields))
            }
            "decimal" | "numeric" | "dec" => {
                let needs = || format!("{word} needs a precision and a scale, as in decimal(10,2)");
                if !self.eat('(') {
                    return Err(self.error(needs()));
                }
                let precision = self.number(&needs())?;
                let scale = if self.eat(',') { self.number(&needs())? } else { 0 };
                self.expect(')', &format!("after {word}'s precision and scale"))?;
                match (u8::try_from(precision), i8::try_from(scale)) {
                    (Ok(precision @ 1..=76), Ok(scale)) if scale as u8 <= precision => {
                        Ok(PrimitiveType::Decimal { precision, scale }.into())
                    }
                    _ => Err(self.error(format!(
                        "decimal({precision},{scale}): the precision must be 1 to 76 and the scale 0 to the precision"
                    ))),
                }
            }
            "fixed" => {
                let close = match self.take() {
                    Some(Token::Punct('[')) => ']',
                    Some(Token::Punct('(')) => ')',
                    _ => return Err(self.error("fixed needs a length, as in fixed[16]".to_string())),
                };
                let length = self.number("fixed needs a length, as in fixed[16]")?;
                self.expect(close, "after fixed's length")?;
                Ok(PrimitiveType::Fixed(length).into())
            }
            _ => self.primitive(spelled),
        }
    }

    /// The `<` or `(` after a nested type's keyword, and the bracket that closes it.
    fn open(&mut self, keyword: &str) -> Result<char> {
        if self.eat('<') {
            Ok('>')
        } else if self.eat('(') {
            Ok(')')
        } else {
            Err(self.error(format!("expected '<' after {keyword}")))
        }
    }

    /// A nested field's type and its optional `not null`.
    fn field(&mut self, name: &str) -> Result<Field> {
        let data_type = self.data_type()?;
        if self.peek_word().as_deref() == Some("not") {
            self.next += 1;
            if self.peek_word().as_deref() != Some("null") {
                return Err(self.error(format!("expected null after not, in field {name}")));
            }
            self.next += 1;
            return Ok(Field::required(name, data_type));
        }
        Ok(Field::optional(name, data_type))
    }

    fn number(&mut self, needs: &str) -> Result<u32> {
        match self.take() {
            Some(Token::Word(w)) => w
                .parse()
                .map_err(|_| self.error(format!("{w:?} is not a number: {needs}"))),
            _ => Err(self.error(needs.to_string())),
        }
    }

    /// A primitive by name: the longest run of words that is one (`timestamp with time
    /// zone`), then an ignored length for the string spellings (`varchar(255)`).
    fn primitive(&mut self, first: String) -> Result<DataType> {
        let mut name = first;
        while let Some(Token::Word(next)) = self.peek() {
            let longer = format!("{name} {next}");
            let key = longer.to_ascii_lowercase();
            let leads_to = |n: &str| n == key || n.starts_with(&format!("{key} "));
            let names = PRIMITIVE_NAMES.iter().map(|(n, _)| *n);
            if !names.chain(NO_EQUIVALENT.iter().map(|(n, _)| *n)).any(leads_to) {
                break;
            }
            name = longer;
            self.next += 1;
        }
        let lower = name.to_ascii_lowercase();
        if let Some((_, instead)) = NO_EQUIVALENT.iter().find(|(n, _)| *n == lower) {
            return Err(self.error(format!("unsupported type {name:?}: {instead}")));
        }
        let Some(&(_, primitive)) = PRIMITIVE_NAMES.iter().find(|(n, _)| *n == lower) else {
            return Err(self.error(unknown(&name)));
        };
        if primitive == PrimitiveType::String && self.eat('(') {
            self.number(&format!("{name}(...) takes a length"))?;
            self.expect(')', &format!("after {name}'s length"))?;
        }
        Ok(primitive.into())
    }
}

/// `unknown type "integr"; did you mean "integer"?`, naming every name as near as the
/// nearest (`"timestamp" or "timestamptz"`), or examples when none is near.
fn unknown(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let candidates = PRIMITIVE_NAMES
        .iter()
        .map(|(n, _)| *n)
        .chain(KEYWORDS.iter().copied());
    let scored: Vec<(usize, &str)> = candidates.map(|c| (edit_distance(&lower, c), c)).collect();
    let nearest = scored.iter().map(|(d, _)| *d).min().unwrap_or(usize::MAX);
    if nearest > (name.chars().count() / 2).max(2) {
        return format!("unknown type {name:?}; types are written like {EXAMPLES}");
    }
    let names: Vec<String> = scored
        .iter()
        .filter(|(d, _)| *d == nearest)
        .map(|(_, c)| format!("{c:?}"))
        .collect();
    format!("unknown type {name:?}; did you mean {}?", names.join(" or "))
}

/// The error for `text`, quoting it when the message names only a part of it.
fn type_error(text: &str, message: String) -> Error {
    let trimmed = text.trim();
    let message = if message.contains(&format!("{trimmed:?}")) {
        message
    } else {
        format!("in type {trimmed:?}: {message}")
    };
    Error::new(ErrorKind::InvalidConfig, message)
}

/// Levenshtein distance, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use PrimitiveType::*;

    fn parse(s: &str) -> DataType {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn error(s: &str) -> std::string::String {
        s.parse::<DataType>().unwrap_err().to_string()
    }

    #[test]
    fn every_name_reads_as_its_type_and_prints_as_the_first() {
        for (name, t) in PRIMITIVE_NAMES {
            assert_eq!(parse(name), DataType::Primitive(*t), "{name}");
            assert_eq!(
                parse(&name.to_ascii_uppercase()),
                DataType::Primitive(*t),
                "{name}"
            );
            let printed = t.to_string();
            let first = PRIMITIVE_NAMES.iter().find(|(_, u)| u == t).unwrap().0;
            assert_eq!(printed, first);
        }
        assert_eq!(
            parse("decimal(10,2)"),
            Decimal {
                precision: 10,
                scale: 2
            }
            .into()
        );
        assert_eq!(
            parse("NUMERIC ( 38 , 9 )"),
            Decimal {
                precision: 38,
                scale: 9
            }
            .into()
        );
        assert_eq!(
            parse("decimal(10)"),
            Decimal {
                precision: 10,
                scale: 0
            }
            .into()
        );
        assert_eq!(parse("fixed[16]"), Fixed(16).into());
        assert_eq!(parse("fixed(16)"), Fixed(16).into());
        assert_eq!(parse("varchar(255)"), String.into());
        assert_eq!(parse("TIMESTAMP WITH TIME ZONE"), TimestampTz.into());
        assert_eq!(parse("timestamp  without time zone"), Timestamp.into());
    }

    #[test]
    fn nested_types_read_as_iceberg_spark_and_duckdb_write_them() {
        let list = DataType::list(Field::optional("element", String));
        for s in [
            "list<string>",
            "array<string>",
            "ARRAY<STRING>",
            "VARCHAR[]",
            "list(varchar)",
        ] {
            assert_eq!(parse(s), list, "{s}");
        }
        let map = DataType::map(Field::required("key", String), Field::optional("value", Long));
        for s in ["map<string, long>", "map<string,bigint>", "MAP(VARCHAR, BIGINT)"] {
            assert_eq!(parse(s), map, "{s}");
        }
        let structure = DataType::structure(vec![Field::optional("a", Int), Field::required("B", String)]);
        for s in [
            "struct<a: int, B: string not null>",
            "struct<a:int,B:string NOT NULL>",
            "STRUCT(a INTEGER, B VARCHAR NOT NULL)",
            "struct<`a`: int, \"B\" string not null>",
        ] {
            assert_eq!(parse(s), structure, "{s}");
        }
        assert_eq!(
            parse("struct<tags: list<string not null>, attrs: map<string, struct<x: double>>>").to_string(),
            "struct<tags: list<string not null>, attrs: map<string, struct<x: double>>>"
        );
        assert_eq!(
            parse("int[][]"),
            DataType::list(Field::optional(
                "element",
                DataType::list(Field::optional("element", Int))
            ))
        );
        assert_eq!(parse("struct<>"), DataType::structure(vec![]));
    }

    #[test]
    fn names_that_are_not_one_word_print_in_backticks() {
        let t = DataType::structure(vec![
            Field::optional("first name", String),
            Field::optional("a`b", Int),
            Field::optional("x:y", Int),
        ]);
        let printed = t.to_string();
        assert_eq!(printed, "struct<`first name`: string, `a``b`: int, `x:y`: int>");
        assert_eq!(parse(&printed), t);
    }

    #[test]
    fn a_time_with_a_zone_is_named_with_what_to_write_instead() {
        for spelled in ["time with time zone", "TIME WITH TIME ZONE", "timetz"] {
            let message = error(spelled);
            assert_eq!(
                message,
                format!(
                    "invalid configuration: unsupported type {spelled:?}: no type here holds a time of day \
                     with its zone offset; did you mean \"time\" (the time of day, zone dropped), \
                     \"timestamptz\" (an instant) or \"string\" (the text as written)?"
                )
            );
        }
        assert!(error("list<time with time zone>").contains("unsupported type \"time with time zone\""));
        // The spellings that are types still read.
        assert_eq!(parse("time without time zone"), DataType::from(Time));
        assert_eq!(parse("timestamp with time zone"), DataType::from(TimestampTz));
    }

    #[test]
    fn a_wrong_type_is_named_with_the_nearest() {
        assert_eq!(
            error("integr"),
            "invalid configuration: unknown type \"integr\"; did you mean \"integer\"?"
        );
        assert!(
            error("Strng").contains("unknown type \"Strng\"; did you mean \"string\"?"),
            "{}",
            error("Strng")
        );
        assert!(error("timestampz").contains("did you mean \"timestamp\" or \"timestamptz\"?"));
        assert!(error("lsit<int>").contains("did you mean \"list\"?"));
        let nested = error("struct<a: int, b: strin>");
        assert!(
            nested.contains(
                "in type \"struct<a: int, b: strin>\": unknown type \"strin\"; did you mean \"string\"?"
            ),
            "{nested}"
        );
        assert!(error("zzzzzzzzzz").contains("types are written like long, double"));
        assert!(error("").contains("expected a type"));
        assert!(error("list<int").contains("expected '>' to end list<..., found the end"));
        assert!(error("map<string>").contains("between a map's key and value types"));
        assert!(error("decimal").contains("decimal needs a precision and a scale"));
        assert!(error("decimal(0,0)").contains("precision must be 1 to 76"));
        assert!(error("decimal(5,6)").contains("precision must be 1 to 76"));
        assert!(error("long long").contains("unexpected \"long\" after long"));
        assert!(error("struct<a int").contains("between struct fields"));
        assert!(error("struct<`a int>").contains("no closing `"));
        let cast = "list<string>".parse::<PrimitiveType>().unwrap_err().to_string();
        assert!(
            cast.contains("\"list<string>\" is a list type; a primitive type is needed"),
            "{cast}"
        );
    }

    #[test]
    fn docs_list_every_name() {
        let docs =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/jobs.md")).unwrap();
        for (name, _) in PRIMITIVE_NAMES {
            assert!(
                docs.contains(&format!("`{name}`")),
                "docs/jobs.md does not list `{name}`"
            );
        }
    }

    fn primitive() -> impl Strategy<Value = PrimitiveType> {
        prop_oneof![
            proptest::sample::select(PRIMITIVE_NAMES.iter().map(|(_, t)| *t).collect::<Vec<_>>()),
            (1u8..=76)
                .prop_flat_map(|p| (Just(p), 0..=p as i8))
                .prop_map(|(precision, scale)| Decimal { precision, scale }),
            (1u32..1000).prop_map(Fixed),
        ]
    }

    fn name() -> impl Strategy<Value = std::string::String> {
        prop_oneof!["[a-z_][a-z0-9_]{0,6}", "[ -~]{1,6}", Just("not".to_string())]
    }

    fn data_type() -> impl Strategy<Value = DataType> {
        primitive()
            .prop_map(DataType::Primitive)
            .prop_recursive(4, 24, 4, |inner| {
                prop_oneof![
                    (inner.clone(), any::<bool>())
                        .prop_map(|(t, required)| DataType::list(field("element", t, required))),
                    (primitive(), inner.clone(), any::<bool>()).prop_map(|(k, v, required)| {
                        DataType::map(Field::required("key", k), field("value", v, required))
                    }),
                    proptest::collection::vec((name(), inner, any::<bool>()), 0..4).prop_map(|fields| {
                        DataType::structure(fields.into_iter().map(|(n, t, r)| field(&n, t, r)).collect())
                    }),
                ]
            })
    }

    fn field(name: &str, t: DataType, required: bool) -> Field {
        if required {
            Field::required(name, t)
        } else {
            Field::optional(name, t)
        }
    }

    proptest! {
        #[test]
        fn every_type_prints_as_it_parses(t in data_type()) {
            let printed = t.to_string();
            prop_assert_eq!(printed.parse::<DataType>().unwrap(), t, "{}", printed);
        }
    }
}
