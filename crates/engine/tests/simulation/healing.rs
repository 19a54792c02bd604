//! The end of a schedule: the faults stop and the cluster must have a writable primary again.

use super::*;

impl World {
    /// The faults stop: partitions heal, fencing is lifted, crashed
    /// instances start when they may, clients keep writing. Returns after
    /// how many ticks the cluster had a writable primary again, or `None`.
    pub(crate) fn heal(&mut self, seed: u64) -> Option<usize> {
        for n in &mut self.nodes {
            n.partitioned = false;
            n.isolated = false;
        }
        for name in self.status.fenced_instances.clone() {
            fencing::set_fenced(&mut self.status, &name, false);
        }
        self.trace.push("heal".into());
        for tick in 0..400 {
            for k in 0..self.nodes.len() {
                if !self.nodes[k].alive && self.may_start(k) {
                    self.start(k);
                }
            }
            self.now += 100;
            for i in 0..self.nodes.len() {
                self.manager(i);
                self.check(seed, 1000 + tick, "manager (healing)");
            }
            self.replicate();
            self.write();
            self.check(seed, 1000 + tick, "write (healing)");
            self.control_plane();
            self.check(seed, 1000 + tick, "control plane (healing)");
            let primary = self
                .status
                .current_primary
                .as_deref()
                .and_then(|p| self.idx(p));
            if self.status.current_primary == self.status.target_primary
                && primary.is_some_and(|p| self.nodes[p].writable())
            {
                return Some(tick);
            }
        }
        None
    }
}
