//! What a Kafka source reads: brokers, topics, the consumer group, where to start, and
//! client settings passed through to librdkafka.

use std::collections::BTreeMap;
use std::fmt;

use outflow_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// Where a partition with no stored offset starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartPosition {
    /// Its oldest record still kept (the default).
    #[default]
    Earliest,
    /// Only records produced after the job starts.
    Latest,
    /// The first record at or after this time, in milliseconds since the Unix epoch.
    Timestamp(i64),
}

/// The `kafka` section of a streaming job, and the options of [`crate::KafkaSource`].
///
/// ```yaml
/// kafka:
///   brokers: 127.0.0.1:9092
///   topics: [orders]              # or topic_pattern: "^orders-.*"
///   group: orders-to-lake
///   start: earliest               # latest, or { timestamp: 1767225600000 }
///   key_column: order_key         # optional: the record key as a string column
///   headers_column: headers       # optional: the headers as a JSON object string column
///   properties:                   # optional: librdkafka settings, passed through
///     security.protocol: SASL_SSL
///     sasl.mechanism: PLAIN
///     sasl.username: ${KAFKA_USER}
///     sasl.password: ${KAFKA_PASSWORD}
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceOptions {
    /// The bootstrap servers, `host:port[,host:port...]`.
    pub brokers: String,
    /// The topics to read.
    #[serde(default)]
    pub topics: Vec<String>,
    /// Instead of `topics`: every topic whose name matches this regular expression (topics
    /// created later join when the group next rebalances).
    #[serde(default)]
    pub topic_pattern: Option<String>,
    /// The consumer group: processes of one job in one group share the partitions.
    pub group: String,
    /// Where partitions no destination holds an offset for start.
    #[serde(default)]
    pub start: StartPosition,
    /// A column that receives each record's key as a string (null without a key).
    #[serde(default)]
    pub key_column: Option<String>,
    /// A column that receives each record's headers as the text of a JSON object
    /// (`{"name": "value"}`, values as UTF-8 text; of a name given twice, the last), null
    /// for a record without headers. Text, so that every sink can hold it.
    #[serde(default)]
    pub headers_column: Option<String>,
    /// A column that receives each record's Kafka timestamp (its create or log-append
    /// time) as a UTC timestamp in milliseconds: a time that is the same each time the
    /// record is read, for sinks whose cells are timed (Bigtable).
    #[serde(default)]
    pub timestamp_column: Option<String>,
    /// Settings passed to librdkafka as they are (`security.protocol`, `sasl.*`,
    /// `ssl.*`...). The source sets the group, the brokers and offset handling itself.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// Settings the source owns: a job that sets them in `properties` would break its
/// exactly-once reading.
const OWNED: &[&str] = &[
    "bootstrap.servers",
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "enable.partition.eof",
];

impl KafkaSourceOptions {
    /// Options for `topics` on `brokers`, read in consumer group `group`, starting at the
    /// earliest records.
    pub fn new(brokers: impl Into<String>, group: impl Into<String>, topics: &[&str]) -> Self {
        KafkaSourceOptions {
            brokers: brokers.into(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            topic_pattern: None,
            group: group.into(),
            start: StartPosition::Earliest,
            key_column: None,
            headers_column: None,
            timestamp_column: None,
            properties: BTreeMap::new(),
        }
    }

    /// Checks the options without I/O, naming the field at fault.
    pub fn validate(&self) -> Result<()> {
        if self.brokers.trim().is_empty() {
            return Err(Error::invalid_config("kafka.brokers", "is blank"));
        }
        if self.group.trim().is_empty() {
            return Err(Error::invalid_config("kafka.group", "is blank"));
        }
        match (&self.topic_pattern, self.topics.is_empty()) {
            (None, true) => {
                return Err(Error::invalid_config(
                    "kafka.topics",
                    "names no topic: give `topics` or `topic_pattern`",
                ));
            }
            (Some(_), false) => {
                return Err(Error::invalid_config(
                    "kafka.topic_pattern",
                    "give either `topics` or `topic_pattern`, not both",
                ));
            }
            (Some(pattern), true) if pattern.trim().is_empty() => {
                return Err(Error::invalid_config("kafka.topic_pattern", "is blank"));
            }
            _ => {}
        }
        if let Some(topic) = self.topics.iter().find(|t| t.trim().is_empty()) {
            return Err(Error::invalid_config(
                "kafka.topics",
                format!("a topic name is blank ({topic:?})"),
            ));
        }
        for (field, column) in [
            ("kafka.key_column", &self.key_column),
            ("kafka.headers_column", &self.headers_column),
            ("kafka.timestamp_column", &self.timestamp_column),
        ] {
            if let Some(column) = column
                && column.trim().is_empty()
            {
                return Err(Error::invalid_config(field, "is blank"));
            }
        }
        let columns = [
            ("key_column", &self.key_column),
            ("headers_column", &self.headers_column),
            ("timestamp_column", &self.timestamp_column),
        ];
        for (i, (field, column)) in columns.iter().enumerate() {
            if let Some((other, _)) = columns[..i].iter().find(|(_, c)| column.is_some() && c == column) {
                return Err(Error::invalid_config(
                    &format!("kafka.{field}"),
                    format!("names the same column as {other}"),
                ));
            }
        }
        if let Some(key) = self.properties.keys().find(|k| OWNED.contains(&k.as_str())) {
            return Err(Error::invalid_config(
                &format!("kafka.properties.{key}"),
                "is set by the source itself (use `brokers`, `group` and `start`)",
            ));
        }
        Ok(())
    }

    /// What the consumer subscribes to: the topics, or the pattern in librdkafka's form (a
    /// leading `^`).
    pub(crate) fn subscription(&self) -> Vec<String> {
        match &self.topic_pattern {
            Some(pattern) if pattern.starts_with('^') => vec![pattern.clone()],
            Some(pattern) => vec![format!("^{pattern}")],
            None => self.topics.clone(),
        }
    }
}

/// Whether a librdkafka setting holds a secret: its value is never printed.
pub fn is_secret(key: &str) -> bool {
    ["password", "secret", "token", "key"]
        .iter()
        .any(|word| key.contains(word))
        && !key.ends_with(".location")
}

impl fmt::Debug for KafkaSourceOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let properties: BTreeMap<&str, &str> = self
            .properties
            .iter()
            .map(|(k, v)| (k.as_str(), if is_secret(k) { "<redacted>" } else { v.as_str() }))
            .collect();
        f.debug_struct("KafkaSourceOptions")
            .field("brokers", &self.brokers)
            .field("topics", &self.topics)
            .field("topic_pattern", &self.topic_pattern)
            .field("group", &self.group)
            .field("start", &self.start)
            .field("key_column", &self.key_column)
            .field("headers_column", &self.headers_column)
            .field("timestamp_column", &self.timestamp_column)
            .field("properties", &properties)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_name_the_field_at_fault() {
        let ok = KafkaSourceOptions::new("127.0.0.1:9092", "g", &["t"]);
        ok.validate().unwrap();
        let cases: Vec<(KafkaSourceOptions, &str)> = vec![
            (
                KafkaSourceOptions {
                    brokers: " ".into(),
                    ..ok.clone()
                },
                "kafka.brokers",
            ),
            (
                KafkaSourceOptions {
                    group: "".into(),
                    ..ok.clone()
                },
                "kafka.group",
            ),
            (
                KafkaSourceOptions {
                    topics: vec![],
                    ..ok.clone()
                },
                "kafka.topics",
            ),
            (
                KafkaSourceOptions {
                    topics: vec!["".into()],
                    ..ok.clone()
                },
                "kafka.topics",
            ),
            (
                KafkaSourceOptions {
                    topic_pattern: Some("o.*".into()),
                    ..ok.clone()
                },
                "kafka.topic_pattern",
            ),
            (
                KafkaSourceOptions {
                    key_column: Some(" ".into()),
                    ..ok.clone()
                },
                "kafka.key_column",
            ),
            (
                KafkaSourceOptions {
                    properties: [("enable.auto.commit".to_string(), "true".to_string())].into(),
                    ..ok.clone()
                },
                "kafka.properties.enable.auto.commit",
            ),
        ];
        for (options, field) in cases {
            let err = options.validate().unwrap_err();
            assert_eq!(err.context_value("field"), Some(field), "{err}");
        }
    }

    #[test]
    fn a_pattern_subscribes_as_a_regex() {
        let mut options = KafkaSourceOptions::new("b:1", "g", &[]);
        options.topic_pattern = Some("orders-.*".into());
        options.validate().unwrap();
        assert_eq!(options.subscription(), ["^orders-.*"]);
        options.topic_pattern = Some("^x".into());
        assert_eq!(options.subscription(), ["^x"]);
    }

    #[test]
    fn secrets_are_never_printed() {
        let mut options = KafkaSourceOptions::new("b:1", "g", &["t"]);
        options.properties = [
            ("sasl.password", "hunter2"),
            ("ssl.key.password", "k3y"),
            ("sasl.oauthbearer.client.secret", "s3cret"),
            ("ssl.ca.location", "/etc/ca.pem"),
            ("sasl.username", "alice"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let printed = format!("{options:?}");
        for secret in ["hunter2", "k3y", "s3cret"] {
            assert!(!printed.contains(secret), "{printed}");
        }
        assert!(
            printed.contains("alice") && printed.contains("/etc/ca.pem"),
            "{printed}"
        );
    }

    #[test]
    fn the_start_reads_from_yaml_words() {
        let parsed: StartPosition = serde_json::from_str(r#""latest""#).unwrap();
        assert_eq!(parsed, StartPosition::Latest);
        let parsed: StartPosition = serde_json::from_str(r#"{"timestamp": 5}"#).unwrap();
        assert_eq!(parsed, StartPosition::Timestamp(5));
    }
}
