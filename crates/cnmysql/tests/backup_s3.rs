//! Continuous archiving into a real S3 server (SeaweedFS) under the write
//! checker, with `dataDurability: required` (issue 23): a base backup, the
//! store frozen while writes go on (the primary reports it, and catches up
//! once the store is back), a failover (the primary killed), then new
//! Clusters recovered from S3 — to the latest state (exactly the rows the
//! live primary holds, every acknowledged one among them) and to a time
//! before the failover (exactly the rows committed by then). Both flavours:
//! MariaDB commit times are whole seconds, MySQL's microseconds, and the
//! time check says what each means.

mod common;

use std::time::{Duration, Instant};

use cnmysql_envtest::object_store::{ACCESS_KEY_ID, S3Server, SECRET_ACCESS_KEY};
use cnmysql_workload::writer::WriteChecker;
use common::writer::start as start_writer;
use common::*;
use mysql_async::prelude::*;
use nix::sys::signal::Signal;

const DURABLE: &str = "    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: required\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n  failoverDelay: 0\n";

fn store(s: &S3Server, indent: usize) -> String {
    let p = " ".repeat(indent);
    format!(
        "{p}destinationPath: s3://{}/prod\n{p}endpointURL: {}\n{p}pathStyle: true\n{p}s3Credentials:\n{p}  accessKeyId: {{name: store, key: ACCESS_KEY_ID}}\n{p}  secretAccessKey: {{name: store, key: SECRET_ACCESS_KEY}}\n",
        s.bucket, s.endpoint
    )
}

fn recovering(name: &str, s: &S3Server, target: &str) -> String {
    format!(
        "{}  bootstrap:\n    recovery:\n      source:\n        objectStore:\n{}          serverName: s3src\n{target}",
        manifest(name, 1),
        store(s, 10)
    )
}

/// The Cluster's ContinuousArchiving condition: (status, reason).
fn condition(c: &LocalCluster) -> Option<(String, String)> {
    let st = c.status();
    let cond = st["conditions"]
        .as_array()?
        .iter()
        .find(|x| x["type"] == "ContinuousArchiving")?
        .clone();
    Some((
        cond["status"].as_str()?.to_string(),
        cond["reason"].as_str()?.to_string(),
    ))
}

fn archive(c: &LocalCluster) -> serde_json::Value {
    c.instance_status(&c.current_primary())["archive"].clone()
}

fn complete_past(c: &LocalCluster, t: jiff::Timestamp) -> Option<()> {
    let a = archive(c);
    let until: jiff::Timestamp = a["completeUntil"].as_str()?.parse().ok()?;
    (a["error"].as_str().unwrap_or("").is_empty() && until > t).then_some(())
}

