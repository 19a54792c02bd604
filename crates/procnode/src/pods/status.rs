//! A Pod's status as a kubelet reports it: its containers' states,
//! restarts and readiness, its conditions, patched to the API.

use super::*;

pub(super) fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string()
}

#[derive(Clone, Debug)]
pub(super) struct CStatus {
    pub(super) name: String,
    pub(super) image: String,
    pub(super) ready: bool,
    pub(super) started: bool,
    pub(super) restarts: i32,
    pub(super) state: Value,
    pub(super) last: Value,
    pub(super) running: bool,
    pub(super) done: Option<i32>,
}

impl CStatus {
    pub(super) fn new(c: &Container) -> CStatus {
        CStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            ready: false,
            started: false,
            restarts: 0,
            state: json!({"waiting": {"reason": "PodInitializing"}}),
            last: json!({}),
            running: false,
            done: None,
        }
    }

    pub(super) fn json(&self, pid: Option<i32>) -> Value {
        json!({
            "name": self.name,
            "image": self.image,
            "imageID": format!("procnode://{}", self.image),
            "containerID": pid.map(|p| format!("procnode://{p}")),
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last,
        })
    }
}

pub(super) struct Report {
    pub(super) ip: String,
    pub(super) start: String,
    pub(super) phase: &'static str,
    pub(super) initialized: bool,
    pub(super) init: Vec<CStatus>,
    pub(super) containers: Vec<CStatus>,
    pub(super) transitions: BTreeMap<&'static str, (bool, String)>,
    pub(super) message: Option<String>,
}

pub(super) struct Shared {
    pub(super) report: Mutex<Report>,
    pub(super) changed: Notify,
    pub(super) info: Arc<Mutex<PodInfo>>,
}

impl Shared {
    pub(super) fn update(&self, f: impl FnOnce(&mut Report)) {
        f(&mut self.report.lock().unwrap());
        self.changed.notify_one();
    }

    pub(super) fn status_json(&self) -> Value {
        let mut r = self.report.lock().unwrap();
        let pids = self.info.lock().unwrap().pids.clone();
        let all_ready = !r.containers.is_empty() && r.containers.iter().all(|c| c.ready);
        let mut conds = Vec::new();
        for (t, v) in [
            ("PodScheduled", true),
            ("Initialized", r.initialized),
            ("ContainersReady", all_ready),
            ("Ready", all_ready),
        ] {
            let at = match r.transitions.get(t) {
                Some((old, at)) if *old == v => at.clone(),
                _ => {
                    let at = now();
                    r.transitions.insert(t, (v, at.clone()));
                    at
                }
            };
            conds.push(json!({
                "type": t,
                "status": if v { "True" } else { "False" },
                "lastProbeTime": null,
                "lastTransitionTime": at,
            }));
        }
        json!({"status": {
            "phase": r.phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": r.ip,
            "podIPs": [{"ip": r.ip}],
            "startTime": r.start,
            "conditions": conds,
            "message": r.message,
            "initContainerStatuses": r.init.iter().map(|c| c.json(pids.get(&c.name).copied())).collect::<Vec<_>>(),
            "containerStatuses": r.containers.iter().map(|c| c.json(pids.get(&c.name).copied())).collect::<Vec<_>>(),
        }})
    }
}

#[derive(Clone, Copy)]
pub(super) enum Slot {
    Init(usize),
    Main(usize),
}

impl Shared {
    pub(super) fn container(&self, slot: Slot, f: impl FnOnce(&mut CStatus)) {
        self.update(|r| match slot {
            Slot::Init(i) => f(&mut r.init[i]),
            Slot::Main(i) => f(&mut r.containers[i]),
        })
    }
}
