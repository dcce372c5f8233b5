//! What a room operation has to tell the person who asked for it: the
//! warnings, notes and progress lines of `up` and the steps under it.
//!
//! ripgrep's library never prints; its binary does. Code below `cli/`
//! hands each line to a [`Notices`] instead of writing to stderr, and the
//! caller chose what happens to it: `cli/` prints it as it comes (a warning
//! about what a room widens must be out before a long build, not after),
//! and every line is also kept, in order, for the operation's result, so a
//! test pins what `up` said from the returned data, without a terminal.

use std::fmt;
use std::sync::Mutex;

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

type Sink = Box<dyn Fn(&Notice) + Send + Sync>;

/// The lines one operation said, and where each goes as it is said.
pub struct Notices {
    kept: Mutex<Vec<Notice>>,
    sink: Option<Sink>,
    keep: bool,
}

impl Notices {
    /// Each line goes to `sink` as it is said, and is kept.
    pub fn new(sink: impl Fn(&Notice) + Send + Sync + 'static) -> Notices {
        Notices { kept: Mutex::default(), sink: Some(Box::new(sink)), keep: true }
    }

    /// Each line goes to `sink` and none is kept: for what runs for days
    /// (a forwarder), where keeping would grow without end.
    pub fn streamed(sink: impl Fn(&Notice) + Send + Sync + 'static) -> Notices {
        Notices { kept: Mutex::default(), sink: Some(Box::new(sink)), keep: false }
    }

    /// Lines are only kept (tests; callers that show them later).
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
            sink(&notice);
        }
        if self.keep {
            // A sink that panicked mid-push poisons nothing worth losing:
            // the list is whole after every push.
            workroomd::locks::lock(&self.kept).push(notice);
        }
    }

    /// Every line said so far, in order, leaving none kept.
    pub fn take(&self) -> Vec<Notice> {
        std::mem::take(&mut *workroomd::locks::lock(&self.kept))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn each_line_reaches_the_sink_as_it_is_said_and_is_kept_in_order() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let to_sink = Arc::clone(&seen);
        let notices = Notices::new(move |n| to_sink.lock().unwrap().push(n.to_string()));
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
    fn kept_notices_print_nothing_and_keep_everything() {
        let notices = Notices::kept();
        notices.warn("w");
        assert_eq!(notices.take(), [Notice { level: Level::Warning, text: "w".into() }]);
    }
}
