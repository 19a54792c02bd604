//! The simulated world's steps: instances deciding through the core, the control plane's pass, clients, faults, and the checks after every action.

use super::*;

impl World {
    pub(crate) fn new(seed: u64) -> World {
        // Half the schedules give a vanished primary time to come back.
        let delay = if seed % 4 < 2 { 0 } else { 1 };
        let spec: ClusterSpec = serde_json::from_value(serde_json::json!({
            "instances": 3, "minSyncReplicas": 1, "maxSyncReplicas": 1, "failoverDelay": delay, "maxSwitchoverDelay": 20,
            "mysql": {"semiSync": {"enabled": true, "dataDurability": "required"}}
        }))
        .unwrap();
        let nodes = (1..=3)
            .map(|i| Node {
                name: format!("db-{i}"),
                server: i,
                alive: true,
                partitioned: false,
                isolated: false,
                log: Vec::new(),
                applied: 0,
                starting: false,
                read_only: i != 1,
                source: (i != 1).then_some(0),
                detached: false,
                last_renew: (i == 1).then_some(0),
                crashed_writable: false,
                hash: 0,
                definition: 0,
                recreating: false,
            })
            .collect();
        let status = ClusterStatus {
            current_primary: Some("db-1".into()),
            target_primary: Some("db-1".into()),
            current_primary_timestamp: Some(ts(0)),
            target_primary_timestamp: Some(ts(0)),
            ..Default::default()
        };
        World {
            rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
            nodes,
            status,
            lease: Lease::default().acquire("db-1", 0).unwrap(),
            now: 1_000_000_000,
            spec,
            acked: BTreeSet::new(),
            trace: Vec::new(),
            memory: Memory {
                last_current: Some("db-1".into()),
                ..Default::default()
            },
            keep: None,
            fence_early: seed % 2 == 1,
            target_hash: 0,
            target_definition: 0,
            target_hash_text: "0".into(),
            tick: None,
        }
    }

