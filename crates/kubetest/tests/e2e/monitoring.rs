//! A real Prometheus scraping the operator with the job the shipped
//! PodMonitor stands for, and the shipped alert rules firing for real
//! faults on the node, then resolving.

use super::*;
use cnmysql_kubetest::prometheus::{Prometheus, scaled_rules};
use cnmysql_operator::install;

/// The rules' waits for a test: every `for:` 2 s, and a backup "too old"
/// after 45 s instead of two days. The expressions are the shipped ones.
const FOR: &str = "2s";
const BACKUP_AGE: u64 = 45;

impl Env {
    /// A replica, the primary not: the first, or the second.
    async fn replica(&self, nth: usize) -> String {
        let primary = self.status().await.current_primary.unwrap();
        ["db-1", "db-2", "db-3"]
            .into_iter()
            .filter(|i| *i != primary)
            .nth(nth)
            .unwrap()
            .to_string()
    }

    /// `sql` as root on `pod`'s server, on a thread of its own (it may
    /// hold a lock for a while).
    async fn root_sql_in_background(
        &self,
        pod: &str,
        sql: &str,
    ) -> std::thread::JoinHandle<String> {
        let (cp_dir, pod, sql) = (
            self.k.cp.dir().to_path_buf(),
            pod.to_string(),
            sql.to_string(),
        );
        let password = self.k.password_of(NS, "db-root").await.unwrap();
        let client = match std::env::var("CNMYSQL_TEST_FLAVOR").as_deref() {
            Ok("mysql") => "mysql",
            _ => "mariadb",
        };
        std::thread::spawn(move || {
            let out = std::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(cp_dir.join("kubeconfig"))
                .args(["-n", NS, "exec", &pod, "-c", "mysql", "--", client])
                .args(["--socket=/run/cnmysql/mysqld.sock", "--user=root"])
                .arg(format!("--password={password}"))
                .args(["--batch", "-e", &sql])
                .output()
                .unwrap();
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}

/// A transaction only `pod` holds, written past its read-only guard as
/// root, then its replication stopped: the next time its manager follows
/// the primary it finds its history diverged.
fn errant_write() -> &'static str {
    match std::env::var("CNMYSQL_TEST_FLAVOR").as_deref() {
        Ok("mysql") => {
            "SET GLOBAL super_read_only = OFF; CREATE DATABASE cnmysql_errant; STOP REPLICA"
        }
        _ => "CREATE DATABASE cnmysql_errant; STOP SLAVE",
    }
}

async fn fires(p: &Prometheus, alert: &str, timeout: Duration) -> serde_json::Value {
    let began = Instant::now();
    let labels = match p.wait_firing(alert, NS, timeout).await {
        Ok(l) => l,
        Err(err) => panic!(
            "{err}\nalerts: {:?}\nprometheus log:\n{}",
            p.alerts().await.ok(),
            p.log()
        ),
    };
    eprintln!("{alert} firing after {:.1?}: {labels}", began.elapsed());
    labels
}

/// Wait until `alert` resolves; says how long after `since` (the fault's
/// end) it did.
async fn resolves(p: &Prometheus, alert: &str, since: Instant, timeout: Duration) {
    if let Err(err) = p.wait_resolved(alert, NS, timeout).await {
        panic!("{err}\nalerts: {:?}", p.alerts().await.ok());
    }
    eprintln!(
        "{alert} resolved {:.1?} after the fault ended",
        since.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, scripts/setup --kube (Prometheus from Debian's package); run scripts/test-kube"]
pub(crate) async fn a_real_prometheus_fires_the_shipped_alerts_for_real_faults_and_resolves_them() {
    let (e, _s3) = super::backups::env_with_store("monitoring", cluster_yaml("required"), "").await;

    // The job `cnmysql install scrape-config` writes for the default
    // install, and the shipped rules.
    let job = install::scrape_config(&install::Options::default(), None);
    let rules = scaled_rules(install::RULES, FOR, BACKUP_AGE);
    let p = Prometheus::start(e.k.client.clone(), &job, &rules)
        .await
        .unwrap();
    scraped_with_the_instances_own_labels(&p).await;
    quiet_while_healthy(&p).await;
    a_backup_grows_old_then_a_new_one_is_taken(&e, &p).await;
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    a_replica_falls_behind_then_catches_up(&e, &p).await;
    a_replica_diverges_then_heals(&e, &p).await;
    the_primary_stalls_then_fails_over(&e, &p).await;
    w.wait_for_more(50, Duration::from_secs(60)).await;
    let o = w.stop().await;
    e.verify(&o.acked).await;
}

/// Scraped from the operator's Pod, each series with its Cluster's
/// namespace and its instance (not the operator's, not the target's).
async fn scraped_with_the_instances_own_labels(p: &Prometheus) {
    let up = until(
        "the instances' series in Prometheus",
        Duration::from_secs(60),
        || async {
            let r = p.query("cnmysql_instance_up{cluster=\"db\"}").await.ok()?;
            (r.len() == 3).then_some(r)
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", p.log()));
    let mut instances: Vec<&str> = up
        .iter()
        .map(|(m, _)| m["instance"].as_str().unwrap())
        .collect();
    instances.sort();
    assert_eq!(instances, ["db-1", "db-2", "db-3"]);
    assert!(
        up.iter().all(|(m, v)| m["namespace"] == NS && *v == 1.0),
        "{up:?}"
    );
    assert!(up.iter().all(|(m, _)| {
        m["pod"]
            .as_str()
            .is_some_and(|p| p.starts_with("cnmysql-operator"))
    }));
}

/// A healthy cluster: once five scrapes of every instance are in (more
/// than any scaled `for:`), nothing fires and nothing is pending.
async fn quiet_while_healthy(p: &Prometheus) {
    until(
        "five scrapes of every instance",
        Duration::from_secs(30),
        || async {
            let r = p
                .query("count_over_time(cnmysql_instance_up{cluster=\"db\"}[1m]) >= 5")
                .await
                .ok()?;
            (r.len() == 3).then_some(())
        },
    )
    .await
    .unwrap();
    let quiet: Vec<_> = p
        .alerts()
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.2["namespace"] == NS)
        .collect();
    assert!(quiet.is_empty(), "alerts on a healthy cluster: {quiet:?}");
}

async fn a_backup_grows_old_then_a_new_one_is_taken(e: &Env, p: &Prometheus) {
    e.plugin(&["cnmsql", "-n", NS, "backup", "db"]);
    fires(
        p,
        "CnmysqlBackupTooOld",
        Duration::from_secs(BACKUP_AGE + 60),
    )
    .await;
    e.plugin(&["cnmsql", "-n", NS, "backup", "db"]);
    resolves(
        p,
        "CnmysqlBackupTooOld",
        Instant::now(),
        Duration::from_secs(30),
    )
    .await;
}

/// A replica whose applier is held by a read lock for 50 s falls behind
/// past the rule's 30 s; released, it catches up.
async fn a_replica_falls_behind_then_catches_up(e: &Env, p: &Prometheus) {
    let lagging = e.replica(0).await;
    let lock = e
        .root_sql_in_background(&lagging, "FLUSH TABLES WITH READ LOCK; SELECT SLEEP(50)")
        .await;
    let labels = fires(p, "CnmysqlReplicaLagging", Duration::from_secs(60)).await;
    assert_eq!(labels["instance"], lagging.as_str());
    assert_eq!(labels["cluster"], "db");
    eprintln!("{}", lock.join().unwrap());
    // Released, it applies 50 s of backlog while the writer goes on: a
    // MySQL replica did so in 25 s alone on the machine, and in more than
    // 60 s beside another e2e test (the full run's two threads).
    resolves(
        p,
        "CnmysqlReplicaLagging",
        Instant::now(),
        Duration::from_secs(120),
    )
    .await;
}

/// A replica holding a transaction the primary lacks; it heals by itself:
/// what only it held is saved, then it re-clones.
async fn a_replica_diverges_then_heals(e: &Env, p: &Prometheus) {
    let diverged = e.replica(1).await;
    eprintln!(
        "{}",
        e.k.root_sql(NS, "db", &diverged, errant_write())
            .await
            .unwrap_or_else(|e| e.to_string())
    );
    let labels = fires(p, "CnmysqlInstanceDiverged", Duration::from_secs(90)).await;
    let fired = Instant::now();
    assert_eq!(labels["instance"], diverged.as_str());
    resolves(
        p,
        "CnmysqlInstanceDiverged",
        fired,
        Duration::from_secs(300),
    )
    .await;
    e.healthy(3, Duration::from_secs(180)).await;
}

/// The primary's node stalls: no writable primary until the failover.
async fn the_primary_stalls_then_fails_over(e: &Env, p: &Prometheus) {
    let primary = e.status().await.current_primary.unwrap();
    let frozen = Instant::now();
    e.k.fault("freeze", NS, &primary).await.unwrap();
    let labels = fires(p, "CnmysqlNoWritablePrimary", Duration::from_secs(30)).await;
    assert_eq!(labels["cluster"], "db");
    resolves(
        p,
        "CnmysqlNoWritablePrimary",
        frozen,
        Duration::from_secs(60),
    )
    .await;
    e.k.fault("heal", NS, &primary).await.unwrap();
    e.healthy(3, Duration::from_secs(180)).await;
}
