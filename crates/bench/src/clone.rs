//! Clone throughput over the mTLS control API versus a plain local copy.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use serde_json::{Value, json};

use crate::harness::*;
pub(crate) use cnmysql_instance::clone::dir_size;

/// Load about `megabytes` MB of rows into `app.t` through the cluster's rw
/// endpoint.
pub(crate) fn load(b: &Bench, megabytes: u64) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    let port = b.ports()["services"]["rw"].as_u64().unwrap() as u16;
    let pw = b.secret("app-password");
    eprintln!("loading {megabytes} MB…");
    rt.block_on(async {
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(port)
            .user(Some("app"))
            .pass(Some(pw));
        let mut c = mysql_async::Conn::new(opts).await?;
        c.query_drop(match flavor() {
            BenchFlavor::Mariadb => "SET SESSION max_recursive_iterations = 1000000",
            BenchFlavor::Mysql => "SET SESSION cte_max_recursion_depth = 1000000",
        })
        .await?;
        c.query_drop("USE app").await?;
        c.query_drop(
            "CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY, body VARCHAR(1100) NOT NULL)",
        )
        .await?;
        let rows = megabytes * 1000;
        let mut lo = 1;
        while lo <= rows {
            let hi = (lo + 49_999).min(rows);
            c.query_drop(format!(
                "INSERT INTO t WITH RECURSIVE s (seq) AS (SELECT {lo} UNION ALL SELECT seq + 1 FROM s WHERE seq < {hi}) \
                 SELECT seq, REPEAT(SHA2(seq, 256), 16) FROM s"
            ))
            .await?;
            lo = hi + 1;
        }
        anyhow::Ok(())
    })
}

