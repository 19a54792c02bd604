//! Keeping a Pod's containers running: probes (startup, liveness,
//! readiness) and restarts with back-off, as a kubelet does.

use super::*;

pub(super) struct ProbeState {
    pub(super) probe: k8s_openapi::api::core::v1::Probe,
    pub(super) timing: Timing,
    pub(super) next: Instant,
    pub(super) ok: u32,
    pub(super) bad: u32,
}

impl ProbeState {
    pub(super) fn new(
        p: &Option<k8s_openapi::api::core::v1::Probe>,
        from: Instant,
    ) -> Option<ProbeState> {
        p.as_ref().map(|p| {
            let timing = Timing::of(p);
            ProbeState {
                probe: p.clone(),
                timing,
                next: from + timing.initial_delay,
                ok: 0,
                bad: 0,
            }
        })
    }

    /// Run the probe when due; Some(true) when it crossed its success
    /// threshold, Some(false) its failure threshold.
    pub(super) async fn due(
        &mut self,
        c: &Container,
        env: &PodEnv,
        pid1: Option<i32>,
    ) -> Option<bool> {
        if Instant::now() < self.next {
            return None;
        }
        self.next = Instant::now() + self.timing.period;
        let src = IpAddr::V4(env.ctx.block.probe_source());
        if probes::check(&self.probe, c, env.ip, src, pid1).await {
            self.ok += 1;
            self.bad = 0;
            (self.ok >= self.timing.success_threshold).then_some(true)
        } else {
            self.bad += 1;
            self.ok = 0;
            (self.bad >= self.timing.failure_threshold).then_some(false)
        }
    }
}

/// Run a container, restarting it per `policy`, until the Pod stops (None)
/// or it finished for good (its exit code).
pub(super) async fn supervise(
    env: &PodEnv,
    c: &Container,
    slot: Slot,
    policy: &str,
    mut stop: watch::Receiver<Option<Pod>>,
) -> Option<i32> {
    let sh = &env.shared;
    let mut fault = env.fault.clone();
    let mut backoff = Duration::from_secs(1);
    loop {
        // A kubelet starts no container in a Pod that is being deleted.
        if !env.fault.borrow().silent() && stopping(&stop.borrow()).is_some() {
            return None;
        }
        let mut run =
            match start(env, c).await {
                Ok(r) => r,
                Err(e) => {
                    let msg = format!("{e:#}");
                    sh.container(slot, |s| {
                    s.state = json!({"waiting": {"reason": "CreateContainerError", "message": msg}})
                });
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = wait_stop_reachable(&mut stop, &mut fault) => return None,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            };
        if let Some(p) = run.pid1 {
            sh.info.lock().unwrap().pids.insert(c.name.clone(), p);
        }
        let started_at = now();
        let t0 = Instant::now();
        let is_main = matches!(slot, Slot::Main(_));
        let mut startup = if is_main {
            ProbeState::new(&c.startup_probe, t0)
        } else {
            None
        };
        let mut live = if is_main {
            ProbeState::new(&c.liveness_probe, t0)
        } else {
            None
        };
        let mut ready = if is_main {
            ProbeState::new(&c.readiness_probe, t0)
        } else {
            None
        };
        let mut started = startup.is_none();
        sh.container(slot, |s| {
            s.state = json!({"running": {"startedAt": started_at}});
            s.running = true;
            s.started = started && is_main;
            s.ready = started && ready.is_none() && is_main;
        });
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let (code, reason) = loop {
            tokio::select! {
                s = run.child.wait() => {
                    let code = exit_code(s.ok());
                    break (code, if code == 0 { "Completed" } else { "Error" });
                }
                grace = wait_stop_reachable(&mut stop, &mut fault) => {
                    let code = terminate(&mut run, grace).await;
                    sh.container(slot, |s| {
                        s.running = false;
                        s.ready = false;
                        s.state = json!({"terminated": {"exitCode": code, "reason": "Completed", "startedAt": started_at, "finishedAt": now()}});
                    });
                    return None;
                }
                _ = tick.tick() => {
                    if env.fault.borrow().silent() {
                        continue;
                    }
                    if !started {
                        match startup.as_mut().unwrap().due(c, env, run.pid1).await {
                            Some(true) => {
                                started = true;
                                let r = ready.is_none();
                                sh.container(slot, |s| { s.started = true; s.ready = r; });
                            }
                            Some(false) => {
                                let code = terminate(&mut run, grace_of(&env.pod)).await;
                                break (code, "StartupProbeFailed");
                            }
                            None => {}
                        }
                        continue;
                    }
                    if let Some(l) = live.as_mut() && l.due(c, env, run.pid1).await == Some(false) {
                        tracing::info!(pod = ?env.pod.metadata.name, container = c.name, "liveness probe failed; restarting");
                        let code = terminate(&mut run, grace_of(&env.pod)).await;
                        break (code, "LivenessProbeFailed");
                    }
                    if let Some(r) = ready.as_mut()
                        && let Some(v) = r.due(c, env, run.pid1).await
                    {
                        sh.container(slot, |s| if s.ready != v { s.ready = v; });
                    }
                }
            }
        };
        let finished = now();
        let restart = match policy {
            "Always" => true,
            "OnFailure" => code != 0,
            _ => false,
        };
        sh.container(slot, |s| {
            s.running = false;
            s.ready = false;
            s.started = false;
            let term = json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": started_at, "finishedAt": finished}});
            if restart {
                s.last = term;
                s.restarts += 1;
                s.state = json!({"waiting": {"reason": "CrashLoopBackOff"}});
            } else {
                s.state = term;
                s.done = Some(code);
            }
        });
        if !restart {
            return Some(code);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_secs(1);
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = wait_stop_reachable(&mut stop, &mut fault) => return None,
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}
