//! Fencing and isolation.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_a_replica_and_the_primary_then_unfencing() {
    let c = LocalCluster::start("fence", &manifest("fence", 3));
    // As the spec shows it: the plugin, here on the local platform.
    let out = c.plugin(
        "kubectl-cloudnative_mysql",
        &["fence", "on", "fence", "fence-2"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(
        "fence-2 out of every route",
        Duration::from_secs(10),
        || async {
            let r = c.routes();
            (!r.values().any(|b| b.contains(&"fence-2".to_string()))
                && r.get("ro")
                    .is_some_and(|b| b == &vec!["fence-3".to_string()]))
            .then_some(())
        },
    )
    .await;
    assert_eq!(
        c.status()["fencedInstances"],
        serde_json::json!(["fence-2"])
    );

    // Fencing the primary stops writes for the whole cluster, without
    // failover, and whoever asked is warned.
    let out = c.local(&["fence", "on", "fence", "fence-1"]);
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("warning: fence-1 is the primary"),
        "no warning: {said}"
    );
    wait_for(
        "no rw backend and a read-only primary",
        Duration::from_secs(10),
        || async {
            let r = c.routes();
            (r.get("rw").is_some_and(|b| b.is_empty()) && c.writable_instances().await.is_empty())
                .then_some(())
        },
    )
    .await;
    // Like a Service without endpoints: the connection is refused, not
    // accepted and dropped mid-handshake.
    let rw_port = c.service_port("rw");
    wait_for(
        "rw to refuse connections",
        Duration::from_secs(5),
        || async {
            match std::net::TcpStream::connect(("127.0.0.1", rw_port)) {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(()),
                _ => None,
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        c.current_primary(),
        "fence-1",
        "fencing the primary must not trigger failover"
    );

    for i in ["fence-1", "fence-2"] {
        assert!(c.local(&["fence", "off", "fence", i]).status.success());
    }
    wait_primary(&c, "fence-1", Duration::from_secs(10)).await;
    wait_ready(&c, 3, Duration::from_secs(20)).await;
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE after_unfence")
        .await
        .unwrap();
    drop(rw);
    assert!(c.has_event("Fenced").is_some() && c.has_event("Unfenced").is_some());
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_instance_restarts_but_one_with_a_peer_does_not() {
    // DESIGN §4: liveness fails only when the cluster state has been
    // unreachable for 30 s and no peer answers either.
    let alone = LocalCluster::start("iso", &manifest("iso", 1));
    let paired = LocalCluster::start("pair", &manifest("pair", 2));
    // The same outage of the cluster state for both: the status file turns
    // into a directory, so every read and write of it fails.
    let saved: Vec<(std::path::PathBuf, String)> = [&alone, &paired]
        .iter()
        .map(|c| {
            let p = std::path::Path::new(&c.state_arg()).join("status.json");
            let text = std::fs::read_to_string(&p).unwrap();
            std::fs::remove_file(&p).unwrap();
            std::fs::create_dir(&p).unwrap();
            (p, text)
        })
        .collect();
    let broken = Instant::now();
    wait_for(
        "the lone instance to be restarted as isolated",
        Duration::from_secs(60),
        || async { alone.has_event("IsolationRestart") },
    )
    .await;
    let after = broken.elapsed();
    // Counted from the instance's last good read, up to one 250 ms
    // reconcile before the break.
    assert!(
        after >= Duration::from_millis(29_500),
        "restarted {after:?} into the outage, before the 30 s threshold"
    );
    assert!(alone.has_event("StatusUnreadable").is_some());

    // Same outage, but each instance can reach its peer: no restart, and
    // nobody reports itself isolated.
    assert!(paired.has_event("IsolationRestart").is_none());
    let report = paired.status_json();
    assert!(
        report["statusError"].is_string(),
        "status shows the outage: {report}"
    );
    for i in report["instances"].as_array().unwrap() {
        assert_eq!(i["reachable"], true, "{i}");
        assert_eq!(i["isolated"], false, "{i}");
    }

    // The outage ends: the lone instance serves writes again.
    for (p, text) in &saved {
        std::fs::remove_dir(p).unwrap();
        std::fs::write(p, text).unwrap();
    }
    wait_for("writes on iso again", Duration::from_secs(60), || async {
        let mut rw = alone.app(alone.service_port("rw")).await.ok()?;
        rw.query_drop("CREATE DATABASE IF NOT EXISTS after_isolation")
            .await
            .ok()
    })
    .await;
    assert_eq!(paired.current_primary(), "pair-1");
    alone.destroy();
    paired.destroy();
}