pub(crate) fn clone(runs: usize, megabytes: u64) -> anyhow::Result<Value> {
    let b = Bench::new();
    b.up("clone", 1)?;
    load(&b, megabytes)?;
    let primary_dir = b.state().join("instances/clone-1");
    let data_bytes = dir_size(&primary_dir.join("data"));
    // Both sides copy the same data directory, measured from the start of the
    // backup to the end of the extraction (prepare excluded on both sides).
    // Runs alternate between the two, each after a `sync`, so that page-cache
    // write-back of one run does not land on the other.
    let mut baseline = Vec::new();
    let mut ours = Vec::new();
    let mut total = Vec::new();
    let mut ours_bytes = 0u64;
    b.down()?;
    for i in 0..runs {
        // Ours: a new replica cloned through the primary's control API, from
        // an empty instance directory.
        let _ = std::fs::remove_dir_all(b.state().join("instances/clone-2"));
        run(&mut Command::new("sync"))?;
        let t = Instant::now();
        b.up("clone", 2)?;
        let ready = t.elapsed().as_secs_f64();
        let log = std::fs::read_to_string(b.state().join("instances/clone-2/manager.log"))?;
        // The copy itself: MariaDB's stream extracted (prepare excluded),
        // MySQL's CLONE statement.
        let copied = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .rfind(|v| v["message"] == "backup copied; preparing" || v["message"] == "clone copied")
            .ok_or_else(|| anyhow::anyhow!("no clone in the log"))?;
        let mbps = data_bytes as f64 / 1e6 / copied["seconds"].as_f64().unwrap_or(f64::INFINITY);
        ours.push(mbps);
        ours_bytes = copied["bytes"].as_u64().unwrap_or(0);
        total.push(ready);
        eprintln!(
            "clone run {}: {mbps:.0} MB/s ({}); replica ready {ready:.2}s after up",
            i + 1,
            match flavor() {
                BenchFlavor::Mariadb => "stream over mTLS",
                BenchFlavor::Mysql => "clone plugin over TLS",
            }
        );

        if flavor() == BenchFlavor::Mysql {
            let secs = mysql_plain_clone(&b, i)?;
            let mbps = data_bytes as f64 / 1e6 / secs;
            baseline.push(mbps);
            eprintln!(
                "baseline run {}: plain CLONE of {:.0} MB in {secs:.2}s = {mbps:.0} MB/s",
                i + 1,
                data_bytes as f64 / 1e6
            );
            b.down()?;
            continue;
        }
        // Baseline: the backup tool piped straight into the extractor, locally.
        let target = b.dir.path().join(format!("baseline-{i}"));
        let tmp = b.dir.path().join(format!("baseline-tmp-{i}"));
        std::fs::create_dir_all(&target)?;
        std::fs::create_dir_all(&tmp)?;
        let cnf = primary_dir.join("run/backup.cnf");
        run(&mut Command::new("sync"))?;
        let t = Instant::now();
        let sh = format!(
            "mariadb-backup --defaults-file={} --backup --stream=mbstream --parallel=2 --target-dir={} 2>/dev/null | mbstream -x -C {}",
            cnf.display(),
            tmp.display(),
            target.display()
        );
        run(Command::new("bash").args(["-o", "pipefail", "-c", &sh]))?;
        let secs = t.elapsed().as_secs_f64();
        let mbps = data_bytes as f64 / 1e6 / secs;
        baseline.push(mbps);
        eprintln!(
            "baseline run {}: {:.0} MB in {secs:.2}s = {mbps:.0} MB/s",
            i + 1,
            data_bytes as f64 / 1e6
        );
        std::fs::remove_dir_all(&target)?;
        std::fs::remove_dir_all(&tmp)?;
        b.down()?;
    }
    let ratio = {
        let m = |v: &Vec<f64>| {
            let mut v = v.clone();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        m(&ours) / m(&baseline)
    };
    Ok(json!({
        "data_dir_bytes": data_bytes,
        "note": match flavor() {
            BenchFlavor::Mariadb => "MB/s = size of the primary data directory (binary logs included, which neither side copies) over the time from backup start to extracted copy",
            BenchFlavor::Mysql => "MB/s = size of the primary data directory over the time of the CLONE statement: cnmysql's clone (TLS, X509 account, recipient made by the manager) versus the same statement run by hand into a plain recipient server, both from the same primary",
        },
        "streamed_bytes_last_run": ours_bytes,
        "cnmysql_clone_mb_per_s": stats(ours),
        "baseline_mb_per_s": stats(baseline),
        "ratio_of_medians": ratio,
        "replica_ready_after_up_seconds": stats(total),
    }))
}

/// The baseline of MySQL's clone: a plain recipient server of the same
/// image, made and started by hand next to the cluster, runs the same
/// `CLONE INSTANCE` from the primary (TLS, the replication account and a
/// replica's certificate); seconds of the statement.
pub(crate) fn mysql_plain_clone(b: &Bench, run_no: usize) -> anyhow::Result<f64> {
    use cnmysql_instance::config::Programs;
    let spec = cnmysql_api::parse_cluster(&manifest("clone", 2))?.spec;
    let programs = Programs::for_spec(&spec, &cnmysql_instance::server_image::default_store())
        .map_err(anyhow::Error::msg)?;
    let dir = b.dir.path().join(format!("plain-{run_no}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    cnmysql_instance::bootstrap::install_db(spec.mysql.flavor, &programs, &dir.join("data"))?;
    let primary_port = b.ports()["instances"]["clone-1"]["mysql"].as_u64().unwrap();
    let tls = b.state().join("pki");
    let pick = |ext: &str| -> anyhow::Result<PathBuf> {
        std::fs::read_dir(&tls)?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(ext))
            .ok_or_else(|| anyhow::anyhow!("no *{ext} in {}", tls.display()))
    };
    let (ca, cert, key) = (pick("ca.crt")?, pick("clone-2.crt")?, pick("clone-2.key")?);
    let sock = dir.join("s.sock");
    let cnf = format!(
        "[mysqld]\ndatadir = {}\nsocket = {}\npid_file = {}\nskip_networking = ON\nskip_log_bin = ON\nplugin_load_add = mysql_clone.so\nmysqlx = OFF\nsecure_file_priv = NULL\ninnodb_buffer_pool_size = 128M\nclone_valid_donor_list = 127.0.0.1:{primary_port}\nclone_ssl_ca = {}\nclone_ssl_cert = {}\nclone_ssl_key = {}\n",
        dir.join("data").display(),
        sock.display(),
        dir.join("pid").display(),
        ca.display(),
        cert.display(),
        key.display()
    );
    std::fs::write(dir.join("my.cnf"), cnf)?;
    let mut server = programs
        .command(&programs.mysqld)
        .arg(format!("--defaults-file={}", dir.join("my.cnf").display()))
        .arg("--user=root")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let password = b.secret("replication-password");
    let rt = tokio::runtime::Runtime::new()?;
    let secs = rt.block_on(async {
        let opts = mysql_async::OptsBuilder::default()
            .socket(Some(sock.display().to_string()))
            .user(Some("root"))
            .prefer_socket(true);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut c = loop {
            match mysql_async::Conn::new(opts.clone()).await {
                Ok(c) => break c,
                Err(e) if Instant::now() > deadline => anyhow::bail!("plain recipient: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        run(&mut Command::new("sync"))?;
        let t = Instant::now();
        c.query_drop(format!(
            "CLONE INSTANCE FROM 'cnmysql_replication'@'127.0.0.1':{primary_port} IDENTIFIED BY '{}' DATA DIRECTORY = '{}' REQUIRE SSL",
            password.replace('\'', "''"),
            dir.join("copy").display()
        ))
        .await?;
        let secs = t.elapsed().as_secs_f64();
        let _ = c.query_drop("SHUTDOWN").await;
        anyhow::Ok(secs)
    });
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    secs
}
