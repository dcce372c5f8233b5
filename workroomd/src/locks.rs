//! One way to take a lock, on both sides: a poisoned lock is taken anyway.
//!
//! A lock is poisoned when a thread panicked while holding it. No code
//! panics while holding ours (no `unwrap` in shipped code), and each guarded
//! state is whole after every change, so the state is still fit to use; a
//! daemon that refused every later lock would turn one bug into the loss of
//! every pane of the room. Before this, the daemon took its pane locks with
//! `expect` (a panic on poison) and its stream locks by ignoring it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `mutex` locked, poisoned or not.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_poisoned_by_a_panicking_holder_is_still_taken_with_its_state() {
        let shared = std::sync::Arc::new(Mutex::new(vec![1]));
        let poisoner = std::sync::Arc::clone(&shared);
        let panicked = std::thread::spawn(move || {
            let mut held = poisoner.lock().unwrap();
            held.push(2);
            panic!("a bug while holding the lock");
        })
        .join();
        assert!(panicked.is_err() && shared.is_poisoned());
        assert_eq!(*lock(&shared), [1, 2]);
    }
}
