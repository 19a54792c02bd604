//! Leader election: several operator replicas may run; only the holder of
//! the Lease [`LEADER_LEASE`] reconciles, and one that loses it stops
//! writing at once and exits so a fresh start rejoins the election.

use std::time::Duration;

use anyhow::Context as _;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::Client;

use crate::Options;
use crate::labels;

/// Name of the operator's leader-election Lease.
pub const LEADER_LEASE: &str = "cnmysql-operator";

/// A future many may wait on.
pub type Signal = Shared<BoxFuture<'static, ()>>;

pub struct Leadership {
    leading: tokio::sync::watch::Receiver<bool>,
    lease_task: Option<
        tokio::task::JoinHandle<
            Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>,
        >,
    >,
    forward: Option<tokio::task::JoinHandle<()>>,
    /// Without an election, the sender of a lead never lost (dropping it
    /// would read as a lost lead).
    always: Option<tokio::sync::watch::Sender<bool>>,
}

impl Leadership {
    /// Join the election (or lead at once when `--leader-elect` is off).
    pub async fn join(client: &Client, opts: &Options) -> anyhow::Result<Leadership> {
        let (leading_tx, leading) = tokio::sync::watch::channel(!opts.leader_elect);
        let mut me = Leadership {
            leading,
            lease_task: None,
            forward: None,
            always: None,
        };
        if !opts.leader_elect {
            me.always = Some(leading_tx);
            return Ok(me);
        }
        let lm = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), LEADER_LEASE)
            .with_namespace(&opts.leader_election_namespace)
            .with_identity(&opts.identity)
            .with_duration(15)
            .with_grace(5)
            .with_field_manager(labels::FIELD_MANAGER)
            .build()
            .await
            .context("leader election")?;
        let (mut rx, task) = lm.watch().await;
        me.lease_task = Some(task);
        me.forward = Some(tokio::spawn(async move {
            loop {
                let leading = *rx.borrow_and_update();
                let _ = leading_tx.send(leading);
                if rx.changed().await.is_err() {
                    let _ = leading_tx.send(false);
                    return;
                }
            }
        }));
        tracing::info!(lease = LEADER_LEASE, namespace = %opts.leader_election_namespace, identity = %opts.identity, "waiting to lead");
        Ok(me)
    }

    /// Wait to lead; false when `shutdown` came first.
    pub async fn lead(&self, shutdown: Signal) -> anyhow::Result<bool> {
        let mut leading = self.leading.clone();
        tokio::select! {
            _ = shutdown => Ok(false),
            r = leading.wait_for(|l| *l) => { r.context("leader election stopped")?; Ok(true) }
        }
    }

    /// Resolves when the lead is lost: another replica may be leading
    /// already.
    pub fn lost(&self) -> Signal {
        let mut lost = self.leading.clone();
        async move {
            let _ = lost.wait_for(|l| !*l).await;
        }
        .boxed()
        .shared()
    }

    /// Leave the election, giving the Lease up so a standby takes over at
    /// once; an error when the lead was lost rather than `shutdown` asked.
    pub async fn leave(self, shutdown: Signal) -> anyhow::Result<()> {
        let lost = self.lost();
        let Leadership {
            leading,
            lease_task,
            forward,
            always: _,
        } = self;
        drop(leading);
        if let Some(f) = forward {
            // Dropping the lease channel ends the lease manager's task.
            f.abort();
            let _ = f.await;
        }
        if let Some(task) = lease_task
            && let Ok(Ok(Ok(lm))) = tokio::time::timeout(Duration::from_secs(5), task).await
        {
            let _ = lm.release().await;
        }
        if lost.now_or_never().is_some() && shutdown.now_or_never().is_none() {
            anyhow::bail!(
                "lost the leader lease {LEADER_LEASE}; exiting so a fresh start rejoins the election"
            );
        }
        Ok(())
    }
}

/// Resolves on SIGTERM or SIGINT.
pub fn shutdown_signal() -> Signal {
    async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    .boxed()
    .shared()
}
