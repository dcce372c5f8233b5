//! What a room operation has to tell the person who asked for it: the
//! warnings, notes and lines of `up` and the steps under it, how its long
//! work goes (a pull's layers, the features' fetches and installs, an
//! upload), and what the programs it runs for the user write (a build, a
//! lifecycle hook).
//!
//! ripgrep's library never prints; its binary does. Code below `cli/`
//! hands each of these to a [`Notices`] as an [`Event`] instead of writing
//! to stderr, and the caller chose what happens to it: `cli/` draws it as
//! it comes (a warning about what a room widens must be out before a long
//! build, not after; progress as bars on a terminal, plain lines
//! otherwise), and every notice is also kept, in order, for the
//! operation's result, so a test pins what `up` said from the returned
//! data, without a terminal.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How a line is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Something the user may want to change (`warning: …`).
    Warning,
    /// Something worth knowing that needs no action (`note: …`).
    Note,
    /// Progress and outcomes, shown as they are.
    Said,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub level: Level,
    pub text: String,
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.level {
            Level::Warning => write!(f, "warning: {}", self.text),
            Level::Note => write!(f, "note: {}", self.text),
            Level::Said => f.write_str(&self.text),
        }
    }
}

/// Which piece of work a [`Progress`] event is about: unique in the
/// process, so one drawing can serve every operation of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(u64);

/// How long work goes, as data: `cli/` draws it, nothing keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// A piece of work began (a layer's pull, a feature's fetch or
    /// install, an upload), named by `label`.
    Began { task: TaskId, label: String },
    /// What it does now (a layer's bytes, a build's last line): for a
    /// terminal, beside the label; plain lines leave it out, since what
    /// matters is said otherwise.
    Doing { task: TaskId, text: String },
    /// It ended, well or not (`ok`), as `text` says, after `took`.
    Ended { task: TaskId, ok: bool, text: String, took: Duration },
    /// A stretch of work is over, as `text` says, after `took` (`pulled
    /// debian in 3.2s`). `terminal_only`: an answer from a cache, worth a
    /// line where a person watches but not in a log.
    Summary { text: String, took: Duration, terminal_only: bool },
}

/// One thing an operation tells its caller, as it happens.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A warning, a note or a line: also kept for the result.
    Notice(&'a Notice),
    Progress(&'a Progress),
    /// Bytes a program run for the user wrote (a build, a lifecycle hook),
    /// as they came, its lines labelled with who wrote them where there can
    /// be several.
    Output(&'a [u8]),
}

type Sink = Box<dyn Fn(Event<'_>) + Send + Sync>;

/// Task ids, from one counter for the process.
static NEXT_TASK: AtomicU64 = AtomicU64::new(1);

/// What one operation said, and where each event goes as it is said.
pub struct Notices {
    kept: Mutex<Vec<Notice>>,
    sink: Option<Sink>,
    keep: bool,
}

impl Notices {
    /// Each event goes to `sink` as it is said, and each notice is kept.
    pub fn new(sink: impl Fn(Event<'_>) + Send + Sync + 'static) -> Notices {
        Notices { kept: Mutex::default(), sink: Some(Box::new(sink)), keep: true }
    }

    /// Each event goes to `sink` and none is kept: for what runs for days
    /// (a forwarder), where keeping would grow without end.
    pub fn streamed(sink: impl Fn(Event<'_>) + Send + Sync + 'static) -> Notices {
        Notices { kept: Mutex::default(), sink: Some(Box::new(sink)), keep: false }
    }

    /// Notices are only kept, the rest goes nowhere (tests; callers that
    /// show them later).
    pub fn kept() -> Notices {
        Notices { kept: Mutex::default(), sink: None, keep: true }
    }

    pub fn warn(&self, text: impl Into<String>) {
        self.say_as(Level::Warning, text.into());
    }

    pub fn note(&self, text: impl Into<String>) {
        self.say_as(Level::Note, text.into());
    }

    pub fn say(&self, text: impl Into<String>) {
        self.say_as(Level::Said, text.into());
    }

    fn say_as(&self, level: Level, text: String) {
        let notice = Notice { level, text };
        if let Some(sink) = &self.sink {
            sink(Event::Notice(&notice));
        }
        if self.keep {
            // A sink that panicked mid-push poisons nothing worth losing:
            // the list is whole after every push.
            workroomd::locks::lock(&self.kept).push(notice);
        }
    }

    /// A piece of work begins: its events follow through the [`Task`].
    pub fn task(&self, label: impl Into<String>) -> Task<'_> {
        let task = TaskId(NEXT_TASK.fetch_add(1, Ordering::Relaxed));
        self.progress(Progress::Began { task, label: label.into() });
        Task { said: self, task, started: Instant::now() }
    }

    /// A stretch of work that began at `started` is over, as `text` says.
    pub fn summary(&self, text: impl Into<String>, started: Instant) {
        self.progress(Progress::Summary { text: text.into(), took: started.elapsed(), terminal_only: false });
    }

    /// [`Notices::summary`] of an answer from a cache: for a terminal only.
    pub fn terminal_summary(&self, text: impl Into<String>, started: Instant) {
        self.progress(Progress::Summary { text: text.into(), took: started.elapsed(), terminal_only: true });
    }

    fn progress(&self, event: Progress) {
        if let Some(sink) = &self.sink {
            sink(Event::Progress(&event));
        }
    }

    /// Bytes a program run for the user wrote.
    pub fn output(&self, bytes: &[u8]) {
        if let Some(sink) = &self.sink {
            sink(Event::Output(bytes));
        }
    }

    /// Every notice said so far, in order, leaving none kept.
    pub fn take(&self) -> Vec<Notice> {
        std::mem::take(&mut *workroomd::locks::lock(&self.kept))
    }
}

/// A piece of work under way; its end is said by [`Task::finish`] or
/// [`Task::fail`] (one dropped unsaid ends with the operation's drawing).
pub struct Task<'a> {
    said: &'a Notices,
    task: TaskId,
    started: Instant,
}

impl Task<'_> {
    pub fn id(&self) -> TaskId {
        self.task
    }

    /// What it does now.
    pub fn doing(&self, text: impl Into<String>) {
        self.said.progress(Progress::Doing { task: self.task, text: text.into() });
    }

    /// Done, as `text` says.
    pub fn finish(self, text: impl Into<String>) {
        self.end(true, text.into());
    }

    /// Failed, as `text` says.
    pub fn fail(self, text: impl Into<String>) {
        self.end(false, text.into());
    }

    fn end(self, ok: bool, text: String) {
        self.said.progress(Progress::Ended { task: self.task, ok, text, took: self.started.elapsed() });
    }
}

/// Features' warnings (a deprecated Feature, a lockfile out of step) are
/// said as any other.
impl crate::features::Report for Notices {
    fn warning(&self, text: &str) {
        self.warn(text);
    }
}

impl fmt::Debug for Notices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notices").field("kept", &self.kept).finish_non_exhaustive()
    }
}

