//! The local platform of the topology engine: the core's actions carried
//! out with processes and files.
//!
//! | action | locally |
//! |---|---|
//! | event | a line in `events.jsonl`, and one for the human watching |
//! | status change | `status.json` under its lock |
//! | fence out | kill mysqld, then its manager; start nothing while held down |
//! | release the lease | delete the holder's `lease.json` once its processes are gone |
//! | restart | start the manager at once |
//! | recreate | write its configuration anew (image, settings); SIGTERM the manager; start it again from a fresh private copy |
//! | control API | `127.0.0.1` at the instance's control port |
//! | annotate | `annotations.json` in the state directory, under its lock |

use cnmysql_control::client::ControlClient;
use cnmysql_core::event::Event;
use cnmysql_core::lease::Lease;
use cnmysql_core::memory::Memory;
use cnmysql_core::status_change::StatusChange;
use cnmysql_engine::{ControlRequest, Platform};

use crate::progress::Reporter;
use crate::state::{Ports, StateDir};
use crate::supervisor::Supervisor;

pub struct LocalPlatform<'a> {
    pub dir: &'a StateDir,
    pub ports: &'a Ports,
    pub client: &'a ControlClient,
    pub reporter: &'a Reporter,
    pub hash: &'a str,
    pub supervisor: &'a mut Supervisor,
    pub defs: &'a mut crate::definition::Definitions,
}

impl Platform for LocalPlatform<'_> {
    fn executable_hash(&self) -> &str {
        self.hash
    }

    async fn lease(&mut self) -> anyhow::Result<Option<Lease>> {
        Ok(Some(self.dir.read_lease()?))
    }

    async fn change_status(&mut self, change: &StatusChange) -> anyhow::Result<bool> {
        self.dir.change_status(change)
    }

    async fn record(&mut self, e: &Event) {
        self.dir
            .event(e.warning, e.reason, e.instance.as_deref(), &e.message);
        self.reporter
            .say(None, &format!("{}: {}", e.reason, e.message));
    }

    async fn fence_out(&mut self, instance: &str, _: &Memory) -> anyhow::Result<()> {
        self.supervisor.kill(instance).await;
        Ok(())
    }

    async fn release_lease(&mut self, holder: &str) -> anyhow::Result<()> {
        // Only with proof that none of its processes can still write;
        // otherwise the lease runs out on its own.
        let gone = self
            .supervisor
            .procs
            .iter()
            .find(|p| p.name == holder)
            .is_some_and(|p| p.gone(self.dir));
        if !gone {
            tracing::warn!(instance = %holder, "not releasing the lease: its processes may still run");
            return Ok(());
        }
        self.dir.update_lease(|l| {
            Ok(if l.holder_identity.as_deref() == Some(holder) {
                l.release(holder)
            } else {
                l.clone()
            })
        })?;
        Ok(())
    }

    async fn pass_lease(&mut self, from: &str, to: &str, seen: i64) -> anyhow::Result<()> {
        let now = jiff::Timestamp::now().as_millisecond();
        self.dir.update_lease(|l| l.pass(from, to, seen, now))?;
        Ok(())
    }

    async fn allow_start(&mut self, instance: &str, _: &Memory) -> anyhow::Result<()> {
        self.supervisor.start_now(instance);
        self.reporter
            .say(Some(instance), "starting it again: it rejoins as a replica");
        Ok(())
    }

    async fn recreate(&mut self, instance: &str, _: bool, _: &Memory) -> anyhow::Result<bool> {
        // Its configuration as the Cluster now defines it (image, settings),
        // read by the manager when it starts again.
        let image = self
            .defs
            .image_of_instance(&self.dir.read_status()?, instance)?;
        self.defs.write(instance, &image)?;
        self.supervisor.recreate(instance)
    }

    async fn annotate(
        &mut self,
        instance: Option<&str>,
        set: &std::collections::BTreeMap<String, Option<String>>,
    ) -> anyhow::Result<()> {
        crate::annotations::set(self.dir, instance, set)
    }

    async fn control(
        &mut self,
        instance: &str,
        request: &ControlRequest,
    ) -> anyhow::Result<String> {
        let port = self
            .ports
            .instances
            .get(instance)
            .ok_or_else(|| anyhow::anyhow!("{instance} has no control port"))?
            .control;
        request.send(self.client, &self.ports.host, port).await
    }
}
