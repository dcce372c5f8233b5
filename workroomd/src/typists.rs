//! What each attached client typed into a pane, counted, so that no key is
//! lost when its link drops under it (a hand-off closes every link).
//!
//! A client that wants its keys kept names itself on each attach: a number
//! of its own choosing, the same each time, and how many bytes it sent so
//! far (`proto::Typist`). The pane counts, in the client's numbering, the
//! bytes it took from each typist (handed to its writer) and the bytes its
//! writer wrote to the pty; a reattach is answered with the count taken,
//! and the client sends again whatever it typed beyond it: the keys it
//! typed into a link that was closing, which `workroom shell` cannot tell
//! from a live one until the engine reports the exec's end (later on
//! Podman than on Docker).
//!
//! Across a hand-off the count is what was written: the input queued but
//! not yet written does not cross the `execve`, and the client sends it
//! again. An attach takes the typist over from its earlier attaches, whose
//! leftovers (frames of a link that was closing, still being read) are
//! refused from then on, so the count it was answered stays true.

use std::collections::HashMap;

/// Typists a pane remembers. A client reattaches within seconds of its
/// link dropping (`workroom shell` tries for 15 s), and one that detached
/// or closed its terminal never comes back under the same number, so only
/// the most recently attached need keeping: more than a room's clients
/// losing their links at once.
pub const KEPT: usize = 64;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Typist {
    /// Bytes handed to the pane's writer.
    taken: u64,
    /// Bytes the writer wrote to the pty.
    written: u64,
    /// Which attach of the typist may type: the latest.
    attach: u64,
    /// When it last attached, for keeping the latest [`KEPT`].
    seen: u64,
}

/// One pane's typists.
#[derive(Debug, Default)]
pub struct Typists {
    by_id: HashMap<u64, Typist>,
    /// Orders attaches, for [`Typist::attach`] and [`Typist::seen`].
    clock: u64,
}

/// Leave to type as one attach of a typist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leave {
    pub typist: u64,
    attach: u64,
}

impl Typists {
    /// Typists a hand-off handed over, with what was written for each.
    pub fn adopt(written: &[(u64, u64)]) -> Typists {
        let mut typists = Typists::default();
        for &(id, written) in written {
            typists.clock += 1;
            let seen = typists.clock;
            typists.by_id.insert(id, Typist { taken: written, written, attach: 0, seen });
        }
        typists
    }

    /// An attach of `typist`, which says it `sent` that many bytes before:
    /// the bytes taken from it so far, in its numbering (what the client
    /// need not send again), and its leave to type, which ends every
    /// earlier attach's. A typist not known here (its first attach, or
    /// one a daemon of before or [`KEPT`] let go) is taken to have had
    /// everything it sent taken: nothing is ever typed twice.
    pub fn attach(&mut self, typist: u64, sent: u64) -> (u64, Leave) {
        self.clock += 1;
        let clock = self.clock;
        let entry = self.by_id.entry(typist).or_insert(Typist { taken: sent, written: sent, attach: 0, seen: 0 });
        entry.attach = clock;
        entry.seen = clock;
        let taken = entry.taken;
        if self.by_id.len() > KEPT {
            if let Some(oldest) = self.by_id.iter().min_by_key(|(_, t)| t.seen).map(|(id, _)| *id) {
                self.by_id.remove(&oldest);
            }
        }
        (taken, Leave { typist, attach: clock })
    }

    /// Counts `n` bytes taken under `leave`; false (nothing counted) when
    /// a later attach of the typist took over, or it was forgotten: those
    /// bytes are the new attach's to send again, not to type now.
    pub fn take(&mut self, leave: Leave, n: usize) -> bool {
        match self.by_id.get_mut(&leave.typist) {
            Some(t) if t.attach == leave.attach => {
                t.taken += n as u64;
                true
            }
            _ => false,
        }
    }

    /// Counts `n` bytes of `typist` written to the pty.
    pub fn wrote(&mut self, typist: u64, n: usize) {
        if let Some(t) = self.by_id.get_mut(&typist) {
            t.written += n as u64;
        }
    }

    /// The typist detached for good (its client's own detach).
    pub fn forget(&mut self, typist: u64) {
        self.by_id.remove(&typist);
    }

    /// What crosses a hand-off: each typist with the bytes written for it.
    pub fn written(&self) -> Vec<(u64, u64)> {
        let mut written: Vec<(u64, u64)> = self.by_id.iter().map(|(id, t)| (*id, t.written)).collect();
        written.sort_unstable();
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reattach_is_told_what_was_taken_from_the_typist_before() {
        let mut typists = Typists::default();
        let (taken, leave) = typists.attach(7, 0);
        assert_eq!(taken, 0);
        assert!(typists.take(leave, 5));
        assert!(typists.take(leave, 3));
        assert_eq!(typists.attach(7, 0).0, 8);
        assert_eq!(typists.attach(9, 0).0, 0, "another typist counts apart");
    }

    #[test]
    fn once_a_typist_reattached_its_earlier_attach_may_type_no_more() {
        let mut typists = Typists::default();
        let (_, old) = typists.attach(7, 0);
        assert!(typists.take(old, 4));
        let (taken, new) = typists.attach(7, 0);
        assert_eq!(taken, 4);
        // A frame of the closing link read late: refused, the count stays
        // what the new attach was told, and the client sends it again.
        assert!(!typists.take(old, 2));
        assert!(typists.take(new, 2));
        assert_eq!(typists.attach(7, 0).0, 6);
    }

    #[test]
    fn across_a_hand_off_the_count_is_what_was_written_not_what_was_queued() {
        let mut typists = Typists::default();
        let (_, leave) = typists.attach(7, 0);
        assert!(typists.take(leave, 10));
        typists.wrote(7, 6);
        assert_eq!(typists.written(), vec![(7, 6)]);
        let mut after = Typists::adopt(&typists.written());
        let (taken, leave) = after.attach(7, 0);
        assert_eq!(taken, 6, "the 4 queued bytes did not cross the exec: the client sends them again");
        assert!(after.take(leave, 4));
        assert_eq!(after.attach(7, 0).0, 10);
    }

    #[test]
    fn a_typist_not_known_here_had_all_it_sent_taken_so_nothing_is_typed_twice() {
        let mut typists = Typists::default();
        // Its first attach here, after 120 bytes sent to a daemon that
        // counted nothing (or that was handed off from one).
        let (taken, leave) = typists.attach(7, 120);
        assert_eq!(taken, 120);
        assert!(typists.take(leave, 5));
        typists.wrote(7, 5);
        assert_eq!(typists.attach(7, 999).0, 125, "a known typist's count is the pane's, not the client's say");
        assert_eq!(typists.written(), vec![(7, 125)]);
    }

    #[test]
    fn a_forgotten_typist_types_no_more_and_starts_from_nothing() {
        let mut typists = Typists::default();
        let (_, leave) = typists.attach(7, 0);
        assert!(typists.take(leave, 3));
        typists.forget(7);
        assert!(typists.written().is_empty());
        assert!(!typists.take(leave, 1));
        assert_eq!(typists.attach(7, 0).0, 0);
    }

    #[test]
    fn only_the_latest_attached_typists_are_kept() {
        let mut typists = Typists::default();
        let (_, first) = typists.attach(0, 0);
        assert!(typists.take(first, 1));
        for id in 1..=KEPT as u64 {
            typists.attach(id, 0);
        }
        assert_eq!(typists.written().len(), KEPT);
        assert!(!typists.take(first, 1), "the oldest was let go");
        assert_eq!(typists.attach(KEPT as u64, 0).0, 0);
    }
}
