//! Exit codes, so scripts can tell a bad job file from a failed run from rejected records.

use outflow_core::{Error, ErrorKind};

/// How `outflow` ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: everything was written.
    Ok,
    /// 1: the run failed: a file could not be read or parsed, a value did not convert,
    /// the sink or its service failed.
    Failed,
    /// 2: usage: bad arguments, or a job file that cannot run as written (it does not
    /// parse, names an unknown key, lacks a variable, its source path matches no file, a
    /// transform names a missing column, a sink option is invalid).
    Usage,
    /// 3: the command finished, but some inputs were rejected and not written, each listed
    /// with its reason: records for `run` (in the dead-letter file, or listed in the error
    /// when there is none), files for `iceberg add-files`.
    Rejected,
    /// 130: stopped by Ctrl-C (128 + SIGINT, as shells report it) before it finished.
    Interrupted,
}

/// The exit codes as every `--help` shows them: one meaning per code, whatever the command.
pub const EXIT_CODES_HELP: &str = "\
Exit codes (the same for every outflow command):
  0   ok: done, every input written (plan, check, --dry-run: nothing would fail)
  1   failed: the command could not finish: a source file could not be read or parsed, a
      value did not convert, a destination or change was refused, or the service failed
  2   usage: bad arguments, or a job or options file that cannot run as written (syntax,
      unknown key, missing variable, source path matching no file, unknown column,
      invalid option, missing credentials)
  3   rejected: finished, but some inputs were rejected and not written, each listed with
      its reason: records for run (in the dead_letter file), files for iceberg add-files
  130 interrupted: stopped by Ctrl-C; what was not committed is removed";

/// `text` (a command's examples and notes) followed by [`EXIT_CODES_HELP`], as every
/// subcommand's `after_help`.
pub fn after_help(text: &str) -> String {
    format!("{text}\n\n{EXIT_CODES_HELP}")
}

impl ExitStatus {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Ok => 0,
            ExitStatus::Failed => 1,
            ExitStatus::Usage => 2,
            ExitStatus::Rejected => 3,
            ExitStatus::Interrupted => 130,
        }
    }

    /// The status an error ends the process with: the job file's fault
    /// ([`ErrorKind::InvalidConfig`]) is a usage error, rejected records are
    /// [`ExitStatus::Rejected`], anything else a failure.
    pub fn of(err: &Error) -> ExitStatus {
        match err.kind() {
            ErrorKind::InvalidConfig => ExitStatus::Usage,
            ErrorKind::RejectedRecords => ExitStatus::Rejected,
            ErrorKind::Interrupted => ExitStatus::Interrupted,
            _ => ExitStatus::Failed,
        }
    }

    /// The status's name in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            ExitStatus::Ok => "ok",
            ExitStatus::Failed => "failed",
            ExitStatus::Usage => "usage",
            ExitStatus::Rejected => "rejected",
            ExitStatus::Interrupted => "interrupted",
        }
    }
}

impl From<ExitStatus> for std::process::ExitCode {
    fn from(status: ExitStatus) -> Self {
        std::process::ExitCode::from(status.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_codes() {
        assert_eq!(
            ExitStatus::of(&Error::invalid_config("source.path", "x")).code(),
            2
        );
        assert_eq!(ExitStatus::of(&Error::invalid_input("bad row")).code(), 1);
        assert_eq!(ExitStatus::of(&Error::not_found("table", "db.t")).code(), 1);
        assert_eq!(
            ExitStatus::of(&Error::new(ErrorKind::RejectedRecords, "3 rejected")).code(),
            3
        );
    }
}
