//! Topology changes on Kubernetes: a real control plane (KUBEBUILDER_ASSETS)
//! and a real node (`crates/kubetest`) running the operator's Deployment and a 3-instance
//! Cluster (`dataDurability: required`), the write checker through the rw
//! Service's ClusterIP. Per run, measured from the fault to when writes
//! flow again (the end of the longest stretch without an acknowledged
//! write after it), to when the status names another primary, to the first
//! write acknowledged through a new connection (1 s timeouts), and the
//! acknowledged rows missing on any instance:
//!
//! - the primary's Pod deleted on notice (`kubectl delete pod`: a handover);
//! - the primary's container PID 1 killed with SIGKILL (a container that
//!   never crashed before: the kubelet starts it again at once);
//! - the primary cut off (no traffic in or out);
//! - the primary frozen (its cgroup in the freezer);
//! - a planned switchover (`kubectl cnmsql promote`): the longest gap;
//! - replica apply lag under the load (`lag`, the figures of `lag.rs`).

use std::path::Path;
use std::time::{Duration, Instant};

use cnmysql_kubetest::KubeCluster;
use cnmysql_workload::load::Load;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::stats;

const NS: &str = "bench";

fn instances() -> Vec<String> {
    ["db-1", "db-2", "db-3"].map(String::from).to_vec()
}

async fn writer(k: &KubeCluster) -> anyhow::Result<cnmysql_workload::writer::WriteChecker> {
    let rw = k.wait_service(NS, "db-rw").await?;
    let pw = k.app_password(NS, "db").await?;
    // Wait until rw reaches the writable primary: kube-proxy follows a
    // change of primary a moment after the status says it is done.
    let last = std::sync::Mutex::new(String::new());
    let reached = cnmysql_kubetest::until(
        "rw to reach the primary",
        Duration::from_secs(30),
        || async {
            use mysql_async::prelude::Queryable as _;
            let seen = async {
                let mut c = cnmysql_kubetest::connect_within(
                    cnmysql_workload::writer::app_opts_at(rw, pw.clone()),
                )
                .await
                .map_err(|e| format!("connecting: {e}"))?;
                c.query_first::<(u8, String), _>("SELECT @@read_only, @@hostname")
                    .await
                    .map_err(|e| format!("querying: {e}"))?
                    .ok_or_else(|| "no row".to_string())
            };
            match seen.await {
                Ok((0, _)) => Some(()),
                Ok((_, h)) => {
                    *last.lock().unwrap() = format!("reached {h}, read-only");
                    None
                }
                Err(e) => {
                    *last.lock().unwrap() = e;
                    None
                }
            }
        },
    )
    .await;
    if let Err(e) = reached {
        let last = last.lock().unwrap().clone();
        let show = |args: &[&str]| k.cp.kubectl(args, None).unwrap_or_else(|e| e.to_string());
        anyhow::bail!(
            "{e}: last {}\n{}\n{}\n{}\n{}\n{}",
            last,
            show(&["-n", NS, "get", "pods", "-o", "wide", "--show-labels"]),
            show(&["-n", NS, "get", "endpointslices", "-o", "wide"]),
            show(&[
                "-n",
                "cnmysql-system",
                "logs",
                "deploy/cnmysql-operator",
                "--tail",
                "10"
            ]),
            node_view(rw, &primary_ip(k).await),
            show(&[
                "-n",
                NS,
                "get",
                "cluster",
                "db",
                "-o",
                "jsonpath={.status.currentPrimary} {.status.targetPrimary} {.status.phase} {.status.phaseReason}"
            ]),
        );
    }
    Ok(cnmysql_workload::writer::WriteChecker::start_at(rw, pw).await)
}