    pub(crate) fn idx(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The replicas that would acknowledge a commit of `p` now: running,
    /// reachable, receiving from it (semi-sync, `required`).
    pub(crate) fn ackers(&self, p: usize) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&r| {
                let n = &self.nodes[r];
                r != p && n.alive && !n.partitioned && !n.detached && n.source == Some(p)
            })
            .collect()
    }

    /// Writable as a client can tell (docs/topology.md, "Never two
    /// writable"): it can acknowledge a commit, which under `required`
    /// takes a replica receiving from it. A server with `read_only` off
    /// and nobody to acknowledge holds every commit back unseen.
    pub(crate) fn acknowledging(&self, p: usize) -> bool {
        let n = &self.nodes[p];
        n.writable() && !n.partitioned && !self.ackers(p).is_empty()
    }

    pub(crate) fn check(&self, seed: u64, step: usize, what: &str) {
        let writable: Vec<&str> = (0..self.nodes.len())
            .filter(|&p| self.acknowledging(p))
            .map(|p| self.nodes[p].name.as_str())
            .collect();
        assert!(
            writable.len() <= 1,
            "seed {seed} step {step} after {what}: two writable instances {writable:?}\n{}",
            self.trace.join("\n")
        );
        if let Some(p) = self
            .status
            .current_primary
            .as_deref()
            .and_then(|c| self.idx(c))
        {
            for n in self.nodes.iter().filter(|n| n.source == Some(p)) {
                assert!(
                    self.nodes[p].log.starts_with(&n.log),
                    "seed {seed} step {step} after {what}: replica {} holds transactions its primary {} lacks\n{}",
                    n.name,
                    self.nodes[p].name,
                    self.trace.join("\n")
                );
            }
        }
        for n in (0..self.nodes.len())
            .filter(|&p| self.acknowledging(p))
            .map(|p| &self.nodes[p])
        {
            let have: BTreeSet<Gtid> = n.log.iter().copied().collect();
            let missing: Vec<&Gtid> = self.acked.iter().filter(|g| !have.contains(g)).collect();
            assert!(
                missing.is_empty(),
                "seed {seed} step {step} after {what}: writable {} lacks acknowledged {missing:?}\n{}",
                n.name,
                self.trace.join("\n")
            );
        }
    }

    /// One instance manager tick.
    pub(crate) fn manager(&mut self, i: usize) {
        if !self.nodes[i].alive {
            return;
        }
        let me = self.nodes[i].name.clone();
        self.nodes[i].starting = false;
        if self.nodes[i].out_of_sight() {
            // Cannot reach the store: only the self-fencing clock runs.
            let last = self.nodes[i].last_renew.unwrap_or(i64::MIN / 2);
            if !self.nodes[i].read_only && lease::must_self_fence(last, self.now) {
                self.nodes[i].read_only = true;
                self.trace.push(format!("{me} self-fences"));
            }
            return;
        }
        let desired = role::desired(&me, &self.status);
        if desired.releases_lease() && self.lease.holder_identity.as_deref() == Some(me.as_str()) {
            self.lease = self.lease.release(&me);
            self.nodes[i].last_renew = None;
        }
        match desired {
            Desired::Primary => {
                self.nodes[i].source = None;
                self.nodes[i].apply_all();
                match self.lease.acquire(&me, self.now) {
                    Ok(l) => {
                        self.lease = l;
                        self.nodes[i].last_renew = Some(self.now);
                    }
                    // Passed to another instance: deposed, however fresh
                    // its own clock says its last renewal is.
                    Err(lease::LeaseError::HeldByOther { .. }) => {
                        self.nodes[i].read_only = true;
                        return;
                    }
                    Err(_) => {}
                }
                let last = self.nodes[i].last_renew.unwrap_or(i64::MIN / 2);
                self.nodes[i].read_only = lease::must_self_fence(last, self.now);
            }
            Desired::Promote => {
                self.nodes[i].read_only = true;
                // Drain: catch up with the old primary if it can be reached
                // and is read-only; wait while it is still writable.
                if let Some(old) = self
                    .status
                    .current_primary
                    .as_deref()
                    .and_then(|c| self.idx(c))
                    .filter(|o| *o != i)
                {
                    let o = &self.nodes[old];
                    let reachable = o.alive && !o.partitioned;
                    if role::drain_rule(&self.status) == role::Drain::CatchUpWithOldPrimary
                        && !reachable
                    {
                        return;
                    }
                    if reachable {
                        if !o.read_only {
                            return;
                        }
                        if o.log.starts_with(&self.nodes[i].log) {
                            let log = o.log.clone();
                            self.nodes[i].log = log;
                        }
                    }
                }
                let Ok(l) = self.lease.acquire(&me, self.now) else {
                    return;
                };
                self.lease = l;
                self.nodes[i].last_renew = Some(self.now);
                if self.status.target_primary.as_deref() != Some(me.as_str()) {
                    return;
                }
                self.status.current_primary = Some(me.clone());
                self.status.current_primary_timestamp = Some(ts(self.now));
                self.status.primary_failing_since = None;
                self.nodes[i].source = None;
                self.nodes[i].apply_all();
                self.nodes[i].read_only = false;
                self.trace.push(format!("{me} promoted at {}", self.now));
            }
            // (No replica clusters here: a designated primary only holds.)
            Desired::HoldReadOnly(_)
            | Desired::HandOver { .. }
            | Desired::DesignatedPrimary { .. } => self.nodes[i].read_only = true,
            Desired::Detached { .. } => {
                self.nodes[i].read_only = true;
                // Stopping the IO thread takes time (up to 2 s for a
                // source gone silent): it goes on receiving meanwhile.
                if self.rng.chance(50) {
                    self.nodes[i].detached = true;
                }
            }
            Desired::Replica { source } => {
                self.nodes[i].read_only = true;
                self.nodes[i].detached = false;
                let Some(s) = self.idx(&source) else { return };
                if self.nodes[i].source == Some(s) {
                    return;
                }
                let src = &self.nodes[s];
                if !src.alive || src.partitioned {
                    return;
                }
                let mine = History::Mariadb(self.nodes[i].state());
                let theirs = History::Mariadb(src.state());
                if role::may_follow(&mine, &theirs).is_err() {
                    if !self.status.diverged_instances.contains(&me) {
                        self.status.diverged_instances.push(me.clone());
                        self.trace.push(format!("{me} diverged"));
                    }
                    return;
                }
                self.nodes[i].source = Some(s);
            }
        }
    }

    /// Replicas copy part of their source's log (lag is random).
    pub(crate) fn replicate(&mut self) {
        for i in 0..self.nodes.len() {
            let Some(s) = self.nodes[i].source else {
                continue;
            };
            let (n, src) = (&self.nodes[i], &self.nodes[s]);
            if n.detached
                || !n.alive
                || n.partitioned
                || !src.alive
                || src.partitioned
                || !src.log.starts_with(&n.log)
            {
                continue;
            }
            let extra = src.log.len() - n.log.len();
            let take = self.rng.below(extra as u64 + 1) as usize;
            let upto = n.log.len() + take;
            let add: Vec<Gtid> = src.log[n.log.len()..upto].to_vec();
            self.nodes[i].log.extend(add);
        }
        // Appliers lag behind what was received, by a random amount.
        for i in 0..self.nodes.len() {
            let n = &self.nodes[i];
            if !n.alive || n.applied >= n.log.len() {
                continue;
            }
            let behind = n.log.len() - n.applied;
            let step = self.rng.below(behind as u64 + 1) as usize;
            self.nodes[i].applied += step;
        }
    }

    /// A client writes to every writable instance it can reach; semi-sync
    /// (required) acknowledges only once a replica has received the write.
    pub(crate) fn write(&mut self) {
        for p in 0..self.nodes.len() {
            if !self.nodes[p].writable() || self.nodes[p].partitioned {
                continue;
            }
            let server = self.nodes[p].server;
            let seq = self.nodes[p].log.iter().map(|g| g.seq).max().unwrap_or(0) + 1;
            let g = Gtid {
                domain: 0,
                server,
                seq,
            };
            self.nodes[p].log.push(g);
            self.nodes[p].apply_all();
            let ackers = self.ackers(p);
            if let Some(&r) = ackers.get(self.rng.below(ackers.len().max(1) as u64) as usize)
                && self.nodes[p].log.starts_with(&self.nodes[r].log)
            {
                let log = self.nodes[p].log.clone();
                self.nodes[r].log = log;
                self.acked.insert(g);
            }
        }
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let instances = self
            .nodes
            .iter()
            .enumerate()
            .map(|(k, n)| Observed {
                name: n.name.clone(),
                ordinal: k as u32 + 1,
                status: (n.alive && !n.out_of_sight() && n.starting)
                    .then(|| InstanceStatus {
                        instance: n.name.clone(),
                        phase: InstancePhase::Starting,
                        executable_hash: n.hash.to_string(),
                        ..Default::default()
                    })
                    .or_else(|| {
                        (n.alive && !n.out_of_sight()).then(|| InstanceStatus {
                            instance: n.name.clone(),
                            phase: InstancePhase::Running,
                            mysqld_running: true,
                            read_only: n.read_only,
                            ready: true,
                            role: if n.source.is_some() {
                                Role::Replica
                            } else if !n.read_only {
                                Role::Primary
                            } else {
                                Role::Unknown
                            },
                            gtid_executed: n.state().to_string(),
                            source_id: n.server.to_string(),
                            executable_hash: n.hash.to_string(),
                            replication: n.source.map(|_| ReplicationStatus {
                                io_state: if n.detached { "No" } else { "Yes" }.into(),
                                sql_running: true,
                                received_gtid: n
                                    .log
                                    .last()
                                    .map(|g| g.to_string())
                                    .unwrap_or_default(),
                                ..Default::default()
                            }),
                            ..Default::default()
                        })
                    }),
                outdated: (n.definition != self.target_definition).then(|| {
                    format!(
                        "image server:{} → server:{}",
                        n.definition, self.target_definition
                    )
                }),
            })
            .collect();
        Snapshot {
            cluster: "db".into(),
            spec: self.spec.clone(),
            status: self.status.clone(),
            instances,
            now_ms: self.now,
            declared: Default::default(),
        }
    }

    /// One control-plane tick: the engine's pass on the simulated platform.
    pub(crate) fn control_plane(&mut self) {
        // Instances the rollout stopped come back with the new manager.
        for n in self.nodes.iter_mut().filter(|n| n.recreating) {
            n.recreating = false;
            n.boot();
            n.hash = self.target_hash;
            n.definition = self.target_definition;
            self.trace.push(format!("recreated {}", n.name));
        }
        self.status.operator_executable_hash = Some(self.target_hash.to_string());
        self.target_hash_text = self.target_hash.to_string();
        let s = self.snapshot();
        for o in &s.instances {
            if let Some(st) = &o.status {
                self.status
                    .gtid_executed_by_instance
                    .insert(o.name.clone(), st.gtid_executed.clone());
            }
        }
        // Proof that no process runs: the platform reaches the node.
        let absent: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| !n.alive && !n.out_of_sight())
            .map(|n| n.name.clone())
            .collect();
        self.tick = Some(s.clone());
        let mut memory = std::mem::take(&mut self.memory);
        let facts = Observation {
            lease: None,
            snapshot: &s,
            absent: &absent,
            fence_early: self.fence_early,
            primary_restarted_at_ms: None,
            primary_down_in_place: false,
            leaving: &[],
            cordoned: &[],
            backing_off: &[],
        };
        let keep = futures::executor::block_on(cnmysql_engine::pass(self, &facts, &mut memory))
            .expect("the simulated platform does not fail");
        self.keep = Some(keep);
        self.memory = memory;
        if self.status.current_primary == self.status.target_primary
            && self.status.phase == Some(Phase::FailingOver)
        {
            self.status.phase = None;
        }
    }

    /// Invariant 4: a rollout step on `x` only while every other instance
    /// in service is ready.
    pub(crate) fn assert_others_ready(&self, x: &str, what: &str) {
        let s = self.tick.as_ref().expect("within a tick");
        let ready = s
            .instances
            .iter()
            .filter(|o| o.name != x && !s.is_fenced(&o.name) && !s.is_diverged(&o.name))
            .all(|o| o.ready());
        assert!(
            ready,
            "{what} {x} while another instance is not ready\n{}",
            self.trace.join("\n")
        );
    }

    /// A crashed instance's supervisor starts it when the last pass lets
    /// it (a kubelet with the Pod the operator made, the local control
    /// plane).
    pub(crate) fn may_start(&self, k: usize) -> bool {
        self.keep
            .as_ref()
            .is_some_and(|r| r.may_start(&self.nodes[k].name))
    }

    /// Start a crashed instance: it boots read-only with no lease, and a
    /// former primary recovers as `role::recovery` says.
    pub(crate) fn start(&mut self, k: usize) {
        let recovery = role::recovery(&self.nodes[k].name, &self.status);
        let n = &mut self.nodes[k];
        if n.crashed_writable && recovery == role::Recovery::AsReplica {
            let mut cut = 0;
            while n
                .log
                .last()
                .is_some_and(|g| g.server == n.server && !self.acked.contains(g))
            {
                n.log.pop();
                cut += 1;
            }
            n.applied = n.applied.min(n.log.len());
            self.trace.push(format!(
                "{} recovers as a replica, rolls back {cut}",
                n.name
            ));
        }
        n.crashed_writable = false;
        n.boot();
        self.trace.push(format!("restart {}", n.name));
    }

    pub(crate) fn chaos(&mut self) {
        let k = self.rng.below(self.nodes.len() as u64) as usize;
        match self.rng.below(100) {
            0..=5 if self.nodes[k].alive => {
                self.nodes[k].crashed_writable = self.nodes[k].writable();
                self.nodes[k].alive = false;
                self.trace.push(format!("crash {}", self.nodes[k].name));
            }
            6..=17 if !self.nodes[k].alive && self.may_start(k) => self.start(k),
            18..=20 => {
                self.nodes[k].partitioned = !self.nodes[k].partitioned;
                self.trace.push(format!(
                    "partition {} = {}",
                    self.nodes[k].name, self.nodes[k].partitioned
                ));
            }
            21..=22 => {
                self.nodes[k].isolated = !self.nodes[k].isolated;
                self.trace.push(format!(
                    "isolated from the store {} = {}",
                    self.nodes[k].name, self.nodes[k].isolated
                ));
            }
            23..=25 => {
                let name = self.nodes[k].name.clone();
                // As the local CLI and the plugin ask for it.
                if switchover::validate(&self.snapshot(), &name).is_ok() {
                    switchover::request(
                        "db",
                        &self.spec,
                        &Default::default(),
                        &mut self.status,
                        &name,
                        self.now,
                    )
                    .expect("validated");
                    self.trace.push(format!("switchover to {name}"));
                }
            }
            28..=29 => {
                self.target_hash += 1;
                self.spec.in_place_instance_manager_updates = self.rng.chance(50);
                self.trace.push(format!(
                    "operator upgraded to {} (in place: {})",
                    self.target_hash, self.spec.in_place_instance_manager_updates
                ));
            }
            30 => {
                self.target_definition += 1;
                self.trace.push(format!(
                    "server image changed to server:{}",
                    self.target_definition
                ));
            }
            26..=27 => {
                let name = self.nodes[k].name.clone();
                let on = !self.status.fenced_instances.contains(&name);
                fencing::set_fenced(&mut self.status, &name, on);
                self.trace.push(format!("fence {name} {on}"));
            }
            _ => {}
        }
    }
}
