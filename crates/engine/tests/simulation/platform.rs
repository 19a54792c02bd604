//! The simulated world as the engine's platform.

use super::*;

/// The simulated world as the engine's platform.
impl Platform for World {
    fn executable_hash(&self) -> &str {
        &self.target_hash_text
    }

    async fn lease(&mut self) -> anyhow::Result<Option<Lease>> {
        Ok(Some(self.lease.clone()))
    }

    async fn change_status(&mut self, change: &StatusChange) -> anyhow::Result<bool> {
        Ok(change.apply(&mut self.status))
    }

    async fn record(&mut self, e: &Event) {
        self.trace
            .push(format!("{} at {}: {}", e.reason, self.now, e.message));
    }

    async fn fence_out(&mut self, instance: &str, _: &Memory) -> anyhow::Result<()> {
        // Fencing stops the old primary's processes when the platform can
        // reach them.
        if let Some(o) = self.idx(instance)
            && !self.nodes[o].out_of_sight()
        {
            self.nodes[o].alive = false;
        }
        Ok(())
    }

    async fn release_lease(&mut self, holder: &str) -> anyhow::Result<()> {
        // Only once the holder is proven gone.
        if let Some(o) = self.idx(holder)
            && !self.nodes[o].alive
            && !self.nodes[o].out_of_sight()
            && self.lease.holder_identity.as_deref() == Some(holder)
        {
            self.lease = self.lease.release(holder);
        }
        Ok(())
    }

    async fn pass_lease(&mut self, from: &str, to: &str, seen: i64) -> anyhow::Result<()> {
        self.lease = self.lease.pass(from, to, seen, self.now)?;
        self.trace
            .push(format!("lease passed from {from} to {to} at {}", self.now));
        Ok(())
    }

    async fn allow_start(&mut self, _: &str, _: &Memory) -> anyhow::Result<()> {
        // Its supervisor starts it when it next runs (`chaos`, `heal`).
        Ok(())
    }

    async fn recreate(&mut self, instance: &str, _: bool, memory: &Memory) -> anyhow::Result<bool> {
        self.assert_others_ready(instance, "recreating");
        // A clean stop: read-only first, the lease given up.
        let Some(o) = self.idx(instance) else {
            return Ok(false);
        };
        if self.nodes[o].alive && !self.nodes[o].out_of_sight() {
            let n = &mut self.nodes[o];
            n.read_only = true;
            n.alive = false;
            n.crashed_writable = false;
            n.recreating = true;
            self.lease = self.lease.release(instance);
            self.trace
                .push(format!("stopped {instance} for the rollout"));
            Ok(true)
        } else if !self.nodes[o].alive && !memory.held_down.contains(instance) {
            // Down already (crashed): its Pod is made again from the new
            // definition and starts whenever it restarts, recovering as any
            // crashed instance.
            let n = &mut self.nodes[o];
            n.definition = self.target_definition;
            n.hash = self.target_hash;
            self.trace
                .push(format!("recreated {instance}, down, for the rollout"));
            Ok(true)
        } else {
            Ok(false)
        }
    }

    async fn annotate(
        &mut self,
        _: Option<&str>,
        _: &std::collections::BTreeMap<String, Option<String>>,
    ) -> anyhow::Result<()> {
        Ok(())
    }

    async fn control(
        &mut self,
        instance: &str,
        request: &ControlRequest,
    ) -> anyhow::Result<String> {
        match request {
            ControlRequest::SemiSync(_) | ControlRequest::UpgradeSystemTables => Ok(String::new()),
            ControlRequest::UpgradeFromFile { .. } => anyhow::bail!("no files in the simulation"),
            ControlRequest::Upgrade { .. } => {
                self.assert_others_ready(instance, "in-place upgrade of");
                // The exec fails now and then: the old manager goes on.
                match self.idx(instance) {
                    Some(o)
                        if self.nodes[o].alive
                            && !self.nodes[o].out_of_sight()
                            && self.rng.chance(80) =>
                    {
                        self.nodes[o].hash = self.target_hash;
                        self.trace.push(format!("upgraded {instance} in place"));
                        Ok(String::new())
                    }
                    _ => anyhow::bail!("the re-exec failed"),
                }
            }
        }
    }
}
