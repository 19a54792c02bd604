//! A replica's IO thread that lost its source retries once a second at
//! best (`SOURCE_CONNECT_RETRY=1`, the least the servers take). The role
//! loop has it connect again as soon as the source's server answers
//! (`cnmysql_core::role::Action::Reconnect`): this remembers whether it is
//! retrying, for the loop's pace, and when it was last told to connect, so
//! that a source whose server answers but whose replication port refuses
//! is not hammered (the server's own retry goes on meanwhile).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Least time between two reconnections the manager asks for.
const SPACING: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(super) struct Reconnects {
    retrying: AtomicBool,
    last: Mutex<Option<Instant>>,
}

impl Reconnects {
    /// Whether the IO thread was last seen waiting to retry.
    pub fn retrying(&self) -> bool {
        self.retrying.load(Ordering::Relaxed)
    }

    pub fn set_retrying(&self, retrying: bool) {
        self.retrying.store(retrying, Ordering::Relaxed);
    }

    /// Whether a reconnection may be asked now; if so, it is counted as
    /// asked.
    pub fn may_reconnect(&self) -> bool {
        let mut last = self.last.lock().unwrap();
        if last.is_some_and(|t| t.elapsed() < SPACING) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnections_are_spaced_by_a_second() {
        let r = Reconnects::default();
        assert!(!r.retrying());
        r.set_retrying(true);
        assert!(r.retrying());
        assert!(r.may_reconnect());
        assert!(!r.may_reconnect(), "a second one at once");
        *r.last.lock().unwrap() = Some(Instant::now() - SPACING);
        assert!(r.may_reconnect());
    }
}
