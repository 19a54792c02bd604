//! The randomized fault suite's parts that both platforms share: a seeded
//! plan of faults, the read-only watcher, a writer that keeps its
//! connection to whichever instance it reached (as a connection pool does),
//! and the report of outages per fault kind. The platforms' test files
//! (`crates/kubetest/tests/faults.rs`, `crates/cnmysql/tests/faults.rs`)
//! carry the faults out.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use mysql_async::{Conn, OptsBuilder};

pub use crate::fault_plan::{
    FREEZE, Fault, KUBERNETES, LOCAL, RECOVERY_BOUND, RESUME_GRACE, WHOLE_BOUND, WHOLE_CLUSTER,
    count, plan, seed,
};

/// Where an instance's server answers, for the watcher and the writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub name: String,
    pub host: String,
    pub port: u16,
}

fn opts(t: &Target, password: &str) -> mysql_async::Opts {
    OptsBuilder::default()
        .ip_or_hostname(t.host.clone())
        .tcp_port(t.port)
        .user(Some("app"))
        .pass(Some(password.to_string()))
        .prefer_socket(false)
        .into()
}

/// One answer of the watcher.
#[derive(Clone, Debug)]
struct Sample {
    round: u64,
    instance: String,
    writable: bool,
    /// When the server evaluated the query (its clock: every instance runs
    /// on this machine), as seconds since the epoch. Not when the answer
    /// arrived: an answer computed just before a network cut arrives
    /// seconds after the heal, when TCP retransmits it, and says nothing
    /// about that later moment.
    evaluated: f64,
}

/// Reads `@@read_only` of every instance every 200 ms, all at once, each
/// over a connection it keeps.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Watcher {
    /// Watch the instances in `targets` (the test keeps it current: Pod
    /// addresses change when Pods are recreated).
    pub fn start(targets: Arc<Mutex<Vec<Target>>>, password: String) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s, out) = (stop.clone(), samples.clone());
        let task = tokio::spawn(async move {
            let conns: Arc<tokio::sync::Mutex<BTreeMap<String, (Target, Conn)>>> =
                Default::default();
            let mut round = 0u64;
            while !s.load(Ordering::Relaxed) {
                round += 1;
                let list = targets.lock().unwrap().clone();
                let mut tasks = Vec::new();
                for t in list {
                    let (conns, out, password) = (conns.clone(), out.clone(), password.clone());
                    tasks.push(tokio::spawn(async move {
                        let held = conns.lock().await.remove(&t.name).filter(|(a, _)| *a == t);
                        let conn = match held {
                            Some((_, c)) => Some(c),
                            None => tokio::time::timeout(
                                Duration::from_millis(500),
                                Conn::new(opts(&t, &password)),
                            )
                            .await
                            .ok()
                            .and_then(Result::ok),
                        };
                        let Some(mut c) = conn else { return };
                        // A frozen server answers when it runs again: the
                        // answer then counts from that moment.
                        let r = tokio::time::timeout(
                            Duration::from_secs(60),
                            c.query_first::<(i64, f64, u64), _>(
                                "SELECT @@read_only, CAST(UNIX_TIMESTAMP(NOW(6)) AS DOUBLE), CONNECTION_ID()",
                            ),
                        )
                        .await;
                        if let Ok(Ok(Some((ro, evaluated, conn_id)))) = r {
                            if std::env::var_os("CNMYSQL_WATCH_DEBUG").is_some() && ro == 0 {
                                eprintln!("watch {} round {round} writable at {evaluated:.3} conn {conn_id} answered {:.3}", t.name, std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64());
                            }
                            out.lock().unwrap().push(Sample {
                                round,
                                instance: t.name.clone(),
                                writable: ro == 0,
                                evaluated,
                            });
                            conns.lock().await.insert(t.name.clone(), (t, c));
                        }
                    }));
                }
                // The next round does not wait for a frozen instance.
                tokio::time::sleep(Duration::from_millis(200)).await;
                drop(tasks);
            }
        });
        Watcher {
            stop,
            samples,
            task: Some(task),
        }
    }

    /// Stop, and list the moments two instances answered writable within
    /// [`OVERLAP`] of each other, leaving out answers given within
    /// [`RESUME_GRACE`] after their instance resumed (`resumed`), and pairs
    /// whose earlier answer came from a server proven dead before the later
    /// one (`died`): a server killed just after it answered cannot have been
    /// writable when another was promoted after its death.
    pub async fn stop(
        mut self,
        resumed: &[(String, Instant)],
        died: &[(String, Instant)],
    ) -> WatchReport {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        let samples = self.samples.lock().unwrap().clone();
        // Instants of this process as the servers' clock reads them.
        let (base, base_unix) = (
            Instant::now(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64(),
        );
        let unix = |at: Instant| base_unix - (base - at).as_secs_f64();
        let excused = |s: &Sample| {
            resumed.iter().any(|(n, at)| {
                let at = unix(*at);
                *n == s.instance
                    && s.evaluated >= at
                    && s.evaluated < at + RESUME_GRACE.as_secs_f64()
            })
        };
        let dead_between = |earlier: &Sample, later: &Sample| {
            died.iter().any(|(n, at)| {
                let at = unix(*at);
                *n == earlier.instance && earlier.evaluated < at && at < later.evaluated
            })
        };
        let writable: Vec<&Sample> = samples.iter().filter(|s| s.writable).collect();
        let mut overlaps = Vec::new();
        let mut excused_answers = 0;
        for (i, a) in writable.iter().enumerate() {
            for b in &writable[i + 1..] {
                if a.instance == b.instance {
                    continue;
                }
                let apart = Duration::from_secs_f64((a.evaluated - b.evaluated).abs());
                if apart > OVERLAP {
                    continue;
                }
                let (earlier, later) = if a.evaluated <= b.evaluated {
                    (a, b)
                } else {
                    (b, a)
                };
                if excused(a) || excused(b) || dead_between(earlier, later) {
                    excused_answers += 1;
                    continue;
                }
                overlaps.push(format!(
                    "{} and {} both writable (rounds {} and {}, {} ms apart, evaluated at {:.3} and {:.3})",
                    a.instance,
                    b.instance,
                    a.round,
                    b.round,
                    apart.as_millis(),
                    a.evaluated,
                    b.evaluated
                ));
            }
        }
        WatchReport {
            samples: samples.len(),
            overlaps,
            excused: excused_answers,
            resumed_writable: resumed
                .iter()
                .map(|(n, at)| writable_after(&samples, n, unix(*at)))
                .collect(),
        }
    }
}

