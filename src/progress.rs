//! What a person sees while `up` pulls, fetches and builds: on a terminal,
//! one indicatif line per layer or feature, then a one-line summary with the
//! time taken; otherwise plain lines. Everything goes to stderr, so `--json`
//! keeps stdout for the result alone.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How often a spinner redraws: often enough to look alive, rarely enough
/// to cost nothing next to a build.
const TICK: Duration = Duration::from_millis(120);

#[derive(Clone)]
pub struct Progress {
    /// `None`: plain lines (stderr is not a terminal).
    multi: Option<MultiProgress>,
    started: Instant,
}

impl Progress {
    /// Bars when stderr is a terminal, plain lines otherwise.
    pub fn stderr() -> Progress {
        let multi = std::io::stderr()
            .is_terminal()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(10)));
        Progress { multi, started: Instant::now() }
    }

    pub fn is_terminal(&self) -> bool {
        self.multi.is_some()
    }

    /// A line of work: a spinner with `label` on a terminal, a plain
    /// `label` line otherwise.
    pub fn task(&self, label: impl Into<String>) -> Task {
        let label = label.into();
        let bar = match &self.multi {
            Some(multi) => {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("{spinner:.cyan} {prefix} {wide_msg:.dim}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_prefix(label.clone());
                bar.enable_steady_tick(TICK);
                Some(bar)
            }
            None => {
                eprintln!("{label}");
                None
            }
        };
        Task { bar, multi: self.multi.clone(), started: Instant::now() }
    }

    /// A line printed above the bars (or plainly).
    pub fn println(&self, line: &str) {
        match &self.multi {
            Some(multi) => {
                let _ = multi.println(line);
            }
            None => eprintln!("{line}"),
        }
    }

    /// The closing line, with the time since this progress began.
    pub fn summary(&self, text: &str) {
        self.println(&format!("{text} in {}", seconds(self.started.elapsed())));
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

pub struct Task {
    bar: Option<ProgressBar>,
    multi: Option<MultiProgress>,
    started: Instant,
}

impl Task {
    /// What the task is doing now (a terminal shows it; plain output does not
    /// repeat it, the caller prints what matters).
    pub fn message(&self, text: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(text.trim().to_string());
        }
    }

    /// Done: a ✓ line saying `text`, with the time taken.
    pub fn finish(self, text: &str) {
        self.end('✓', text);
    }

    /// Failed: a ✗ line saying `text`.
    pub fn fail(self, text: &str) {
        self.end('✗', text);
    }

    fn end(self, mark: char, text: &str) {
        let line = format!("{text} ({})", seconds(self.started.elapsed()));
        match (&self.bar, &self.multi) {
            // The bar goes; its outcome stays as a line above the live ones
            // (a finished bar left in place is redrawn over by what follows).
            (Some(bar), Some(multi)) => {
                bar.finish_and_clear();
                let _ = multi.println(format!("{mark} {line}"));
            }
            _ => eprintln!("{line}"),
        }
    }
}

/// A pull's layers, one line each: the engine's status for it (`Downloading`
/// with bytes, `Extracting`, `Pull complete`, `Already exists`).
#[derive(Default)]
pub struct Layers {
    tasks: Vec<(String, Option<Task>)>,
}

impl Layers {
    pub fn update(&mut self, progress: &Progress, id: &str, status: &str, current: Option<i64>, total: Option<i64>) {
        // The first lines name the tag or the digest, not a layer.
        if status.starts_with("Pulling from") || status.starts_with("Digest:") || status.starts_with("Status:") {
            return;
        }
        let at = match self.tasks.iter().position(|(l, _)| l == id) {
            Some(at) => at,
            None => {
                self.tasks.push((id.to_string(), Some(progress.task(format!("layer {id}")))));
                self.tasks.len() - 1
            }
        };
        let done = status == "Pull complete" || status == "Already exists";
        let slot = &mut self.tasks[at].1;
        match (done, slot.take()) {
            (true, Some(task)) => task.finish(&format!("layer {id}: {}", status.to_lowercase())),
            (false, Some(task)) => {
                let bytes = match (current, total) {
                    (Some(c), Some(t)) if t > 0 => format!(" {} / {} KiB", c / 1024, t / 1024),
                    _ => String::new(),
                };
                task.message(&format!("{status}{bytes}"));
                *slot = Some(task);
            }
            (_, None) => {}
        }
    }

    /// Ends the lines the engine never said were complete.
    pub fn finish_all(&mut self) {
        for (_, task) in &mut self.tasks {
            if let Some(task) = task.take() {
                task.finish("layer pulled");
            }
        }
    }
}
