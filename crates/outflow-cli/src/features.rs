//! What this `outflow` was built with. Each sink, the DataFusion engine and the Ballista
//! client are Cargo features; a job that needs one this build left out fails as a bad job
//! file (exit 2), and the error says which command builds it.

use outflow_core::Error;

/// The error for a job that needs `feature`, which this build left out; `what` says what
/// of the job needs it.
pub fn missing(feature: &str, what: &str) -> Error {
    Error::invalid_config(
        what,
        format!("this outflow was built without {feature} (Cargo feature `{feature}`)"),
    )
    .with_context("feature", feature.to_string())
}

/// The Cargo feature an error says this build lacks: named in its context, or, for a sink
/// section that could not be parsed, in its message.
pub fn missing_feature(err: &Error) -> Option<String> {
    if let Some(feature) = err.context_value("feature") {
        return Some(feature.to_string());
    }
    outflow_sinks::missing_feature(err.message()).map(|sink| sink.name.to_string())
}

/// The command that builds an `outflow` with `feature` and runs `args` (this invocation's
/// arguments) with it.
pub fn build_command(feature: &str, args: &[String]) -> String {
    let args: Vec<String> = args.iter().map(|a| quoted(a)).collect();
    format!(
        "cargo run -p outflow-cli --features {feature} -- {}",
        args.join(" ")
    )
}

/// `arg` as a shell word.
fn quoted(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_feature_comes_with_the_command_that_builds_it() {
        let err = missing("engine", "engine");
        assert_eq!(missing_feature(&err).as_deref(), Some("engine"));
        assert!(err.message().contains("Cargo feature `engine`"), "{err}");
        let args = ["run".to_string(), "jobs/my job.yaml".to_string()];
        assert_eq!(
            build_command("engine", &args),
            "cargo run -p outflow-cli --features engine -- run 'jobs/my job.yaml'"
        );
        let parsed = Error::invalid_config(
            "sink",
            "job.yaml: line 3: this program was built without the bigquery sink (Cargo feature `bigquery`)",
        );
        let sink_missing = outflow_sinks::SINKS
            .iter()
            .any(|s| s.name == "bigquery" && !s.built);
        assert_eq!(missing_feature(&parsed).is_some(), sink_missing);
    }
}