/// How long `instance`, resumed at `at` (the servers' clock), still
/// answered writable: until its last writable answer before its first
/// read-only one (or within the next [`RECOVERY_BOUND`] if none came).
fn writable_after(samples: &[Sample], instance: &str, at: f64) -> Duration {
    let mut after: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.instance == instance && s.evaluated >= at)
        .filter(|s| s.evaluated < at + RECOVERY_BOUND.as_secs_f64())
        .collect();
    after.sort_by(|a, b| a.evaluated.total_cmp(&b.evaluated));
    let last = after
        .iter()
        .take_while(|s| s.writable)
        .last()
        .map_or(at, |s| s.evaluated);
    Duration::from_secs_f64(last - at)
}

/// The process no longer runs: gone, or a zombie awaiting its reaper.
pub fn process_gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Two answers this close together count as the same moment.
pub const OVERLAP: Duration = Duration::from_millis(100);

pub struct WatchReport {
    pub samples: usize,
    /// Two writable instances at once: the worst bug this product can have.
    pub overlaps: Vec<String>,
    /// Pairs left out because one answer came just after its instance resumed.
    pub excused: usize,
    /// For each resume, how long its instance still answered writable.
    pub resumed_writable: Vec<Duration>,
}

/// Writes numbered rows (from 10^12 up) straight to the instance it
/// connected to, and keeps that connection until it fails, as a connection
/// pool does; then connects to whatever `primary` names now. A deposed
/// primary that still acknowledges writes is caught by the rows it
/// acknowledged that the cluster does not have.
pub struct StickyWriter {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(u64, String, Instant)>>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl StickyWriter {
    pub fn start(primary: Arc<Mutex<Option<Target>>>, password: String) -> StickyWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let (s, log) = (stop.clone(), acked.clone());
        let task = tokio::spawn(async move {
            let mut next = 1_000_000_000_000u64;
            let mut conn: Option<(String, Conn)> = None;
            while !s.load(Ordering::Relaxed) {
                if conn.is_none() {
                    let Some(t) = primary.lock().unwrap().clone() else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    match tokio::time::timeout(
                        Duration::from_secs(1),
                        Conn::new(opts(&t, &password)),
                    )
                    .await
                    {
                        Ok(Ok(c)) => conn = Some((t.name, c)),
                        _ => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    }
                }
                let (name, c) = conn.as_mut().unwrap();
                let r = tokio::time::timeout(
                    Duration::from_secs(120),
                    c.query_drop(format!("INSERT INTO app.w (id) VALUES ({next})")),
                )
                .await;
                match r {
                    Ok(Ok(())) => log
                        .lock()
                        .unwrap()
                        .push((next, name.clone(), Instant::now())),
                    _ => {
                        conn = None;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                // Unknown outcome or not: never reuse a number.
                next += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        StickyWriter {
            stop,
            acked,
            task: Some(task),
        }
    }

    /// Stop; the acknowledged rows, which instance acknowledged each, and
    /// when.
    pub async fn stop(mut self) -> Vec<(u64, String, Instant)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
        self.acked.lock().unwrap().clone()
    }
}

/// The longest stretch without an acknowledged write between `from` and
/// `to` (`acks`: the acknowledgement times of the rw writer), counting from
/// `from`: a fault's outage.
pub fn outage(acks: &[Instant], from: Instant, to: Instant) -> Duration {
    let mut prev = from;
    let mut longest = Duration::ZERO;
    for t in acks.iter().filter(|t| **t > from && **t <= to) {
        longest = longest.max(*t - prev);
        prev = *t;
    }
    // Writes that never came back count up to `to`.
    longest.max(to.saturating_duration_since(prev))
}

/// What watches one run: the rw writer, the sticky writer, the watcher, and
/// the report the platform's loop fills in.
pub struct Run {
    pub seed: u64,
    pub rw: crate::writer::WriteChecker,
    pub sticky: StickyWriter,
    pub watcher: Watcher,
    pub report: Report,
    /// When the run started: fault and acknowledgement times are logged
    /// relative to it.
    pub started: Instant,
    /// Instances continued after a freeze or healed after a cut, and when.
    pub resumed: Vec<(String, Instant)>,
    /// Servers killed, and an instant by which each was proven gone (its
    /// process no longer ran): nothing it answered before can overlap with
    /// another instance's answer after.
    pub died: Vec<(String, Instant)>,
}

impl Run {
    /// Start watching a run: the watcher over `targets`, the sticky writer
    /// following `primary`, beside the already running rw writer.
    pub fn start(
        seed: u64,
        rw: crate::writer::WriteChecker,
        targets: Arc<Mutex<Vec<Target>>>,
        primary: Arc<Mutex<Option<Target>>>,
        password: String,
    ) -> Run {
        Run {
            seed,
            rw,
            sticky: StickyWriter::start(primary, password.clone()),
            watcher: Watcher::start(targets, password),
            report: Report::default(),
            started: Instant::now(),
            resumed: Vec::new(),
            died: Vec::new(),
        }
    }

    /// One fault, from `t0` until the cluster was found healthy: its write
    /// outage, logged with `what` and recorded.
    /// A fault ended: its outage (printed, and kept for the report) is
    /// returned, so that a slow one can be explained by the caller.
    pub fn fault_done(
        &mut self,
        f: Fault,
        what: &str,
        primaries: (&str, &str),
        t0: Instant,
    ) -> Duration {
        let healthy_at = Instant::now();
        let outage = outage(&self.rw.ack_times(), t0, healthy_at);
        // Rows acknowledged before the fault, so that a missing row found
        // at the end can be placed in the fault it belongs to.
        let before = self.rw.ack_times().iter().filter(|t| **t < t0).count();
        eprintln!(
            "{what}: primary {} → {}, write outage {:.2}s, healthy after {:.2}s ({before} rows acknowledged before it; began at +{:.1}s)",
            primaries.0,
            primaries.1,
            outage.as_secs_f64(),
            (healthy_at - t0).as_secs_f64(),
            t0.saturating_duration_since(self.started).as_secs_f64()
        );
        self.report.record(f, outage, healthy_at - t0);
        outage
    }

    /// Stop watching; print the table; fail if two instances were ever
    /// writable at once. Every row either writer got acknowledged.
    pub async fn finish(self, platform: &str) -> Vec<u64> {
        let seed = self.seed;
        let o = self.rw.stop().await;
        let sticky = self.sticky.stop().await;
        let watch = self.watcher.stop(&self.resumed, &self.died).await;
        println!("{}", self.report.render(platform, seed));
        eprintln!(
            "watcher: {} answers, {} pairs left out just after a resume; resumed instances writable for {:?} after they ran again; sticky writer: {} rows acknowledged",
            watch.samples,
            watch.excused,
            watch.resumed_writable,
            sticky.len()
        );
        assert!(
            watch.overlaps.is_empty(),
            "seed {seed}: two writable instances: {:?}",
            watch.overlaps
        );
        // For a post-mortem of a missing row: which instance acknowledged
        // each of the sticky writer's rows, and when (seconds into the run).
        let log: String = sticky
            .iter()
            .map(|(id, who, at)| {
                format!(
                    "{id} {who} +{:.3}\n",
                    at.saturating_duration_since(self.started).as_secs_f64()
                )
            })
            .collect();
        let path = std::env::temp_dir().join(format!("cnmysql-sticky-{seed}.txt"));
        if std::fs::write(&path, log).is_ok() {
            eprintln!("sticky writer's acknowledgements: {}", path.display());
        }
        let mut acked = o.acked;
        acked.extend(sticky.iter().map(|(id, _, _)| *id));
        acked
    }
}

/// Outages and recovery times per fault kind, for the table and JSON.
#[derive(Default)]
pub struct Report {
    by_kind: BTreeMap<Fault, Vec<(Duration, Duration)>>,
}

impl Report {
    /// One fault: its write outage, and how long until healthy again.
    pub fn record(&mut self, f: Fault, outage: Duration, healthy_after: Duration) {
        self.by_kind
            .entry(f)
            .or_default()
            .push((outage, healthy_after));
    }

    pub fn faults(&self) -> usize {
        self.by_kind.values().map(Vec::len).sum()
    }

    /// Kinds whose median outage misses the goal.
    pub fn missed_goals(&self) -> Vec<String> {
        self.by_kind
            .iter()
            .filter_map(|(k, v)| {
                let m = median(v.iter().map(|x| x.0).collect());
                (m > k.goal()).then(|| {
                    format!(
                        "{}: median {:.2}s > goal {:.2}s",
                        k.name(),
                        m.as_secs_f64(),
                        k.goal().as_secs_f64()
                    )
                })
            })
            .collect()
    }

    /// A table for a terminal and one JSON line.
    pub fn render(&self, platform: &str, seed: u64) -> String {
        let mut out = format!(
            "fault suite on {platform}, seed {seed}, {} faults\n{:<28} {:>5} {:>12} {:>12} {:>12} {:>14}\n",
            self.faults(),
            "KIND",
            "N",
            "OUTAGE-MED",
            "OUTAGE-MAX",
            "GOAL",
            "HEALTHY-MAX"
        );
        let mut json = Vec::new();
        for (k, v) in &self.by_kind {
            let outages: Vec<Duration> = v.iter().map(|x| x.0).collect();
            let med = median(outages.clone());
            let max = outages.iter().max().copied().unwrap_or_default();
            let healthy = v.iter().map(|x| x.1).max().unwrap_or_default();
            out += &format!(
                "{:<28} {:>5} {:>11.2}s {:>11.2}s {:>11.2}s {:>13.2}s\n",
                k.name(),
                v.len(),
                med.as_secs_f64(),
                max.as_secs_f64(),
                k.goal().as_secs_f64(),
                healthy.as_secs_f64()
            );
            json.push(serde_json::json!({
                "kind": k.name(),
                "n": v.len(),
                "outage_median_s": med.as_secs_f64(),
                "outage_max_s": max.as_secs_f64(),
                "goal_s": k.goal().as_secs_f64(),
                "healthy_after_max_s": healthy.as_secs_f64(),
            }));
        }
        out += &serde_json::json!({"platform": platform, "seed": seed, "kinds": json}).to_string();
        out
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_plan() {
        assert_eq!(plan(7, 20, KUBERNETES), plan(7, 20, KUBERNETES));
        assert_ne!(plan(7, 20, KUBERNETES), plan(8, 20, KUBERNETES));
        let kinds: std::collections::BTreeSet<Fault> =
            plan(1, 400, LOCAL).into_iter().map(|f| f.0).collect();
        assert_eq!(kinds.len(), LOCAL.len(), "every kind is drawn");
    }

    #[test]
    fn the_outage_is_the_longest_stretch_without_an_acknowledgement() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let acks = [t + s(1), t + s(4), t + s(5)];
        assert_eq!(outage(&acks, t, t + s(6)), s(3));
        assert_eq!(outage(&acks, t + s(4), t + s(6)), s(1));
    }
}
