//! The progress line on stderr: how far into the source's bytes, rows per second and the
//! time left, then rows, files and bytes.
//!
//! Progress is for people watching a terminal; it is hidden when stderr is not one (a
//! pipe, a CI log) or with `--quiet`, so logs and scripts see only the summary.
//!
//! The line fits the terminal: the pace (`42% 3.2k rows/s eta 1m20s`) comes first and
//! takes at most 40 columns with the stage's name, and the counts after it are cut to the
//! width left, so a narrow terminal shows the pace and a wide one everything.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{HumanBytes, HumanCount, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// Progress of reading (and writing) a source.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    files: AtomicU64,
    total_files: AtomicU64,
    /// Shared with the style, which draws rows per second from it.
    rows: Arc<AtomicU64>,
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
            rows: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Starts the bar: `verb` says what is happening (`writing`, `reading`).
    pub fn start(&self, verb: &str, total_bytes: u64, total_files: usize) {
        self.total_files.store(total_files as u64, Ordering::Relaxed);
        // The style first: setting the length draws, and must draw in this style.
        let rows = self.rows.clone();
        self.bar.set_style(
            ProgressStyle::with_template("{spinner} {prefix} {pace} {wide_msg}")
                .expect("the template is valid")
                .with_key(
                    "pace",
                    move |state: &ProgressState, out: &mut dyn std::fmt::Write| {
                        let pace = Pace {
                            done: state.pos(),
                            total: state.len().unwrap_or(0),
                            rows: rows.load(Ordering::Relaxed),
                            elapsed: state.elapsed(),
                            eta: state.eta(),
                        };
                        let _ = out.write_str(&pace.to_string());
                    },
                ),
        );
        self.bar.set_prefix(verb.to_string());
        self.bar.set_length(total_bytes);
        self.update_message();
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
            "{} rows, {}/{} files, {}/{}",
            HumanCount(self.rows.load(Ordering::Relaxed)),
            self.files.load(Ordering::Relaxed),
            self.total_files.load(Ordering::Relaxed),
            HumanBytes(self.bar.position()),
            HumanBytes(self.bar.length().unwrap_or(0)),
        ));
    }
}

/// The time-dependent part of the line: share of the bytes read, rows per second, time
/// left. At most 28 columns (`99% 999.9k rows/s eta 99h59m`; at 100% the time left is
/// `0s`), so that with the spinner and the longest stage name (`flushing`) it fits 40.
struct Pace {
    done: u64,
    total: u64,
    rows: u64,
    elapsed: Duration,
    eta: Duration,
}

impl std::fmt::Display for Pace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let percent = match self.total {
            0 => 100,
            total => (self.done.min(total) as u128 * 100 / total as u128) as u64,
        };
        write!(f, "{percent}% ")?;
        let seconds = self.elapsed.as_secs_f64();
        if seconds >= 0.5 {
            write!(f, "{} rows/s ", per_second(self.rows as f64 / seconds))?;
        } else {
            f.write_str("- rows/s ")?;
        }
        if self.done >= self.total {
            f.write_str("eta 0s")
        } else if self.done == 0 || seconds < 0.5 {
            f.write_str("eta -")
        } else {
            write!(f, "eta {}", short_duration(self.eta))
        }
    }
}

/// A rate in at most 6 columns: `850`, `3.2k`, `999.9k`, `1.5M`.
fn per_second(rate: f64) -> String {
    let mut out = String::new();
    let _ = match rate {
        r if r < 1_000.0 => write!(out, "{r:.0}"),
        r if r < 999_950.0 => write!(out, "{:.1}k", r / 1e3),
        r if r < 999_950_000.0 => write!(out, "{:.1}M", r / 1e6),
        r => write!(out, "{:.0}G", (r / 1e9).min(999.0)),
    };
    out
}

/// A duration in at most 6 columns: `45s`, `1m20s`, `2h05m`, `99h59m`.
fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => {
            let (h, m) = ((s / 3600).min(99), if s / 3600 > 99 { 59 } else { s % 3600 / 60 });
            format!("{h}h{m:02}m")
        }
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use indicatif::TermLike;

    use super::*;

    /// A terminal `width` columns wide that keeps what is drawn on it.
    #[derive(Debug, Clone)]
    struct Screen {
        width: u16,
        written: Arc<Mutex<Vec<String>>>,
    }

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            self.width
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(s)
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            // Lines, not the spaces that pad them.
            if !s.trim().is_empty() {
                self.written.lock().unwrap().push(s.to_string());
            }
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The last line drawn on a terminal `width` columns wide, part way through the
    /// flushing stage (the longest stage name).
    fn drawn(width: u16) -> String {
        let screen = Screen {
            width,
            written: Arc::default(),
        };
        let progress = Progress::with_target(ProgressDrawTarget::term_like(Box::new(screen.clone())));
        progress.start("reading", 5 * 1024 * 1024, 2);
        progress.batch(12_345, 1024 * 1024);
        progress.file_done(0);
        progress.stage("flushing");
        progress.bar.force_draw();
        let written = screen.written.lock().unwrap();
        written.last().cloned().unwrap_or_default()
    }

    #[test]
    fn the_line_fits_the_terminal_and_keeps_the_pace_first() {
        for width in [40, 80, 200] {
            let line = drawn(width);
            assert!(
                line.chars().count() <= width as usize,
                "{width} columns: {line:?} is {} long",
                line.chars().count()
            );
            assert!(line.contains(" flushing 20% - rows/s eta -"), "{width}: {line:?}");
        }
        assert!(drawn(80).contains("12,345 rows, 1/2 files"), "{}", drawn(80));
        assert!(
            drawn(200).contains("12,345 rows, 1/2 files, 1.00 MiB/5.00 MiB"),
            "{}",
            drawn(200)
        );
        assert!(!drawn(40).contains("files"), "{}", drawn(40));
    }

    #[test]
    fn the_pace_says_rows_per_second_and_the_time_left() {
        let pace = |done, rows, elapsed: u64, eta: u64| {
            Pace {
                done,
                total: 1000,
                rows,
                elapsed: Duration::from_secs(elapsed),
                eta: Duration::from_secs(eta),
            }
            .to_string()
        };
        assert_eq!(pace(250, 64_000, 20, 80), "25% 3.2k rows/s eta 1m20s");
        assert_eq!(pace(500, 1_700, 2, 45), "50% 850 rows/s eta 45s");
        assert_eq!(pace(1000, 3_000_000, 2, 0), "100% 1.5M rows/s eta 0s");
        assert_eq!(pace(0, 0, 0, 0), "0% - rows/s eta -");
        // The longest it gets: 28 columns.
        assert_eq!(
            pace(999, 999_900_000, 1000, 400_000),
            "99% 999.9k rows/s eta 99h59m"
        );
        assert_eq!(short_duration(Duration::from_secs(7_500)), "2h05m");
        assert_eq!(per_second(999_949.0), "999.9k");
        assert_eq!(per_second(999_950.0), "1.0M");
    }
}