/// What the nodes' kube-proxy programmed for rw, their neighbours and the
/// connections tracked to it (for a failure report).
fn node_view(rw: std::net::SocketAddr, primary_ip: &str) -> String {
    let script = "for ns in /run/netns/cnmysql-rn-*; do echo \"== $ns\"; \
        nsenter --net=$ns nft list table ip kube-proxy | grep -A8 'bench/db-rw'; \
        nsenter --net=$ns ip neigh; nsenter --net=$ns conntrack -L -p tcp --dport 3306 2>/dev/null | tail -20; done; \
        for d in /tmp/cnmysql-realnode-*; do echo \"== $d/kube-proxy.log\"; tail -15 $d/kube-proxy.log; done; \
        echo '== host'; ip route get $RW; ip neigh | grep 10.243; conntrack -L -d $RW 2>/dev/null | tail -5; \
        timeout 2 bash -c \"</dev/tcp/$RW/3306\" && echo 'host -> rw: connects' || echo 'host -> rw: fails'; \
        timeout 2 bash -c \"</dev/tcp/$PRIMARY/3306\" && echo 'host -> primary Pod: connects' || echo 'host -> primary Pod: fails'; \
        for ns in /run/netns/cnmysql-rn-*; do nsenter --net=$ns timeout 2 bash -c \"</dev/tcp/$RW/3306\" && echo 'node -> rw: connects' || echo 'node -> rw: fails'; done";
    std::process::Command::new("bash")
        .args(["-c", script])
        .env("RW", rw.ip().to_string())
        .env("PRIMARY", primary_ip)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The current primary's Pod address, for a failure report.
async fn primary_ip(k: &KubeCluster) -> String {
    let Ok(st) = k.cluster_status(NS, "db").await else {
        return String::new();
    };
    let pods: Api<Pod> = Api::namespaced(k.client.clone(), NS);
    let Some(p) = st.current_primary else {
        return String::new();
    };
    pods.get(&p)
        .await
        .ok()
        .and_then(|p| p.status?.pod_ip)
        .unwrap_or_default()
}

/// One fault on the primary, and its figures.
async fn fault_run(k: &KubeCluster, kind: &str, load: usize) -> anyhow::Result<FaultRun> {
    let old = k
        .wait_healthy(NS, "db", 3, Duration::from_secs(180))
        .await?;
    let w = writer(k).await?;
    let load = Load::start(load_opts(k).await?, load).await?;
    w.wait_for_more(200, Duration::from_secs(30)).await;
    let routes = cnmysql_kubetest::routes::Routes::watch(k.client.clone(), NS).await?;
    // Everything the fault and the probes need is read before the clock
    // starts: API reads after it would count as outage.
    let opts = load_opts(k).await?;
    let pods: Api<Pod> = Api::namespaced(k.client.clone(), NS);
    let (rw, pid) = match kind {
        "kill" => (
            Some(k.wait_service(NS, "db-rw").await?),
            Some(k.pid(NS, &old, "mysql").await?),
        ),
        _ => (None, None),
    };
    let at = Instant::now();
    let mut probe = None;
    let promoted = tokio::spawn(named_primary(k.clusters(NS), old.clone(), at));
    match kind {
        "delete" => {
            pods.delete(&old, &DeleteParams::default()).await?;
        }
        "kill" => {
            let (rw, pid) = (rw.expect("read above"), pid.expect("read above"));
            probe = Some(tokio::spawn(greetings(rw, Duration::from_secs(4))));
            eprintln!("killing {old}'s PID 1 at {}", jiff::Timestamp::now());
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )?;
        }
        "cut" | "freeze" => k.fault(kind, NS, &old).await?,
        _ => unreachable!(),
    }
    // Only attempts begun once the fault is in place count.
    let fresh = tokio::spawn(fresh_write(opts, at, Duration::from_secs(60)));
    // A Pod deleted on notice keeps serving until it has handed over:
    // wait for the change of primary before counting the writes after it.
    if kind == "delete" {
        cnmysql_kubetest::until("the handover", Duration::from_secs(60), || async {
            let p = k.cluster_status(NS, "db").await.ok()?.current_primary?;
            (p != old).then_some(())
        })
        .await?;
    }
    // Writes flow again: 200 more acknowledged after the fault.
    w.wait_for_more(200, Duration::from_secs(120)).await;
    load.stop().await;
    let o = w.stop().await;
    let secs = o.outage_after(at).as_secs_f64();
    if secs > 1.0 {
        eprintln!("failures after the fault:\n{}", o.failures_after(at));
        let end = at + Duration::from_secs_f64(secs + 0.5);
        eprintln!(
            "routing from the fault:\n{}",
            routes.between(at, at - Duration::from_millis(500), end)
        );
        if kind == "delete" {
            // A handover's steps, as the managers and the operator logged
            // them (the deleted Pod's own lines went with it).
            let logged = crate::timeline::around(k, NS, &instances(), (at, end));
            eprintln!("logged from the fault:\n{logged}");
        }
    }
    if let Some(p) = probe {
        eprintln!(
            "what a new connection to rw met after the kill:\n{}",
            p.await?
        );
        eprintln!(
            "the restarted container's first lines:\n{}",
            first_lines(k, &old, None).await
        );
        for other in instances().iter().filter(|i| **i != old) {
            eprintln!("{other} since:\n{}", first_lines(k, other, Some(12)).await);
        }
    }
    if matches!(kind, "cut" | "freeze") {
        k.fault("heal", NS, &old).await?;
    }
    let new = k
        .wait_healthy(NS, "db", 3, Duration::from_secs(180))
        .await?;
    let lost = k.rows_missing(NS, "db", &instances(), &o.acked).await?;
    let promoted = promoted.await?.map(|t| t.as_secs_f64());
    let fresh = fresh.await?.map(|t| t.as_secs_f64());
    if kind == "kill" {
        // The kubelet holds a container that crashed before back for a
        // while (CrashLoopBackOff): each run's kill meets a container that
        // never crashed, as a one-off crash does. The primary's Pod is
        // deleted on notice (it hands over) and made again.
        pods.delete(&new, &DeleteParams::default()).await?;
        cnmysql_kubetest::until("the handover", Duration::from_secs(60), || async {
            let p = k.cluster_status(NS, "db").await.ok()?.current_primary?;
            (p != new).then_some(())
        })
        .await?;
    }
    Ok(FaultRun {
        secs,
        lost,
        how: format!("{old} → {new}"),
        promoted,
        fresh,
    })
}