/// Every event an operation says, as plain data (`took` left out: it
/// is the clock's), for tests anywhere in the crate.
#[cfg(test)]
pub(crate) fn recorded() -> (Notices, std::sync::Arc<Mutex<Vec<String>>>) {
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let to_sink = std::sync::Arc::clone(&seen);
    let notices = Notices::new(move |e| to_sink.lock().unwrap().push(shown(e)));
    (notices, seen)
}

/// An event as one line: `began 1 label`, `doing 1 text`,
/// `ended 1 ok text`, `summary text`, `output text`, or the notice.
#[cfg(test)]
pub(crate) fn shown(e: Event<'_>) -> String {
    match e {
        Event::Notice(n) => n.to_string(),
        Event::Progress(Progress::Began { task, label }) => format!("began {} {label}", task.0),
        Event::Progress(Progress::Doing { task, text }) => format!("doing {} {text}", task.0),
        Event::Progress(Progress::Ended { task, ok, text, .. }) => {
            format!("ended {} {} {text}", task.0, if *ok { "ok" } else { "failed" })
        }
        Event::Progress(Progress::Summary { text, terminal_only, .. }) => {
            format!("summary{} {text}", if *terminal_only { " (terminal)" } else { "" })
        }
        Event::Output(bytes) => format!("output {}", String::from_utf8_lossy(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn each_line_reaches_the_sink_as_it_is_said_and_is_kept_in_order() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let to_sink = Arc::clone(&seen);
        let notices = Notices::new(move |e| {
            if let Event::Notice(n) = e {
                to_sink.lock().unwrap().push(n.to_string())
            }
        });
        notices.warn("the image asks for privileged");
        notices.note("rooms share a group");
        notices.say("building .devcontainer/Dockerfile");
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "warning: the image asks for privileged",
                "note: rooms share a group",
                "building .devcontainer/Dockerfile"
            ]
        );
        let kept = notices.take();
        assert_eq!(kept.iter().map(|n| n.level).collect::<Vec<_>>(), [Level::Warning, Level::Note, Level::Said]);
        assert!(notices.take().is_empty(), "taken once");
    }

    #[test]
    fn streamed_notices_reach_the_sink_and_keep_nothing() {
        let count = Arc::new(Mutex::new(0));
        let counted = Arc::clone(&count);
        let notices = Notices::streamed(move |_| *counted.lock().unwrap() += 1);
        for _ in 0..3 {
            notices.say("a connection closed");
        }
        assert_eq!(*count.lock().unwrap(), 3);
        assert!(notices.take().is_empty(), "a forwarder's log lines are not kept");
    }

    #[test]
    fn a_task_says_its_beginning_what_it_does_and_its_end_under_one_id_and_none_of_it_is_kept() {
        let (said, seen) = recorded();
        let first = said.task("layer a");
        let second = said.task("layer b");
        assert_ne!(first.id(), second.id());
        first.doing("Downloading");
        second.fail("layer b: refused");
        first.finish("layer a: pull complete");
        said.output(b"[postCreateCommand] hi\n");
        said.terminal_summary("features: 1 ready", Instant::now());
        let (a, b) = (first_id(&seen, "layer a"), first_id(&seen, "layer b"));
        assert_eq!(
            *seen.lock().unwrap(),
            [
                format!("began {a} layer a"),
                format!("began {b} layer b"),
                format!("doing {a} Downloading"),
                format!("ended {b} failed layer b: refused"),
                format!("ended {a} ok layer a: pull complete"),
                "output [postCreateCommand] hi\n".to_string(),
                "summary (terminal) features: 1 ready".to_string(),
            ]
        );
        assert!(said.take().is_empty(), "progress and output are drawn, not kept");
    }

    fn first_id(seen: &Mutex<Vec<String>>, label: &str) -> String {
        let seen = seen.lock().unwrap();
        let line = seen.iter().find(|l| l.starts_with("began ") && l.ends_with(label)).unwrap();
        line.split(' ').nth(1).unwrap().to_string()
    }

    #[test]
    fn kept_notices_print_nothing_and_keep_everything() {
        let notices = Notices::kept();
        notices.warn("w");
        assert_eq!(notices.take(), [Notice { level: Level::Warning, text: "w".into() }]);
    }
}
