//! Deterministic simulation of the topology protocol.
//!
//! Three instances, a shared store (cluster status and primary lease), a
//! control plane and clients, driven by seeded random schedules of crashes,
//! restarts, partitions, lagging replicas, clock steps, switchover requests
//! fencing, operator upgrades (the instance managers' rollout, in place
//! or by recreating instances) and changes of the instances' definition
//! (say a new server image: recreation only), interleaved with all of the
//! above. Instances decide only through the pure core (`role`, `lease`,
//! `switchover`, `fencing`), exactly as the instance manager does, and the
//! control plane is the engine's own pass ([`cnmysql_engine::pass`]) with
//! the simulated world as its [`Platform`], exactly as the local control
//! plane and the operator run it. A crashed instance is absent (its
//! processes are gone, when the platform can tell) and is started again only
//! when the controller's memory lets it ([`Memory::may_start`]): a vanished
//! primary is held down with `failoverDelay: 0` (half the schedules) and
//! started again in place with a delay. After every action we check:
//!
//! 1. at most one instance is writable;
//! 2. under `dataDurability: required`, every writable instance holds every
//!    acknowledged transaction (no promoted instance lacks one);
//! 3. no replica of the current primary holds a transaction the primary
//!    lacks (which a wrong crash recovery, rolling back transactions a
//!    replica already received, would cause);
//! 4. a rollout step (an in-place upgrade or a recreation) is only taken
//!    while every other instance in service is ready: it never takes a
//!    second instance down.
//!
//! And at the end of every schedule the faults stop (partitions heal,
//! fencing is lifted, crashed instances start when they may) and
//!
//! 5. the cluster has a writable primary again within a bounded time: no
//!    rule holds an instance down forever, nor leaves the cluster without a
//!    primary while a safe candidate exists.
//!
//! A replica acknowledges what it received; its applier lags behind by a
//! random amount (what it reports as executed), and applies everything it
//! kept when it starts again. A restarted former primary recovers as MariaDB does with
//! `--init-rpl-role=SLAVE` when `role::recovery` says so: its own trailing
//! transactions whose acknowledgement it never got are rolled back, whether
//! or not a replica received them.
//!
//! `CNMYSQL_SIM_SEEDS` raises the number of schedules (default 10000: a bug in how a rollout switchover set the phase first showed at seed 6443).

use std::collections::BTreeSet;

use cnmysql_api::{ClusterSpec, ClusterStatus, Phase};
use cnmysql_core::event::Event;
use cnmysql_core::lease::{self, Lease};
use cnmysql_core::memory::Memory;
use cnmysql_core::reconcile::Observation;
use cnmysql_core::role::{self, Desired};
use cnmysql_core::status::{
    InstancePhase, InstanceStatus, Observed, ReplicationStatus, Role, Snapshot,
};
use cnmysql_core::status_change::StatusChange;
use cnmysql_core::{fencing, switchover};
use cnmysql_engine::{ControlRequest, Platform};
use cnmysql_gtid::History;
use cnmysql_gtid::mariadb::{BinlogState, Gtid};

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone)]
struct Node {
    name: String,
    server: u32,
    alive: bool,
    partitioned: bool,
    /// Its binary log, or for a replica what it received (relay log).
    log: Vec<Gtid>,
    /// How much of `log` is applied (a replica's applier lags behind what
    /// it received, and acknowledges on receipt: semi-sync AFTER_SYNC).
    applied: usize,
    read_only: bool,
    source: Option<usize>,
    /// Its IO thread is stopped (a failover chooses the new primary): it
    /// keeps its source but receives nothing from it.
    detached: bool,
    last_renew: Option<i64>,
    /// It was writable when it crashed: its last commits may be prepared
    /// but unacknowledged.
    crashed_writable: bool,
    /// The version of its instance manager.
    hash: u32,
    /// The definition it was made from (see `target_definition`).
    definition: u32,
    /// Stopped by the rollout: started again with the new manager.
    recreating: bool,
    /// Just started: its manager answers before it has reached mysqld
    /// (no history to report yet), until its first tick.
    starting: bool,
}

impl Node {
    /// The executed history: what it applied.
    fn state(&self) -> BinlogState {
        let mut s = BinlogState::default();
        for g in &self.log[..self.applied.min(self.log.len())] {
            s.record(*g);
        }
        s
    }
    /// Apply everything received (a promotion drains its relay log first).
    fn apply_all(&mut self) {
        self.applied = self.log.len();
    }
    fn writable(&self) -> bool {
        self.alive && !self.read_only
    }
    /// Its processes start again: read-only, no lease, no source yet; the
    /// applier starts with the server and applies the relay log it kept.
    fn boot(&mut self) {
        self.alive = true;
        self.starting = true;
        self.read_only = true;
        self.apply_all();
        self.source = None;
        self.last_renew = None;
    }
}

