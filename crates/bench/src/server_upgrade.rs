//! `cnmysql-bench server-upgrade`: server version upgrades on the local
//! platform, 3 instances, `dataDurability: required`, writes through rw
//! throughout, each run on a fresh cluster (an upgrade cannot be undone):
//! total time from `cnmysql local apply` to the upgrade recorded as
//! `Upgraded`, the longest gap between acknowledged writes, failed writes
//! and acknowledged rows lost; beside a plain switchover on the same
//! servers.
//!
//! MariaDB: 10.11.18 → 10.11.19 (patch) and 10.11.19 → 11.8 (major, with
//! `mariadb-upgrade` on every instance). MySQL: the registries carry one
//! version (9.7), so its row moves to a second image of the same version
//! (every step runs, the server's own upgrade check included, but no
//! version changes): `mysql:9.7` → `mysql:9.7-again`, a hard-linked copy
//! of the store's image made here.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Bench, BenchFlavor, DURABLE, cnmysql_bin, flavor, run, stats};

fn manifest(name: &str, flavor: BenchFlavor, image: &str) -> String {
    let f = match flavor {
        BenchFlavor::Mariadb => "mariadb",
        BenchFlavor::Mysql => "mysql",
    };
    format!(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: {name}\nspec:\n  instances: 3\n  mysql:\n    flavor: {f}\n    image: {image}\n    parameters:\n      innodb_buffer_pool_size: 128M\n{DURABLE}"
    )
}

/// The second MySQL image: the store's `mysql:9.7` under another tag.
fn mysql_again() -> anyhow::Result<&'static str> {
    let store = cnmysql_instance::server_image::default_store();
    let from = store.join("mysql/9.7");
    let to = store.join("mysql/9.7-again");
    if !to.join("image.json").exists() {
        anyhow::ensure!(
            from.join("image.json").exists(),
            "no server image mysql:9.7: build it with `scripts/images mysql:9.7`"
        );
        let _ = std::fs::remove_dir_all(&to);
        run(Command::new("cp").arg("-al").arg(&from).arg(&to))?;
        let mut m: Value = serde_json::from_str(&std::fs::read_to_string(to.join("image.json"))?)?;
        m["image"] = "mysql:9.7-again".into();
        std::fs::write(to.join("image.json"), serde_json::to_string_pretty(&m)?)?;
    }
    Ok("mysql:9.7-again")
}

/// One upgrade of a fresh cluster from `from` to `to` under writes:
/// (seconds to Upgraded, longest rw gap, failed writes, rows lost).
fn once(
    rt: &tokio::runtime::Runtime,
    name: &str,
    f: BenchFlavor,
    from: &str,
    to: &str,
) -> anyhow::Result<(f64, f64, u64, usize)> {
    let b = Bench::new();
    b.up_with(&manifest(name, f, from))?;
    let rw = b.ports()["services"]["rw"].as_u64().unwrap() as u16;
    let (secs, o) = rt.block_on(async {
        let w = cnmysql_workload::writer::WriteChecker::start(rw, b.secret("app-password")).await;
        w.wait_for_more(200, Duration::from_secs(20)).await;
        let m = b.dir.path().join("to.yaml");
        std::fs::write(&m, manifest(name, f, to))?;
        let t = Instant::now();
        tokio::task::block_in_place(|| {
            run(Command::new(cnmysql_bin())
                .args(["local", "apply", "-f"])
                .arg(&m)
                .arg("--state-dir")
                .arg(b.state()))?;
            b.wait("the upgrade recorded", Duration::from_secs(600), |s| {
                s["upgradeHistory"]
                    .as_array()
                    .and_then(|h| h.last())
                    .is_some_and(|r| {
                        r["image"] == to && (r["phase"] == "Upgraded" || r["phase"] == "Failed")
                    })
            })
        })?;
        let secs = t.elapsed().as_secs_f64();
        w.wait_for_more(200, Duration::from_secs(20)).await;
        let o = w.stop().await;
        crate::say_where_the_longest_gap_ended(&o)?;
        anyhow::Ok((secs, o))
    })?;
    let last = b.status()["upgradeHistory"]
        .as_array()
        .and_then(|h| h.last().cloned())
        .unwrap_or_default();
    anyhow::ensure!(
        last["phase"] == "Upgraded",
        "the upgrade did not complete: {last:#}"
    );
    let primary = b.current_primary();
    let lost = rt.block_on(b.lost_on(&primary, &o.acked))?;
    eprintln!(
        "{from} → {to}: {secs:.2}s, longest rw write gap {:.3}s, {} writes acknowledged, {} failed, {lost} acknowledged rows lost",
        o.longest_gap.as_secs_f64(),
        o.acked.len(),
        o.errors
    );
    Ok((secs, o.longest_gap.as_secs_f64(), o.errors, lost))
}

pub fn server_upgrade(runs: usize) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Runtime::new()?;
    let f = flavor();
    let paths: Vec<(&str, &str, &str)> = match f {
        BenchFlavor::Mariadb => vec![
            (
                "patch_10_11_18_to_10_11_19",
                "mariadb:10.11.18",
                "mariadb:10.11.19",
            ),
            ("major_10_11_19_to_11_8", "mariadb:10.11.19", "mariadb:11.8"),
        ],
        BenchFlavor::Mysql => vec![("same_version_new_image_9_7", "mysql:9.7", mysql_again()?)],
    };
    let mut out = serde_json::Map::new();
    for (label, from, to) in paths {
        let (mut total, mut gap, mut failed, mut lost) = (Vec::new(), Vec::new(), 0u64, 0usize);
        for _ in 0..runs {
            let (s, g, e, l) = once(&rt, "su", f, from, to)?;
            total.push(s);
            gap.push(g);
            failed += e;
            lost += l;
        }
        out.insert(
            label.into(),
            json!({
                "from": from,
                "to": to,
                "upgrade_3_instances_seconds": stats(total),
                "longest_rw_write_gap_seconds": stats(gap),
                "failed_writes_through_rw": failed,
                "acknowledged_rows_lost": lost,
            }),
        );
    }
    out.insert(
        "switchover_for_comparison".into(),
        crate::switchover(runs, 0)?,
    );
    Ok(Value::Object(out))
}
