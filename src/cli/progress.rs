//! What a person sees on stderr while a room operation runs: its notices,
//! its progress and the output of what it runs for them, drawn from the
//! [`Event`]s it hands back. On a terminal, one indicatif line per piece of
//! work (a layer, a feature, an upload) with what it does now, its outcome
//! left as a ✓/✗ line above the live ones, and every other line printed
//! above them too, so nothing is drawn over; otherwise plain lines, one per
//! beginning and end. Everything goes to stderr: `--json` keeps stdout for
//! the result alone.

use crate::notices::{Event, Progress, TaskId};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a spinner redraws: often enough to look alive, rarely enough
/// to cost nothing next to a build.
const TICK: Duration = Duration::from_millis(120);

/// How often the bars may be redrawn at most (indicatif's rate limit).
const DRAWS_PER_SECOND: u8 = 10;

/// The drawing of one command's operations on stderr.
pub struct Stderr {
    /// `None`: plain lines (stderr is not a terminal).
    multi: Option<MultiProgress>,
    bars: Mutex<HashMap<TaskId, ProgressBar>>,
}

impl Stderr {
    /// Bars when stderr is a terminal, plain lines otherwise.
    pub fn new() -> Arc<Stderr> {
        let multi = std::io::stderr()
            .is_terminal()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(DRAWS_PER_SECOND)));
        Arc::new(Stderr { multi, bars: Mutex::default() })
    }

    /// `event` as it should look: notices as their line, progress as bars
    /// or lines, output as written.
    pub fn show(&self, event: Event<'_>) {
        match event {
            Event::Notice(n) => self.line(&n.to_string()),
            Event::Progress(p) => self.progress(p),
            Event::Output(bytes) => self.output(bytes),
        }
    }

    /// A line above the live bars, or a plain one.
    pub fn line(&self, text: &str) {
        match &self.multi {
            Some(multi) => {
                // A terminal gone away leaves nothing to say it on.
                let _ = multi.println(text);
            }
            None => eprintln!("{text}"),
        }
    }

    fn output(&self, bytes: &[u8]) {
        let write = || {
            let _ = std::io::stderr().lock().write_all(bytes);
        };
        match &self.multi {
            // The bars step aside while the bytes go out, then are drawn
            // again below them.
            Some(multi) => multi.suspend(write),
            None => write(),
        }
    }

    fn progress(&self, p: &Progress) {
        let Some(multi) = &self.multi else { return self.plain(p) };
        let mut bars = workroomd::locks::lock(&self.bars);
        match p {
            Progress::Began { task, label } => {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("{spinner:.cyan} {prefix} {wide_msg:.dim}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_prefix(label.clone());
                bar.enable_steady_tick(TICK);
                bars.insert(*task, bar);
            }
            Progress::Doing { task, text } => {
                if let Some(bar) = bars.get(task) {
                    bar.set_message(text.trim().to_string());
                }
            }
            // The bar goes; its outcome stays as a line above the live ones
            // (a finished bar left in place is redrawn over by what follows).
            Progress::Ended { task, ok, text, took } => {
                if let Some(bar) = bars.remove(task) {
                    bar.finish_and_clear();
                    multi.remove(&bar);
                }
                let mark = if *ok { '✓' } else { '✗' };
                let _ = multi.println(format!("{mark} {text} ({})", seconds(*took)));
            }
            Progress::Summary { text, took, .. } => {
                let _ = multi.println(format!("{text} in {}", seconds(*took)));
            }
        }
    }

    /// Plain lines: a beginning says its label, an end its outcome; what a
    /// piece of work does meanwhile is for a terminal only.
    fn plain(&self, p: &Progress) {
        match p {
            Progress::Began { label, .. } => eprintln!("{label}"),
            Progress::Doing { .. } => {}
            Progress::Ended { text, took, .. } => eprintln!("{text} ({})", seconds(*took)),
            Progress::Summary { terminal_only: true, .. } => {}
            Progress::Summary { text, took, .. } => eprintln!("{text} in {}", seconds(*took)),
        }
    }
}

/// A piece of work left unended (its operation failed on the way) would
/// spin on; its bar goes with the drawing.
impl Drop for Stderr {
    fn drop(&mut self) {
        for (_, bar) in workroomd::locks::lock(&self.bars).drain() {
            bar.finish_and_clear();
        }
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}
