//! Readers kept running for a whole test binary.
//!
//! Starting the Java reader costs about five seconds of CPU (the JVM and Iceberg's classes)
//! and PyIceberg about two; a test binary reads dozens of tables. A [`ServedReader`] starts
//! its tool once with `serve` and sends it one request per line (the subcommand's arguments,
//! separated by tabs); the tool answers one line, `{"ok": true, "doc": ...}` or
//! `{"ok": false, "error": ...}`. Requests to one tool are sent one at a time; the tool
//! ends when the test binary does (its stdin closes). The tool's stderr goes to a file in
//! the temporary directory, named in every failure.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

/// A tool started on first use and kept for the rest of the test binary.
pub struct ServedReader {
    name: &'static str,
    running: Mutex<Option<Running>>,
}

struct Running {
    // Kept so the process is not reaped early; it ends when stdin closes.
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    log: PathBuf,
}

impl ServedReader {
    /// A reader called `name` (in failures and its log file's name), not started yet.
    pub const fn new(name: &'static str) -> ServedReader {
        ServedReader {
            name,
            running: Mutex::new(None),
        }
    }

    /// Sends one request and returns the document the tool answered; `start` makes the
    /// command that runs the tool with `serve` the first time. Panics with the tool's error
    /// when it fails, as a test should.
    pub fn request(&self, start: impl FnOnce() -> Command, args: &[String]) -> Value {
        self.try_request(start, args)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// The same, with the tool's error (naming the request and the tool's log) returned
    /// rather than panicked on, for a test that expects some requests to fail (reading a
    /// table that may not exist). Panics when the tool itself stops answering.
    pub fn try_request(&self, start: impl FnOnce() -> Command, args: &[String]) -> Result<Value, String> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if running.is_none() {
            *running = Some(self.start(start()));
        }
        let tool = running.as_mut().expect("started above");
        let line = args.join("\t");
        assert!(
            !line.contains('\n'),
            "{} request arguments must be on one line: {args:?}",
            self.name
        );
        let mut answer = String::new();
        let sent = writeln!(tool.stdin, "{line}").and_then(|_| tool.stdin.flush());
        let read = sent.and_then(|_| tool.stdout.read_line(&mut answer));
        if matches!(read, Ok(0) | Err(_)) {
            let log = tool.log.clone();
            *running = None;
            panic!(
                "the {} reader stopped answering ({read:?}) to {args:?}; its log: {}",
                self.name,
                log.display()
            );
        }
        let answer: Value = serde_json::from_str(answer.trim())
            .unwrap_or_else(|e| panic!("the {} reader answered invalid JSON ({e}): {answer}", self.name));
        if answer["ok"] != Value::Bool(true) {
            return Err(format!(
                "the {} reader failed on {args:?}: {}\n(its log: {})",
                self.name,
                answer["error"].as_str().unwrap_or("no message"),
                tool.log.display()
            ));
        }
        Ok(answer["doc"].clone())
    }

    fn start(&self, mut command: Command) -> Running {
        let log =
            std::env::temp_dir().join(format!("outflow-{}-reader-{}.log", self.name, std::process::id()));
        let stderr =
            std::fs::File::create(&log).unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {} reader {command:?}: {e}", self.name));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Running {
            _child: child,
            stdin,
            stdout,
            log,
        }
    }
}
