//! `${VAR}` substitution in job files, done on the text before it is parsed.
//!
//! Secrets and endpoints differ between machines while the job file does not, so a job file
//! names them as `${VAR}` (or `${VAR:-default}`, the default used when `VAR` is unset or
//! empty) and the value comes from the environment. Substituting the text before parsing
//! lets a variable fill any scalar, numbers and booleans included, and keeps the parser's
//! line numbers: a value never holds a line break, so every line stays where it was.
//!
//! Values are inserted as they are. A value that may hold YAML's special characters (`#`,
//! `: `, a leading `*`, `&` or `!`) belongs in quotes: `token: '${TOKEN}'`.
//!
//! Because a value may be a secret, nothing that is printed should show it: a
//! [`Substituted`] text remembers what it replaced, and [`Substituted::redact`] turns any
//! value back into `${VAR}`. Except endpoints: an error must say where it failed, and the
//! `${PORT:-9050}` a job file holds says nothing of the port it ran with. So a value that can
//! only be an endpoint (a port number, an IP address, `host:port`, or an `http`, `https` or
//! `grpc` URL without user, query or fragment) is shown as it is, unless its variable's name
//! says it is secret (`TOKEN`, `SECRET`, `PASS`, `KEY`, `CRED`, `AUTH`, `PIN` in it). A bare word
//! is not taken for a host name: it could be a password. Lines whose first non-blank
//! character is `#` are comments and are left alone, so a commented-out line does not need
//! its variable. `$${` writes a literal `${`.

use outflow_core::{Error, ErrorKind, Result};

/// Values shorter than this are not redacted: they are not secrets, and replacing every `1`
/// in a message would garble it.
const MIN_REDACTED_LEN: usize = 4;

/// A job file's text after substitution, and what was substituted.
#[derive(Clone, PartialEq, Eq)]
pub struct Substituted {
    text: String,
    /// (`${VAR}`, the value it became) for each value to redact.
    replaced: Vec<(String, String)>,
}

impl std::fmt::Debug for Substituted {
    // The text holds the values, so it is left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let placeholders: Vec<&str> = self.replaced.iter().map(|(p, _)| p.as_str()).collect();
        f.debug_struct("Substituted")
            .field("placeholders", &placeholders)
            .finish_non_exhaustive()
    }
}

impl Substituted {
    /// The text with every variable replaced.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// `message` with every substituted value (of four characters or more) that may be a
    /// secret replaced by the `${VAR}` it came from.
    pub fn redact(&self, message: &str) -> String {
        let mut values: Vec<&(String, String)> = self
            .replaced
            .iter()
            .filter(|(_, value)| value.len() >= MIN_REDACTED_LEN)
            .collect();
        // Longest first, so a value that contains another is replaced whole.
        values.sort_by_key(|(_, value)| std::cmp::Reverse(value.len()));
        let mut out = message.to_string();
        for (placeholder, value) in values {
            out = out.replace(value.as_str(), placeholder);
        }
        out
    }
}

/// Replaces `${VAR}` and `${VAR:-default}` in `text`, reading variables through `lookup`.
///
/// Fails, naming the variable and the line, when a variable without default is unset, when
/// a value holds a line break, or when a `${` is not closed or names no valid variable
/// (letters, digits and `_`, not starting with a digit). Error messages never show values.
pub fn substitute(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<Substituted> {
    let mut out = String::with_capacity(text.len());
    let mut replaced: Vec<(String, String)> = Vec::new();
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let number = index + 1;
        if line.trim_start().starts_with('#') {
            out.push_str(line);
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at..];
            if let Some(escaped) = after.strip_prefix("$${") {
                out.push_str("${");
                rest = escaped;
                continue;
            }
            if !after.starts_with("${") {
                out.push('$');
                rest = &after[1..];
                continue;
            }
            let end = after.find('}').ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!("line {number}: a `${{` is not closed by `}}`"),
                )
                .with_context("line", number.to_string())
            })?;
            let placeholder = &after[..=end];
            let inner = &after[2..end];
            let (name, default) = match inner.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (inner, None),
            };
            if !is_variable_name(name) {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "line {number}: `{placeholder}` does not name a variable (letters, digits and `_`)"
                    ),
                )
                .with_context("line", number.to_string()));
            }
            let value = match (lookup(name).filter(|v| !v.is_empty()), default) {
                (Some(value), _) => {
                    if value.contains(['\n', '\r']) {
                        return Err(Error::new(
                            ErrorKind::InvalidConfig,
                            format!(
                                "line {number}: the value of environment variable {name} holds a line break, \
                                 which a job file cannot take; pass a file path instead"
                            ),
                        )
                        .with_context("variable", name));
                    }
                    if may_be_secret(name, &value) {
                        replaced.push((format!("${{{name}}}"), value.clone()));
                    }
                    value
                }
                (None, Some(default)) => default.to_string(),
                (None, None) => {
                    return Err(Error::new(
                        ErrorKind::InvalidConfig,
                        format!(
                            "line {number}: environment variable {name} is not set \
                             (write `${{{name}:-default}}` to give a default)"
                        ),
                    )
                    .with_context("variable", name)
                    .with_context("line", number.to_string()));
                }
            };
            out.push_str(&value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
    }
    Ok(Substituted { text: out, replaced })
}

