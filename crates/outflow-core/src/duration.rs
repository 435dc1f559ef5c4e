//! Durations written the way people write them (`100ms`, `30s`, `7d`), for serde.
//!
//! Use with `#[serde(with = "outflow_core::duration")]` on a `Duration` field, or
//! [`option`] on an `Option<Duration>`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Writes a duration as text, e.g. `1m 30s`.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

/// Reads a duration from text such as `100ms`, `30s`, `7d` or `1h 30m`.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
    parse(&text).map_err(serde::de::Error::custom)
}

/// Parses a duration such as `100ms`, `30s`, `7d` or `1h 30m`.
pub fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// The same for `Option<Duration>`.
pub mod option {
    use super::*;

    /// Writes an optional duration as text.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    /// Reads an optional duration from text.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = Option::<std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.map(|t| super::parse(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_people_write() {
        assert_eq!(parse("7d").unwrap(), Duration::from_secs(7 * 86400));
        assert_eq!(parse("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse(" 1h 30m ").unwrap(), Duration::from_secs(5400));
        assert!(parse("soon").unwrap_err().contains("\"soon\""));
    }
}
