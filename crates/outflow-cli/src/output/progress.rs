//! The progress bar on stderr: bytes read against the source's size, files and rows.
//!
//! Progress is for people watching a terminal; it is hidden when stderr is not one (a
//! pipe, a CI log) or with `--quiet`, so logs and scripts see only the summary.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{HumanCount, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Progress of reading (and writing) a source.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    files: AtomicU64,
    total_files: AtomicU64,
    rows: AtomicU64,
}

impl Progress {
    /// A progress bar on stderr, shown only when stderr is a terminal and `quiet` is off.
    pub fn on_stderr(quiet: bool) -> Progress {
        let visible = !quiet && std::io::stderr().is_terminal();
        Progress::with_target(if visible {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        })
    }

    /// Progress that is counted but never drawn.
    pub fn hidden() -> Progress {
        Progress::with_target(ProgressDrawTarget::hidden())
    }

    fn with_target(target: ProgressDrawTarget) -> Progress {
        let bar = ProgressBar::with_draw_target(None, target);
        Progress {
            bar,
            files: AtomicU64::new(0),
            total_files: AtomicU64::new(0),
            rows: AtomicU64::new(0),
        }
    }

    /// Starts the bar: `verb` says what is happening (`writing`, `reading`).
    pub fn start(&self, verb: &str, total_bytes: u64, total_files: usize) {
        self.total_files.store(total_files as u64, Ordering::Relaxed);
        // The style first: setting the length draws, and must draw in this style.
        self.bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {prefix} [{wide_bar}] {bytes}/{total_bytes} ({eta}) {msg}",
            )
            .expect("the template is valid")
            .progress_chars("=> "),
        );
        self.bar.set_prefix(verb.to_string());
        self.update_message();
        self.bar.set_length(total_bytes);
        self.bar.enable_steady_tick(Duration::from_millis(200));
    }

    /// Counts a batch of `rows` that advanced `bytes` into the source.
    pub fn batch(&self, rows: u64, bytes: u64) {
        self.rows.fetch_add(rows, Ordering::Relaxed);
        self.bar.inc(bytes);
        self.update_message();
    }

    /// Counts a finished file and the `bytes` of it not yet counted.
    pub fn file_done(&self, bytes: u64) {
        self.files.fetch_add(1, Ordering::Relaxed);
        self.bar.inc(bytes);
        self.update_message();
    }

    /// Says what is happening after reading (`flushing`, `closing`).
    pub fn stage(&self, verb: &str) {
        self.bar.set_prefix(verb.to_string());
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn update_message(&self) {
        self.bar.set_message(format!(
            "{}/{} files, {} rows",
            self.files.load(Ordering::Relaxed),
            self.total_files.load(Ordering::Relaxed),
            HumanCount(self.rows.load(Ordering::Relaxed))
        ));
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // An error part way leaves no half-drawn bar above its message.
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}