/// Whether the value of variable `name` must be hidden in messages: anything but an
/// endpoint, and even an endpoint when the name says it is secret.
fn may_be_secret(name: &str, value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let secret_name = ["TOKEN", "SECRET", "PASS", "KEY", "CRED", "AUTH", "PIN"]
        .iter()
        .any(|word| upper.contains(word));
    secret_name || !is_endpoint(value)
}

/// A port number, an IP address, `host:port`, or a URL of a network service with nothing
/// but a host, a port and a path.
fn is_endpoint(value: &str) -> bool {
    if is_port(value) || value.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    if let Some((host, port)) = value.rsplit_once(':')
        && is_port(port)
        && (host == "localhost" || host.contains('.'))
        && is_host(host)
    {
        return true;
    }
    let Some((scheme, rest)) = value.split_once("://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    ["http", "https", "grpc", "grpcs"].contains(&scheme)
        && !value.contains(['?', '#', '@'])
        && match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(':') => is_port(port) && is_host(host),
            _ => is_host(authority),
        }
}

fn is_port(text: &str) -> bool {
    text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit()) && text.parse::<u16>().is_ok_and(|n| n > 0)
}

/// A DNS name or an IP address (IPv6 in brackets).
fn is_host(host: &str) -> bool {
    let label = |l: &str| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    host.split('.').all(label)
        || host.parse::<std::net::IpAddr>().is_ok()
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok())
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn replaces_variables_and_defaults() {
        let s = substitute(
            "a: ${HOST}:${PORT:-8080}/x\nb: ${EMPTY:-fallback}\nc: $5 and $${literal}\n",
            vars(&[("HOST", "db.local"), ("EMPTY", "")]),
        )
        .unwrap();
        assert_eq!(
            s.text(),
            "a: db.local:8080/x\nb: fallback\nc: $5 and ${literal}\n"
        );
    }

    #[test]
    fn a_missing_variable_is_named_with_its_line() {
        let err = substitute("a: 1\nb: ${NOPE}\n", vars(&[])).unwrap_err();
        assert!(err.message().contains("line 2"), "{err}");
        assert!(err.message().contains("NOPE is not set"), "{err}");
        assert_eq!(err.context_value("variable"), Some("NOPE"));
    }

    #[test]
    fn comment_lines_are_left_alone() {
        let s = substitute("  # set ${TOKEN} first\na: 1\n", vars(&[])).unwrap();
        assert_eq!(s.text(), "  # set ${TOKEN} first\na: 1\n");
    }

    #[test]
    fn malformed_placeholders_are_rejected() {
        let err = substitute("a: ${OPEN\n", vars(&[])).unwrap_err();
        assert!(err.message().contains("not closed"), "{err}");
        let err = substitute("a: ${1BAD}\n", vars(&[])).unwrap_err();
        assert!(
            err.message().contains("`${1BAD}` does not name a variable"),
            "{err}"
        );
    }

    #[test]
    fn values_with_line_breaks_are_refused_without_showing_them() {
        let err = substitute("key: ${KEY}\n", vars(&[("KEY", "line one\nline two")])).unwrap_err();
        assert!(err.message().contains("KEY holds a line break"), "{err}");
        assert!(!err.to_string().contains("line one"), "{err}");
    }

    #[test]
    fn endpoints_are_shown_as_they_ran_and_secrets_never() {
        let s = substitute(
            "uri: http://127.0.0.1:${REST:-9050}\nother: ${URI}\ngrpc: ${HOST}\nkey: ${API_KEY}\n\
             pw: ${DB}\nwithuser: ${WITH_USER}\nquery: ${SIGNED}\n",
            vars(&[
                ("REST", "9051"),
                ("URI", "https://catalog.example.com/v1"),
                ("HOST", "bq.internal:9060"),
                ("API_KEY", "http://127.0.0.1:8080"),
                ("DB", "hunter22"),
                ("WITH_USER", "http://me:pw@host.example"),
                ("SIGNED", "https://b.example/o?sig=abcd"),
            ]),
        )
        .unwrap();
        let message = format!(
            "the REST catalog at {} answered HTTP 500",
            "http://127.0.0.1:9051"
        );
        assert_eq!(s.redact(&message), message, "the real port, not ${{REST:-9050}}");
        assert_eq!(
            s.redact("https://catalog.example.com/v1 and bq.internal:9060"),
            "https://catalog.example.com/v1 and bq.internal:9060"
        );
        assert_eq!(s.redact("at http://127.0.0.1:8080"), "at ${API_KEY}");
        assert_eq!(s.redact("bad password hunter22"), "bad password ${DB}");
        assert_eq!(s.redact("http://me:pw@host.example"), "${WITH_USER}");
        assert_eq!(s.redact("https://b.example/o?sig=abcd"), "${SIGNED}");
    }

    #[test]
    fn a_redacted_value_shows_its_variable_not_its_default() {
        let s = substitute("token: ${TOKEN:-none}\n", vars(&[("TOKEN", "s3cr3t-token")])).unwrap();
        assert_eq!(s.redact("bad token s3cr3t-token"), "bad token ${TOKEN}");
    }

    #[test]
    fn redaction_puts_the_placeholder_back() {
        let s = substitute(
            "token: ${TOKEN}\nport: ${PORT}\n",
            vars(&[("TOKEN", "hunter22-secret"), ("PORT", "1")]),
        )
        .unwrap();
        assert_eq!(
            s.redact("invalid type: string \"hunter22-secret\" at line 1"),
            "invalid type: string \"${TOKEN}\" at line 1"
        );
        assert!(!format!("{s:?}").contains("hunter22"));
    }
}