struct World {
    rng: Rng,
    nodes: Vec<Node>,
    status: ClusterStatus,
    lease: Lease,
    now: i64,
    spec: ClusterSpec,
    acked: BTreeSet<Gtid>,
    trace: Vec<String>,
    /// The control plane's memory between steps.
    memory: Memory,
    /// The platform fences as soon as failover is decided (Kubernetes) or
    /// after the lease wait (local): half the seeds each.
    fence_early: bool,
    /// The operator's version: the rollout's target.
    target_hash: u32,
    /// The Cluster's definition (bumped like a new server image).
    target_definition: u32,
    /// `target_hash` as the platform's executable hash.
    target_hash_text: String,
    /// The snapshot of the control-plane tick under way (invariant 4).
    tick: Option<Snapshot>,
}

fn ts(ms: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .unwrap()
        .to_string()
}

impl World {
    fn new(seed: u64) -> World {
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
            fence_early: seed % 2 == 1,
            target_hash: 0,
            target_definition: 0,
            target_hash_text: "0".into(),
            tick: None,
        }
    }

    fn idx(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    fn check(&self, seed: u64, step: usize, what: &str) {
        let writable: Vec<&str> = self
            .nodes
            .iter()
            .filter(|n| n.writable())
            .map(|n| n.name.as_str())
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
        for n in self.nodes.iter().filter(|n| n.writable()) {
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
    fn manager(&mut self, i: usize) {
        if !self.nodes[i].alive {
            return;
        }
        let me = self.nodes[i].name.clone();
        self.nodes[i].starting = false;
        if self.nodes[i].partitioned {
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
                if let Ok(l) = self.lease.acquire(&me, self.now) {
                    self.lease = l;
                    self.nodes[i].last_renew = Some(self.now);
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
                self.nodes[i].detached = true;
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
    fn replicate(&mut self) {
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
    fn write(&mut self) {
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
            let ackers: Vec<usize> = (0..self.nodes.len())
                .filter(|&r| {
                    let n = &self.nodes[r];
                    r != p && n.alive && !n.partitioned && n.source == Some(p)
                })
                .collect();
            if let Some(&r) = ackers.get(self.rng.below(ackers.len().max(1) as u64) as usize)
                && self.nodes[p].log.starts_with(&self.nodes[r].log)
            {
                let log = self.nodes[p].log.clone();
                self.nodes[r].log = log;
                self.acked.insert(g);
            }
        }
    }

    fn snapshot(&self) -> Snapshot {
        let instances = self
            .nodes
            .iter()
            .enumerate()
            .map(|(k, n)| Observed {
                name: n.name.clone(),
                ordinal: k as u32 + 1,
                status: (n.alive && !n.partitioned && n.starting)
                    .then(|| InstanceStatus {
                        instance: n.name.clone(),
                        phase: InstancePhase::Starting,
                        executable_hash: n.hash.to_string(),
                        ..Default::default()
                    })
                    .or_else(|| {
                        (n.alive && !n.partitioned).then(|| InstanceStatus {
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
    fn control_plane(&mut self) {
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
            .filter(|n| !n.alive && !n.partitioned)
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
        };
        futures::executor::block_on(cnmysql_engine::pass(self, &facts, &mut memory))
            .expect("the simulated platform does not fail");
        self.memory = memory;
        if self.status.current_primary == self.status.target_primary
            && self.status.phase == Some(Phase::FailingOver)
        {
            self.status.phase = None;
        }
    }

    /// Invariant 4: a rollout step on `x` only while every other instance
    /// in service is ready.
    fn assert_others_ready(&self, x: &str, what: &str) {
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

    /// A crashed instance's supervisor starts it when the controller lets
    /// it (a kubelet, the local control plane).
    fn may_start(&self, k: usize) -> bool {
        cnmysql_core::hold_down::may_start(
            &self.memory,
            &self.spec,
            &self.status,
            &self.nodes[k].name,
        )
    }

    /// Start a crashed instance: it boots read-only with no lease, and a
    /// former primary recovers as `role::recovery` says.
    fn start(&mut self, k: usize) {
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

    fn chaos(&mut self) {
        let k = self.rng.below(self.nodes.len() as u64) as usize;
        match self.rng.below(100) {
            0..=5 if self.nodes[k].alive => {
                self.nodes[k].crashed_writable = self.nodes[k].writable();
                self.nodes[k].alive = false;
                self.trace.push(format!("crash {}", self.nodes[k].name));
            }
            6..=17 if !self.nodes[k].alive && self.may_start(k) => self.start(k),
            18..=22 => {
                self.nodes[k].partitioned = !self.nodes[k].partitioned;
                self.trace.push(format!(
                    "partition {} = {}",
                    self.nodes[k].name, self.nodes[k].partitioned
                ));
            }
            23..=25 => {
                let name = self.nodes[k].name.clone();
                // As the local CLI and the plugin ask for it.
                if switchover::validate(&self.snapshot(), &name).is_ok() {
                    switchover::request("db", &self.spec, false, &mut self.status, &name, self.now)
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
            && !self.nodes[o].partitioned
        {
            self.nodes[o].alive = false;
        }
        Ok(())
    }

    async fn release_lease(&mut self, holder: &str) -> anyhow::Result<()> {
        // Only once the holder is proven gone.
        if let Some(o) = self.idx(holder)
            && !self.nodes[o].alive
            && !self.nodes[o].partitioned
            && self.lease.holder_identity.as_deref() == Some(holder)
        {
            self.lease = self.lease.release(holder);
        }
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
        if self.nodes[o].alive && !self.nodes[o].partitioned {
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
                            && !self.nodes[o].partitioned
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

impl World {
    /// The faults stop: partitions heal, fencing is lifted, crashed
    /// instances start when they may, clients keep writing. Returns after
    /// how many ticks the cluster had a writable primary again, or `None`.
    fn heal(&mut self, seed: u64) -> Option<usize> {
        for n in &mut self.nodes {
            n.partitioned = false;
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

#[test]
fn at_most_one_writable_and_no_acknowledged_write_lost() {
    let seeds: u64 = std::env::var("CNMYSQL_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10000);
    let mut failovers = 0;
    let mut promotions = 0;
    let mut rollout_steps = 0;
    let mut rollouts_done = 0;
    let mut definition_changes = 0;
    let mut healed = Vec::new();
    let mut held_down = 0;
    for seed in 0..seeds {
        let mut w = World::new(seed);
        for step in 0..150 {
            w.chaos();
            w.check(seed, step, "chaos");
            // Clock steps stay below the self-fencing margin per tick: an
            // instance manager reconciles several times a second.
            w.now += w.rng.below(lease::SELF_FENCE_MARGIN_MS as u64) as i64;
            let mut order: Vec<usize> = (0..w.nodes.len()).collect();
            for j in (1..order.len()).rev() {
                let r = w.rng.below(j as u64 + 1) as usize;
                order.swap(j, r);
            }
            for i in order {
                w.manager(i);
                w.check(seed, step, "manager");
            }
            w.replicate();
            if w.rng.chance(70) {
                w.write();
            }
            w.check(seed, step, "write");
            w.control_plane();
            w.check(seed, step, "control plane");
        }
        // Invariant 5.
        let diverged = w.status.diverged_instances.len();
        match w.heal(seed) {
            Some(ticks) => healed.push(ticks),
            None => panic!(
                "seed {seed}: no writable primary 40 s after the faults stopped ({diverged} diverged)\n{}",
                w.trace.join("\n")
            ),
        }
        failovers += w
            .trace
            .iter()
            .filter(|t| t.starts_with("FailingOver"))
            .count();
        promotions += w.trace.iter().filter(|t| t.contains("promoted")).count();
        rollout_steps += w
            .trace
            .iter()
            .filter(|t| t.starts_with("upgraded") || t.starts_with("stopped"))
            .count();
        rollouts_done += w
            .trace
            .iter()
            .filter(|t| t.starts_with("UpgradeCompleted"))
            .count();
        held_down += w
            .trace
            .iter()
            .filter(|t| t.starts_with("PrimaryDown"))
            .count();
        definition_changes += w
            .trace
            .iter()
            .filter(|t| t.starts_with("UpdatingInstance"))
            .count();
    }
    healed.sort_unstable();
    println!(
        "{seeds} schedules: {failovers} failovers, {held_down} vanished primaries held down, writable primary again a median {} ticks (max {}) after the faults stopped",
        healed[healed.len() / 2],
        healed[healed.len() - 1]
    );
    // The schedules exercised what they claim to.
    assert!(
        held_down > seeds as usize / 10,
        "only {held_down} vanished primaries held down in {seeds} schedules"
    );
    assert!(
        failovers > seeds as usize / 4,
        "only {failovers} failovers in {seeds} schedules"
    );
    assert!(
        rollout_steps > seeds as usize && rollouts_done > seeds as usize / 4,
        "only {rollout_steps} rollout steps and {rollouts_done} completed rollouts in {seeds} schedules"
    );
    assert!(
        definition_changes > seeds as usize / 4,
        "only {definition_changes} instances recreated for a new definition in {seeds} schedules"
    );
    assert!(
        promotions > seeds as usize / 4,
        "only {promotions} promotions in {seeds} schedules"
    );
}
