//! End-to-end tests of the local platform against real server processes
//! (the flavour under test, see common::flavor).

mod common;

use std::time::{Duration, Instant};

use common::*;
use mysql_async::prelude::*;

/// Every manager measures its data directory's file system, and the
/// cluster status carries it (in 1% steps).
fn volumes_are_measured(
    status: &serde_json::Value,
    by_name: &std::collections::BTreeMap<String, serde_json::Value>,
) {
    for (name, i) in by_name {
        let v = &i["volumes"][0];
        assert_eq!(v["volume"], "data", "{name}: {i}");
        let (size, used) = (
            v["sizeBytes"].as_u64().unwrap(),
            v["usedBytes"].as_u64().unwrap(),
        );
        assert!(size > 0 && used > 0 && used <= size, "{name}: {v}");
        let kept = &status["status"]["instanceStates"][name.as_str()]["volumes"][0];
        assert_eq!(kept["sizeBytes"].as_u64(), Some(size), "{name}: {kept}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_replicate_from_rw_to_ro() {
    let c = LocalCluster::start_as_made("trio", &manifest("trio", 3));
    let status = c.status_json();
    assert_eq!(status["status"]["currentPrimary"], "trio-1");
    assert_eq!(status["status"]["readyInstances"], 3);
    let by_name = instances_by_name(&status);
    assert_eq!(by_name["trio-1"]["role"], "primary");
    assert_eq!(by_name["trio-1"]["readOnly"], false);
    for r in ["trio-2", "trio-3"] {
        assert_eq!(by_name[r]["role"], "replica");
        assert_eq!(by_name[r]["readOnly"], true);
        assert_eq!(
            by_name[r]["replication"]["usingGtid"],
            sql("Current_Pos", "1")
        );
    }
    volumes_are_measured(&status, &by_name);
    // Every manager reports the operator's own executable hash.
    let op = status["status"]["operatorExecutableHash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(op.len(), 64);
    for i in by_name.values() {
        assert_eq!(i["executableHash"], op.as_str());
    }

    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    // The application account owns the `app` database, and nothing more.
    rw.query_drop("CREATE TABLE app.orders (id INT PRIMARY KEY, item TEXT)")
        .await
        .unwrap();
    rw.query_drop("INSERT INTO app.orders VALUES (1, 'espresso')")
        .await
        .unwrap();
    for q in ["CREATE DATABASE shop", "SELECT COUNT(*) FROM mysql.user"] {
        let err = rw.query_drop(q).await.unwrap_err();
        assert!(err.to_string().contains("denied"), "{q}: {err}");
    }
    let grants: Vec<String> = rw.query("SHOW GRANTS").await.unwrap();
    assert!(
        grants
            .iter()
            .all(|g| !g.contains("ON *.*") || g.starts_with("GRANT USAGE")),
        "app holds nothing on every database: {grants:?}"
    );

    // Read it back through ro: every replica must have it within a bounded wait.
    for _ in 0..4 {
        let got = wait_for(
            "the row on a replica through ro",
            Duration::from_secs(10),
            || async {
                let mut ro = c.app(c.service_port("ro")).await.ok()?;
                let v: Option<String> = ro
                    .query_first("SELECT item FROM app.orders WHERE id = 1")
                    .await
                    .ok()?;
                v
            },
        )
        .await;
        assert_eq!(got, "espresso");
    }
    // ro connections land on read-only replicas.
    let mut ro = c.app(c.service_port("ro")).await.unwrap();
    let err = ro
        .query_drop("INSERT INTO app.orders VALUES (2, 'x')")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    let ro_port: u16 = ro.query_first("SELECT @@port").await.unwrap().unwrap();
    assert_ne!(ro_port, c.instance_port("trio-1"));
    // rw reaches the primary.
    let rw_port: u16 = rw.query_first("SELECT @@port").await.unwrap().unwrap();
    assert_eq!(rw_port, c.instance_port("trio-1"));
    drop((rw, ro));

    // Replication runs over TLS with the replica's own certificate, and the
    // account refuses anyone without one.
    let mut admin = c.admin("trio-2").await;
    let st: mysql_async::Row = admin
        .query_first(sql("SHOW SLAVE STATUS", "SHOW REPLICA STATUS"))
        .await
        .unwrap()
        .unwrap();
    let col = |c: &str| format!("{}_{c}", sql("Master", "Source"));
    assert_eq!(
        st.get::<String, _>(col("SSL_Allowed").as_str()).unwrap(),
        "Yes"
    );
    assert_eq!(
        st.get::<String, _>(col("SSL_Verify_Server_Cert").as_str())
            .unwrap(),
        "Yes"
    );
    assert!(
        st.get::<String, _>(col("SSL_Cert").as_str())
            .unwrap()
            .ends_with("trio-2.crt")
    );
    let mut primary = c.admin("trio-1").await;
    let grants = rows(
        &mut primary,
        sql(
            "SHOW GRANTS FOR 'cnmysql_replication'@'%'",
            "SHOW CREATE USER 'cnmysql_replication'@'%'",
        ),
    )
    .await;
    // Only a certificate of this cluster's subject, from its CA.
    assert!(
        grants[0][0].contains("SUBJECT '/CN=trio/O=cloudnative-mysql/OU=local'")
            && grants[0][0].contains("ISSUER '/CN=cnmysql trio CA/O=cloudnative-mysql'"),
        "{grants:?}"
    );
    let dumps: i64 = primary
        .query_first(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dumps, 2, "both replicas stream the binlog");
    drop((admin, primary));

    servers_figures_reach_metrics(&c).await;

    // The mysqld log reaches the manager's structured log through the FIFO.
    let log = std::fs::read_to_string(c.instance_dir("trio-2").join("manager.log")).unwrap();
    let mysqld_line = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| {
            v["source"] == "mysqld"
                && v["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("ready for connections")
        });
    assert!(
        mysqld_line.is_some(),
        "no structured mysqld line in the manager log"
    );
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_then_up_resumes_with_data_and_without_a_new_clone() {
    let c = LocalCluster::start("resume", &manifest("resume", 2));
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE d").await.unwrap();
    rw.query_drop("CREATE TABLE d.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    rw.query_drop("INSERT INTO d.t VALUES (1), (2), (3)")
        .await
        .unwrap();
    drop(rw);
    let marker = c.instance_dir("resume-2").join("data/cnmysql-initialized");
    let cloned_at = std::fs::metadata(&marker).unwrap().modified().unwrap();
    wait_for(
        "the replica to apply the rows",
        Duration::from_secs(10),
        || async {
            let mut a = c.admin("resume-2").await;
            let n: Option<i64> = a.query_first("SELECT COUNT(*) FROM d.t").await.ok()?;
            (n == Some(3)).then_some(())
        },
    )
    .await;

    c.down();
    assert!(
        c.processes().is_empty(),
        "down left processes: {:?}",
        c.processes()
    );
    // MySQL gives the clients still connected at its shutdown two seconds
    // to leave, then disconnects them: the managers close their own first,
    // so there is none to wait for (MariaDB has no such wait).
    for i in ["resume-1", "resume-2"] {
        let log = std::fs::read_to_string(c.instance_dir(i).join("manager.log")).unwrap();
        let said: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("remaining clients"))
            .collect();
        if flavor() == Flavor::Mysql {
            assert!(!said.is_empty(), "{i}'s server logged no shutdown");
        }
        for line in said {
            assert!(
                line.contains("Forcefully disconnecting 0 remaining clients"),
                "{i}'s server waited for connections at its shutdown: {line}"
            );
        }
    }
    let st = c.status_json();
    assert_eq!(st["running"], false);
    assert_eq!(st["status"]["phase"], "Stopped");

    c.up(&manifest("resume", 2));
    let mut r = c.app(c.service_port("ro")).await.unwrap();
    let n: i64 = r
        .query_first("SELECT COUNT(*) FROM d.t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 3);
    drop(r);
    // Same data directory, not a new clone.
    assert_eq!(
        std::fs::metadata(&marker).unwrap().modified().unwrap(),
        cloned_at
    );
    let log = std::fs::read_to_string(c.instance_dir("resume-2").join("manager.log")).unwrap();
    assert_eq!(
        log.matches("\"clone complete\"").count(),
        1,
        "the replica was cloned again"
    );
    // And writes work again through rw, on the same primary: starting the
    // cluster is not a failure of its primary (the primary was once held
    // down for the failover decision on resume, for the warm-up's 15 s).
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("INSERT INTO d.t VALUES (4)").await.unwrap();
    drop(rw);
    let said: Vec<String> = c
        .events()
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        c.status_json()["status"]["currentPrimary"],
        "resume-1",
        "{:#?}",
        c.events()
    );
    for not in [
        "PrimaryDown",
        "FailoverBlocked",
        "FailingOver",
        "PrimaryFailing",
    ] {
        assert!(!said.iter().any(|r| r == not), "{not} on resume: {said:?}");
    }
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cloned_from_200mb_has_identical_checksums() {
    let c = LocalCluster::start("big", &manifest("big", 1));
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE big").await.unwrap();
    rw.query_drop(
        "CREATE TABLE big.blobs (id INT PRIMARY KEY, body VARCHAR(1100) NOT NULL) ENGINE=InnoDB",
    )
    .await
    .unwrap();
    rw.query_drop("CREATE TABLE big.small (id INT PRIMARY KEY, v INT)")
        .await
        .unwrap();
    rw.query_drop("USE big").await.unwrap();
    // Recursive queries that count to 20,000 (both flavours stop at 1,000
    // by default).
    rw.query_drop(sql(
        "SET SESSION max_recursive_iterations = 100000",
        "SET SESSION cte_max_recursion_depth = 100000",
    ))
    .await
    .unwrap();
    // 200,000 rows of ~1 KiB: about 200 MB of table data (more on disk).
    for chunk in 0..10 {
        let lo = chunk * 20_000 + 1;
        let hi = lo + 19_999;
        rw.query_drop(format!(
            "INSERT INTO big.blobs {}",
            sequence(lo, hi, "seq, REPEAT(SHA2(seq, 256), 16)")
        ))
        .await
        .unwrap();
    }
    rw.query_drop(format!(
        "INSERT INTO big.small {}",
        sequence(1, 1000, "seq, seq * 7")
    ))
    .await
    .unwrap();
    drop(rw);
    let data_bytes = cnmysql_instance::clone::dir_size(&c.instance_dir("big-1").join("data"));
    assert!(data_bytes >= 200_000_000, "only {data_bytes} bytes of data");

    // Scale to two instances: the new replica is cloned from the primary.
    c.down();
    c.up(&manifest("big", 2));
    let log = std::fs::read_to_string(c.instance_dir("big-2").join("manager.log")).unwrap();
    assert!(log.contains("\"clone complete\""), "big-2 was not cloned");
    assert!(
        log.contains("\"clone progress\""),
        "no progress was reported while cloning"
    );
    eprintln!(
        "{}",
        log.lines()
            .filter(|l| l.contains("clone") || l.contains("backup"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    let mut p = c.admin("big-1").await;
    let mut r = c.admin("big-2").await;
    for table in ["big.blobs", "big.small"] {
        let a = rows(&mut p, &format!("CHECKSUM TABLE {table} EXTENDED")).await;
        let b = rows(&mut r, &format!("CHECKSUM TABLE {table} EXTENDED")).await;
        assert_eq!(a, b, "{table} differs");
        assert_ne!(a[0][1], "0");
    }
    let gp: String = p.query_first(binlog_gtids()).await.unwrap().unwrap();
    let gr: String = r
        .query_first(sql("SELECT @@gtid_slave_pos", "SELECT @@gtid_executed"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(gp, gr, "the clone starts exactly where the primary is");
    drop((p, r));
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_mysqld_is_restarted_by_its_manager() {
    let c = LocalCluster::start("crash", &manifest("crash", 1));
    let pid_file = c.instance_dir("crash-1").join("run/mysqld.pid");
    let old: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let new = wait_for("a new mysqld", Duration::from_secs(30), || async {
        let p: i32 = std::fs::read_to_string(&pid_file)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        (p != old).then_some(p)
    })
    .await;
    assert_ne!(new, old);
    wait_for(
        "writes through rw again",
        Duration::from_secs(30),
        || async {
            let mut rw = c.app(c.service_port("rw")).await.ok()?;
            rw.query_drop("CREATE DATABASE IF NOT EXISTS after_crash")
                .await
                .ok()
        },
    )
    .await;

    // Stopping while the restarted server is still starting: MariaDB hangs
    // for good if SIGTERM lands in its start-up, so the manager lets it
    // finish starting, then stops it cleanly.
    let (manager, current) = c.instance_pids("crash-1");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(current),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let starting = loop {
        if let Some(p) = child_server(manager).filter(|p| *p != current) {
            break p;
        }
        assert!(Instant::now() < deadline, "no new mysqld");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let log = c.instance_dir("crash-1").join("manager.log");
    let before = std::fs::read_to_string(&log).unwrap().len();
    let t = Instant::now();
    c.down();
    let took = t.elapsed();
    let after = std::fs::read_to_string(&log).unwrap()[before..].to_string();
    assert!(
        after.contains("mysqld is still starting"),
        "the stop should have found mysqld {starting} starting:\n{after}"
    );
    assert!(
        after.contains("Shutdown complete") && !after.contains("killing it"),
        "mysqld should stop cleanly:\n{after}"
    );
    // The hang held `down` for the whole 60 s shutdown timeout.
    assert!(took < Duration::from_secs(30), "down took {took:?}");
    c.destroy();
}

/// The pid of a server whose parent is `parent`, if one runs.
fn child_server(parent: i32) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (comm, rest) = stat.split_once(") ")?;
        let ppid: i32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (comm.ends_with(&format!("({}", server_program())) && ppid == parent).then_some(pid)
    })
}

#[test]
fn a_first_start_refused_for_a_busy_port_leaves_nothing_behind_the_retry_it_suggests() {
    let tmp = tempfile::Builder::new()
        .prefix("cnmysql-test-")
        .tempdir()
        .unwrap();
    let m = tmp.path().join("cluster.yaml");
    std::fs::write(&m, manifest("busy", 1)).unwrap();
    let state = tmp.path().join("state");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let up = |base: &str| local_up(&m, &state, base, &["--detach", "--wait-timeout", "120"]);
    let out = up(&port);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    // The taken port is refused, unless another test running beside this
    // one holds one of the cluster's next ports (its other endpoints):
    // that one, refused first, is as busy.
    let base: u16 = port.parse().unwrap();
    let named = (base..base + 4).any(|p| err.contains(&format!("port {p} for the ")));
    assert!(named && err.contains("--port-base"), "{err}");
    assert!(
        !state.exists(),
        "a refused first start left {}",
        state.display()
    );
    // The retry the message suggests works.
    let out = up("0");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ports: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state.join("ports.json")).unwrap()).unwrap();
    assert_ne!(ports["services"]["rw"].to_string(), port);
    let out = cnmysql(&["local", "destroy", "--state-dir", state.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_show_each_instance_managers_lines_as_json_or_for_a_person() {
    let c = LocalCluster::start("logs", &manifest("logs", 2));
    // Piped (not a terminal): JSON lines, each naming its instance.
    let out = ok(&c.local(&["logs", "logs", "--tail", "3"]), "logs");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 6, "3 of each of 2 instances:\n{out}");
    assert!(
        lines[..3].iter().all(|l| l["instance"] == "logs-1"),
        "{out}"
    );
    assert!(
        lines[3..].iter().all(|l| l["instance"] == "logs-2"),
        "{out}"
    );
    // One instance, for a person: time, level, instance, message.
    let out = ok(
        &c.local(&["logs", "logs", "--instance", "logs-2", "-o", "pretty"]),
        "logs",
    );
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.contains(" INFO  logs-2 instance manager started"),
        "{first}"
    );
    assert!(
        out.lines()
            .all(|l| l.contains(" logs-2 ") || l.starts_with("logs-2 | ")),
        "{out}"
    );
    // A name that is not an instance says which are.
    let bad = c.local(&["logs", "logs", "--instance", "logs-9"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("logs-1 to logs-2"));

    // A SQL session as the administrator: the primary, or a replica.
    for (how, read_only) in [(None, "0"), (Some("--replica"), "1")] {
        let mut args = vec!["mysql", "logs"];
        args.extend(how);
        args.extend(["--", "-N", "-e", "SELECT @@read_only"]);
        let said = ok(&c.plugin("kubectl-cnmsql", &args), "mysql");
        assert_eq!(said.trim(), read_only, "{how:?}");
    }
    // A report with the logs: manifest, status, events and each manager's
    // last lines; no secret in any of it.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("diag.tar.gz");
    let said = ok(
        &c.plugin(
            "kubectl-cnmsql",
            &[
                "report",
                "logs",
                "--logs",
                "--tail",
                "20",
                "-f",
                out.to_str().unwrap(),
            ],
        ),
        "report",
    );
    assert!(said.contains("diag.tar.gz"), "{said}");
    let files = untar_gz(&out);
    for f in [
        "cluster.yaml",
        "status.txt",
        "status.json",
        "events.jsonl",
        "logs/control.log",
    ] {
        assert!(
            files.contains_key(&format!("diag/{f}")),
            "{f} in {:?}",
            files.keys()
        );
    }
    for i in ["logs-1", "logs-2"] {
        let log = &files[&format!("diag/logs/{i}.jsonl")];
        // The last 20 lines (one may still be half written, and left out).
        let n = log.lines().count();
        assert!((19..=20).contains(&n), "{i}: {n} lines");
    }
    let secrets = [c.admin_password(), c.app_password()];
    for (path, text) in &files {
        for s in &secrets {
            assert!(!text.contains(s.trim()), "a password in {path}");
        }
    }
}

/// The servers' own figures reach /metrics: the primary's insert, its
/// rows and binary logs, the replicas' applier threads.
async fn servers_figures_reach_metrics(c: &LocalCluster) {
    let sample = |page: &str, series: &str| -> Option<f64> {
        page.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let page = wait_for(
        "the primary's insert on /metrics",
        Duration::from_secs(10),
        || async {
            let page = c.metrics().await;
            let inserts = sample(
                &page,
                "cnmysql_instance_server_commands_total{instance=\"trio-1\",command=\"insert\"}",
            )?;
            (inserts >= 1.0).then_some(page)
        },
    )
    .await;
    for (series, at_least) in [
        (
            "cnmysql_instance_server_row_operations_total{instance=\"trio-1\",operation=\"write\"}",
            1.0,
        ),
        (
            "cnmysql_instance_server_threads_connected{instance=\"trio-1\"}",
            1.0,
        ),
        (
            "cnmysql_instance_server_binlog_bytes{instance=\"trio-1\"}",
            1.0,
        ),
        (
            "cnmysql_instance_server_innodb_buffer_pool_pages{instance=\"trio-1\",state=\"total\"}",
            1.0,
        ),
        (
            "cnmysql_instance_server_questions_total{instance=\"trio-2\"}",
            1.0,
        ),
        (
            "cnmysql_instance_replication_sql_running{instance=\"trio-2\"}",
            1.0,
        ),
        (
            "cnmysql_instance_replication_io_running{instance=\"trio-3\"}",
            1.0,
        ),
    ] {
        let v = sample(&page, series).unwrap_or_else(|| panic!("no {series} in\n{page}"));
        assert!(v >= at_least, "{series} = {v}");
    }
    assert_eq!(
        sample(
            &page,
            "cnmysql_instance_replication_last_error_number{instance=\"trio-2\",thread=\"sql\"}"
        ),
        Some(0.0)
    );
    // The primary's last committed write, as its manager saw the history
    // grow: the test's own inserts, moments ago.
    let at = wait_for(
        "the primary's last write on /metrics",
        Duration::from_secs(10),
        || async {
            sample(
                &c.metrics().await,
                "cnmysql_instance_last_transaction_timestamp_seconds{instance=\"trio-1\"}",
            )
        },
    )
    .await;
    let age = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0 - at;
    assert!((-1.0..120.0).contains(&age), "last write {age} s ago");
}