/// One fault run's figures.
struct FaultRun {
    /// Seconds until the write checker's writes flow again.
    secs: f64,
    /// Acknowledged rows missing on an instance.
    lost: usize,
    how: String,
    /// Seconds until the status named another primary (None: it kept
    /// the same one, restarted in place).
    promoted: Option<f64>,
    /// Seconds until a write through a new connection to rw was first
    /// acknowledged: what a client with short timeouts, or a pool that
    /// opens new connections, meets; the checker's own figure is floored
    /// by its 5 s statement timeout on a server that stopped answering.
    fresh: Option<f64>,
}

/// How long until the status names a primary other than `old` (within
/// two minutes).
async fn named_primary(
    clusters: Api<cnmysql_api::Cluster>,
    old: String,
    at: Instant,
) -> Option<Duration> {
    while at.elapsed() < Duration::from_secs(120) {
        if let Ok(c) = clusters.get("db").await
            && c.status
                .and_then(|st| st.current_primary)
                .is_some_and(|p| p != old)
        {
            return Some(at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// When, after `at`, a write through a new connection to rw is first
/// acknowledged: one attempt every 100 ms from now, each given 1 s to
/// connect and 1 s to commit.
async fn fresh_write(opts: mysql_async::Opts, at: Instant, span: Duration) -> Option<Duration> {
    use mysql_async::prelude::*;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tries = tokio::task::JoinSet::new();
    while at.elapsed() < span {
        let (opts, tx) = (opts.clone(), tx.clone());
        tries.spawn(async move {
            let one = async {
                let mut c =
                    tokio::time::timeout(Duration::from_secs(1), mysql_async::Conn::new(opts))
                        .await
                        .ok()?
                        .ok()?;
                tokio::time::timeout(
                    Duration::from_secs(1),
                    c.query_drop("INSERT INTO app.probe () VALUES ()"),
                )
                .await
                .ok()?
                .ok()
            };
            if one.await.is_some() {
                let _ = tx.send(at.elapsed());
            }
        });
        tokio::select! {
            Some(t) = rx.recv() => return Some(t),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    None
}

/// The first lines the restarted `mysql` container of `pod` logged: the
/// manager's and the server's start, timed.
async fn first_lines(k: &KubeCluster, pod: &str, since_seconds: Option<i64>) -> String {
    let pods: Api<Pod> = Api::namespaced(k.client.clone(), NS);
    let params = kube::api::LogParams {
        container: Some("mysql".into()),
        timestamps: true,
        since_seconds,
        ..Default::default()
    };
    match pods.logs(pod, &params).await {
        Ok(text) => text
            .lines()
            .filter(|l| {
                !l.contains("\"source\":\"mysqld\"")
                    || l.contains("ready for connections")
                    || l.contains("Slave I/O")
                    || l.contains("Replica I/O")
            })
            .take(40)
            .map(|l| format!("    {}\n", l.chars().take(260).collect::<String>()))
            .collect(),
        Err(e) => format!("    (no logs: {e})\n"),
    }
}

/// The table a new connection's write goes to (`fresh_write`).
async fn probe_table(k: &KubeCluster) -> anyhow::Result<()> {
    use mysql_async::prelude::*;
    k.wait_healthy(NS, "db", 3, Duration::from_secs(240))
        .await?;
    let opts = load_opts(k).await?;
    cnmysql_kubetest::until("the probe table", Duration::from_secs(60), || async {
        let mut c = mysql_async::Conn::new(opts.clone()).await.ok()?;
        c.query_drop("CREATE TABLE IF NOT EXISTS app.probe (id BIGINT AUTO_INCREMENT PRIMARY KEY)")
            .await
            .ok()
    })
    .await?;
    Ok(())
}

/// Replica apply lag under `load` through rw, 20 s a run, each replica
/// asked through its Pod's address (issue 46: the real node gives each
/// Pod its own share of CPU, as production does).
async fn lag_runs(
    k: &KubeCluster,
    runs: usize,
    load: crate::lag::Workload,
) -> anyhow::Result<Value> {
    let mut figures = crate::lag::Figures::default();
    let mut api = Vec::new();
    for i in 0..runs {
        k.wait_healthy(NS, "db", 3, Duration::from_secs(240))
            .await?;
        let pw = k.app_password(NS, "db").await?;
        let primary = k.cluster_status(NS, "db").await?.current_primary;
        let pods: Api<Pod> = Api::namespaced(k.client.clone(), NS);
        let mut replicas = Vec::new();
        for name in instances()
            .into_iter()
            .filter(|n| Some(n) != primary.as_ref())
        {
            let ip: std::net::IpAddr = pods
                .get(&name)
                .await?
                .status
                .and_then(|s| s.pod_ip)
                .ok_or_else(|| anyhow::anyhow!("{name} has no address"))?
                .parse()?;
            if let Some(sql) = crate::lag::replica_sql(&name) {
                k.root_sql(NS, "db", &name, &sql).await?;
            }
            let opts = cnmysql_workload::writer::app_opts_at((ip, 3306).into(), pw.clone());
            replicas.push(mysql_async::Conn::new(opts).await?);
        }
        let before = crate::api_requests::Counts::read(&k.cp)?;
        let began = std::time::Instant::now();
        let r = crate::lag::measure(load_opts(k).await?, replicas, load, Duration::from_secs(20))
            .await?;
        let after = crate::api_requests::Counts::read(&k.cp)?;
        figures.add(&format!("kube lag run {} ({load})", i + 1), &r);
        api.push(before.rates(&after, began.elapsed().as_secs_f64()));
    }
    let mut out = figures.json();
    out["api_requests_during_runs"] = Value::Array(api);
    Ok(out)
}

/// For trying a server setting by hand: `CNMYSQL_BENCH_PARAMETERS`
/// (`name=value,…`) added to the Cluster's `spec.mysql.parameters`.
fn with_parameters(manifest: String) -> String {
    let Ok(extra) = std::env::var("CNMYSQL_BENCH_PARAMETERS") else {
        return manifest;
    };
    let lines: String = extra
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| format!("      {}: \"{}\"\n", k.trim(), v.trim()))
        .collect();
    eprintln!("parameters added: {extra}");
    manifest.replacen("    parameters:\n", &format!("    parameters:\n{lines}"), 1)
}

/// Where the load connects: rw, as the write checker.
async fn load_opts(k: &KubeCluster) -> anyhow::Result<mysql_async::Opts> {
    let rw = k.wait_service(NS, "db-rw").await?;
    let pw = k.app_password(NS, "db").await?;
    Ok(cnmysql_workload::writer::app_opts_at(rw, pw))
}

/// What a new TCP connection to `rw` meets, opened every 25 ms for `span`
/// from now: refused, connected and greeted (how soon), or connected and
/// never greeted within 3 s. One line per change of outcome.
async fn greetings(rw: std::net::SocketAddr, span: Duration) -> String {
    use tokio::io::AsyncReadExt as _;
    let start = Instant::now();
    let mut tries = Vec::new();
    while start.elapsed() < span {
        let opened = start.elapsed();
        tries.push(tokio::spawn(async move {
            let limit = Duration::from_secs(3);
            let outcome =
                match tokio::time::timeout(limit, tokio::net::TcpStream::connect(rw)).await {
                    Err(_) => "connect timed out".to_string(),
                    Ok(Err(e)) => format!("connect: {}", e.kind()),
                    Ok(Ok(mut c)) => {
                        let mut b = [0u8; 8];
                        let t = Instant::now();
                        match tokio::time::timeout(limit, c.read(&mut b)).await {
                            Err(_) => "connected, no greeting within 3 s".to_string(),
                            Ok(Ok(0)) => "connected, closed".to_string(),
                            Ok(Ok(_)) if t.elapsed() > Duration::from_millis(100) => {
                                format!("greeted after {:.2}s", t.elapsed().as_secs_f64())
                            }
                            Ok(Ok(_)) => "greeted".to_string(),
                            Ok(Err(e)) => format!("connected, then {}", e.kind()),
                        }
                    }
                };
            (opened, outcome)
        }));
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut out = String::new();
    let mut last = String::new();
    for t in tries {
        let Ok((opened, outcome)) = t.await else {
            continue;
        };
        if outcome != last || outcome.starts_with("greeted after") {
            out.push_str(&format!("  +{:.3}s {outcome}\n", opened.as_secs_f64()));
            last = outcome;
        }
    }
    out
}

async fn switchover_run(
    k: &KubeCluster,
    cnmysql: &Path,
    load: usize,
) -> anyhow::Result<(Option<f64>, usize, Option<String>)> {
    let old = k
        .wait_healthy(NS, "db", 3, Duration::from_secs(180))
        .await?;
    let target = instances().into_iter().find(|i| *i != old).unwrap();
    let w = writer(k).await?;
    let load = Load::start(load_opts(k).await?, load).await?;
    w.wait_for_more(200, Duration::from_secs(30)).await;
    let routes = cnmysql_kubetest::routes::Routes::watch(k.client.clone(), NS).await?;
    // A target too far behind is refused at once, or given up on if it
    // falls behind while waiting: the primary keeps serving. Measured as
    // such (`None`), not a failure.
    let refused = k
        .plugin(cnmysql, &["cnmsql", "-n", NS, "promote", "db", &target])
        .err()
        .map(|e| e.to_string());
    // `promote` returns once rw routes to the target (or with why not).
    w.wait_for_more(200, Duration::from_secs(30)).await;
    load.stop().await;
    let o = w.stop().await;
    say_what_routed_around_the_gap(&o, &routes);
    if let Some(span) = o.longest_gap_span() {
        let logged = crate::timeline::around(k, NS, &instances(), span);
        eprintln!("  logged around it:\n{logged}");
    }
    // Health is waited for without the load: replicas that cannot keep up
    // with it (MySQL, 16 writers, 2 cores) would otherwise never be ready.
    let now = k
        .wait_healthy(NS, "db", 3, Duration::from_secs(180))
        .await?;
    let given_up = match refused {
        Some(why) => Some(why),
        None if now != target => Some(format!("the switchover ended on {now}")),
        None => None,
    };
    let lost = k.rows_missing(NS, "db", &instances(), &o.acked).await?;
    Ok((
        given_up.is_none().then_some(o.longest_gap.as_secs_f64()),
        lost,
        given_up,
    ))
}

/// The routing changes around the longest gap, and what the checker met in
/// it, times from the gap's start.
fn say_what_routed_around_the_gap(
    o: &cnmysql_workload::writer::Outcome,
    routes: &cnmysql_kubetest::routes::Routes,
) {
    let Some((from, to)) = o.longest_gap_span() else {
        return;
    };
    let around = routes.between(
        from,
        from - Duration::from_secs(2),
        to + Duration::from_secs(1),
    );
    eprintln!(
        "  longest gap {:.3}s; routing around it (from its start):\n{around}  the checker met:\n{}",
        (to - from).as_secs_f64(),
        o.failures_after(from)
    );
}

pub fn kube(
    runs: usize,
    slow_runs: usize,
    cases: &[String],
    lag_loads: &[crate::lag::Workload],
    cnmysql: &Path,
    load: usize,
) -> anyhow::Result<Value> {
    let wanted = |case: &str| cases.is_empty() || cases.iter().any(|c| c == case);
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let k = KubeCluster::start(cnmysql).await?;
        let ns: Api<Namespace> = Api::all(k.client.clone());
        ns.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}}))?,
        )
        .await?;
        let manifest = with_parameters(cnmysql_kubetest::cluster_manifest(NS, "db", "required"));
        k.cp.kubectl(&["apply", "-f", "-"], Some(&manifest))?;
        probe_table(&k).await?;
        let mut out = serde_json::Map::new();
        out.insert("load_writers".into(), json!(load));
        if wanted("lag") {
            let default = [crate::lag::Workload::Writers(load.max(1))];
            let mut lag = serde_json::Map::new();
            for &l in if lag_loads.is_empty() { &default[..] } else { lag_loads } {
                lag.insert(l.key(), lag_runs(&k, runs, l).await?);
            }
            out.insert("lag".into(), Value::Object(lag));
        }
        let (mut gaps, mut lost, mut given_up) = (Vec::new(), Vec::new(), 0usize);
        for i in 0..if wanted("switchover") { runs } else { 0 } {
            match switchover_run(&k, cnmysql, load).await? {
                (Some(g), l, _) => {
                    eprintln!("kube switchover run {}: longest write gap {g:.3}s, {l} rows lost", i + 1);
                    gaps.push(g);
                    lost.push(l as f64);
                }
                (None, l, why) => {
                    eprintln!(
                        "kube switchover run {}: given up, writes kept flowing, {l} rows lost: {}",
                        i + 1,
                        why.unwrap_or_default()
                    );
                    given_up += 1;
                    lost.push(l as f64);
                }
            }
        }
        out.insert(
            "switchover".into(),
            json!({"longest_write_gap_seconds": stats(gaps), "acknowledged_rows_lost": stats(lost), "given_up": given_up}),
        );
        for (kind, label, n) in [
            ("delete", "pod_deleted", runs),
            ("kill", "pid1_killed", runs),
            ("cut", "node_cut_off", slow_runs),
            ("freeze", "node_frozen", slow_runs),
        ] {
            let (mut secs, mut lost, mut named, mut fresh) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for i in 0..if wanted(kind) { n } else { 0 } {
                let r = fault_run(&k, kind, load).await?;
                eprintln!(
                    "kube failover ({label}) run {}: writes flow {:.3}s after the fault ({}), another primary named after {:?} s, a new connection's write after {:?} s, {} rows lost",
                    i + 1,
                    r.secs,
                    r.how,
                    r.promoted,
                    r.fresh,
                    r.lost
                );
                secs.push(r.secs);
                lost.push(r.lost as f64);
                named.extend(r.promoted);
                fresh.extend(r.fresh);
            }
            out.insert(
                format!("failover_{label}"),
                json!({
                    "fault_to_writes_seconds": stats(secs),
                    "fault_to_new_primary_named_seconds": stats(named),
                    "fault_to_new_connection_write_seconds": stats(fresh),
                    "acknowledged_rows_lost": stats(lost),
                }),
            );
        }
        anyhow::Ok(Value::Object(out))
    })
}