/// (count, sum of ids, max id) of the checker's rows on `instance`,
/// optionally only those committed before `before` (a whole second).
async fn rows(c: &LocalCluster, instance: &str, before: Option<i64>) -> (u64, u64, u64) {
    let mut a = c.admin(instance).await;
    let cond = before
        .map(|s| format!("WHERE at < FROM_UNIXTIME({s})"))
        .unwrap_or_default();
    a.query_first(format!(
        "SELECT COUNT(*), CAST(COALESCE(SUM(id), 0) AS UNSIGNED), COALESCE(MAX(id), 0) FROM app.w {cond}"
    ))
    .await
    .unwrap()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archiving_to_s3_survives_an_outage_and_a_failover_and_recovers_exactly() {
    rustls::crypto::ring::default_provider()
        .install_default()
        .ok();
    let s3 = S3Server::start("backups").await.unwrap();
    let secrets = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(secrets.path().join("store")).unwrap();
    std::fs::write(secrets.path().join("store/ACCESS_KEY_ID"), ACCESS_KEY_ID).unwrap();
    std::fs::write(
        secrets.path().join("store/SECRET_ACCESS_KEY"),
        SECRET_ACCESS_KEY,
    )
    .unwrap();
    // The only test of this binary: the local platform reads it when it
    // writes the instances' configuration.
    unsafe { std::env::set_var("CNMYSQL_SECRETS_DIR", secrets.path()) };

    let c = LocalCluster::start(
        "s3src",
        &format!(
            "{}{DURABLE}  backup:\n    objectStore:\n{}",
            manifest("s3src", 3),
            store(&s3, 6)
        ),
    );
    let w = start_writer(&c).await;
    w.wait_for_more(200, Duration::from_secs(30)).await;
    let out = c.local(&["backup"]);
    assert!(
        out.status.success(),
        "backup failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    w.wait_for_more(200, Duration::from_secs(30)).await;

    the_archive_survives_a_store_outage(&c, &s3, &w).await;

    // A time to recover to, with rows on both sides of it.
    w.wait_for_more(100, Duration::from_secs(30)).await;
    let t = jiff::Timestamp::now();
    w.wait_for_more(100, Duration::from_secs(30)).await;
    // MariaDB records commit times in whole seconds: writes go on into a
    // later second than T's before the failover, so some rows are after T.
    wait_for("a second after T's", Duration::from_secs(5), || async {
        (jiff::Timestamp::now().as_second() > t.as_second() + 1).then_some(())
    })
    .await;

    // Failover: the primary killed outright.
    let old = c.current_primary();
    c.signal_instance(&old, Signal::SIGKILL);
    wait_for("a new primary", Duration::from_secs(60), || async {
        let p = c.current_primary();
        (p != old && !p.is_empty()).then_some(())
    })
    .await;
    w.wait_for_more(200, Duration::from_secs(60)).await;
    let o = w.stop().await;
    let done = jiff::Timestamp::now();
    wait_for(
        "the new primary's archive to pass the last write",
        Duration::from_secs(60),
        || async { complete_past(&c, done) },
    )
    .await;
    let lag = archive(&c)["lagSeconds"].clone();
    eprintln!(
        "{} acknowledged, {} failed; archive lag {lag}",
        o.acked.len(),
        o.errors
    );
    let primary = c.current_primary();
    let live = rows(&c, &primary, None).await;
    {
        let mut a = c.admin(&primary).await;
        let ids: Vec<u64> = a.query("SELECT id FROM app.w").await.unwrap();
        let ids: std::collections::BTreeSet<u64> = ids.into_iter().collect();
        let lost: Vec<&u64> = o.acked.iter().filter(|i| !ids.contains(i)).collect();
        assert!(
            lost.is_empty(),
            "acknowledged rows missing on the primary: {lost:?}"
        );
    }

    let latest = LocalCluster::start("s3latest", &recovering("s3latest", &s3, ""));
    assert_eq!(rows(&latest, "s3latest-1", None).await, live);
    latest.down();

    a_recovery_to_a_time_holds_the_rows_begun_before_it(&c, &s3, &primary, t, live).await;
}

/// The store hangs: writes go on, the primary says archiving fails, and
/// without the store's secret; back, archiving catches up.
async fn the_archive_survives_a_store_outage(c: &LocalCluster, s3: &S3Server, w: &WriteChecker) {
    s3.pause();
    let paused = Instant::now();
    let why = wait_for(
        "archiving to report the store",
        Duration::from_secs(90),
        || async {
            let a = archive(c);
            let e = a["error"].as_str().unwrap_or("").to_string();
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    eprintln!("store frozen: reported after {:?}: {why}", paused.elapsed());
    wait_for(
        "the Cluster to say archiving fails",
        Duration::from_secs(30),
        || async { condition(c).filter(|(on, reason)| on == "False" && reason == "Failing") },
    )
    .await;
    assert!(!why.contains(SECRET_ACCESS_KEY), "{why}");
    w.wait_for_more(200, Duration::from_secs(30)).await;
    s3.resume();
    let resumed = jiff::Timestamp::now();
    let back = Instant::now();
    wait_for("archiving to catch up", Duration::from_secs(90), || async {
        complete_past(c, resumed)
    })
    .await;
    eprintln!("store back: caught up in {:?}", back.elapsed());
    wait_for(
        "the Cluster to say archiving works",
        Duration::from_secs(30),
        || async { condition(c).filter(|(on, _)| on == "True") },
    )
    .await;
}

/// To a time: exactly the rows committed before it (MariaDB, whole
/// seconds), or a prefix of the live rows with none begun after it
/// (MySQL).
async fn a_recovery_to_a_time_holds_the_rows_begun_before_it(
    c: &LocalCluster,
    s3: &S3Server,
    primary: &str,
    t: jiff::Timestamp,
    live: (u64, u64, u64),
) {
    let second = t.as_second() + 1;
    let want = rows(c, primary, Some(second)).await;
    let live_rows = stamped(c, primary).await;
    let pitr = LocalCluster::start(
        "s3pitr",
        &recovering(
            "s3pitr",
            s3,
            &format!("      recoveryTarget:\n        targetTime: \"{t}\"\n"),
        ),
    );
    match flavor() {
        // Commit times in whole seconds: exactly the rows begun before the
        // second after T's.
        Flavor::Mariadb => {
            assert_eq!(rows(&pitr, "s3pitr-1", None).await, want);
            assert!(want.0 > 0 && want.0 < live.0, "{want:?} {live:?}");
        }
        // Commit times in microseconds, rows stamped when their statement
        // began: the recovered rows are the live ones up to some id (one
        // writer, so ids are in commit order), none begun after T, and
        // every row begun two seconds before T (semi-sync waits at most
        // a second for an acknowledgement) among them.
        Flavor::Mysql => {
            let got = stamped(&pitr, "s3pitr-1").await;
            let last = got.last().map(|r| r.0).unwrap_or(0);
            let prefix: Vec<(u64, i64)> =
                live_rows.iter().copied().filter(|r| r.0 <= last).collect();
            assert_eq!(got, prefix, "not the live rows up to id {last}");
            let t_us = t.as_microsecond();
            assert!(
                got.iter().all(|r| r.1 <= t_us),
                "a row begun after T was recovered"
            );
            let before = live_rows.iter().filter(|r| r.1 < t_us - 2_000_000).count();
            assert!(
                before > 0 && got.len() >= before && got.len() < live_rows.len(),
                "{before} rows begun well before T, {} recovered, {} live",
                got.len(),
                live_rows.len()
            );
        }
    }
}

/// The checker's rows on `instance`: (id, when its statement began, in
/// microseconds), by id.
async fn stamped(c: &LocalCluster, instance: &str) -> Vec<(u64, i64)> {
    let mut a = c.admin(instance).await;
    a.query("SELECT id, CAST(UNIX_TIMESTAMP(at) * 1000000 AS SIGNED) FROM app.w ORDER BY id")
        .await
        .unwrap()
}
