//! What wakes the local control plane's loop: its period, a change of the
//! cluster status, and the signals (SIGTERM and SIGINT stop it; SIGHUP is
//! `cnmysql local upgrade` asking it to replace itself).

use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::cluster_state::FileClusterState;

pub(crate) enum Wake {
    Stop,
    Replace,
    Tick,
}

pub(crate) struct Wakes {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Wakes {
    pub(crate) fn new() -> std::io::Result<Wakes> {
        Ok(Wakes {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next reason to act: a signal, `period` gone by, or the status
    /// changed.
    pub(crate) async fn next(&mut self, period: Duration, status: &FileClusterState) -> Wake {
        tokio::select! {
            _ = self.term.recv() => Wake::Stop,
            _ = self.int.recv() => Wake::Stop,
            _ = self.hup.recv() => Wake::Replace,
            _ = tokio::time::sleep(period) => Wake::Tick,
            _ = cnmysql_control::ClusterState::changed(status) => Wake::Tick,
        }
    }
}
