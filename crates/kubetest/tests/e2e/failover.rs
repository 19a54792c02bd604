//! Failover on a real node: a deleted Pod, a killed PID 1, a node cut off or frozen; fencing; an isolated instance.

use super::*;

pub(crate) async fn failover_case(kind: &str) {
    let e = env("required").await;
    let old = e.status().await.current_primary.unwrap();
    let old_uid = e.pod_uid(&old).await;
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let routes = cnmysql_kubetest::routes::Routes::watch(e.k.client.clone(), NS)
        .await
        .unwrap();
    let fault = Instant::now();
    match kind {
        "delete" => {
            e.pods.delete(&old, &DeleteParams::default()).await.unwrap();
        }
        "kill" => {
            let pid = e.k.pid(NS, &old, "mysql").await.unwrap();
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
            // The kill must have taken: the container's first process gone.
            let deadline = Instant::now() + Duration::from_secs(15);
            while !cnmysql_workload::faults::process_gone(pid) {
                assert!(
                    Instant::now() < deadline,
                    "PID 1 of {old} ({pid}) still runs 15 s after SIGKILL"
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        _ => unreachable!(),
    }
    if kind == "delete" {
        let (new, took, acked) = failover(&e, w, &old, fault).await;
        eprintln!(
            "failover (Pod deleted): {old} → {new}, first write after the fault acknowledged after {took:?}"
        );
        // The deletion changed no route: the first change after it moved
        // rw to the new primary (kube-proxy applies that at once, not a
        // second after a change the deletion made).
        let changes = routes.since(fault);
        let lines = routes.between(fault, fault, Instant::now());
        let first = changes
            .first()
            .unwrap_or_else(|| panic!("no route changed after the deletion"));
        assert!(
            first.1 == "db-rw" && first.2 == new,
            "the first route change after {old}'s Pod was deleted must move rw to {new}:\n{lines}"
        );
        // The former primary comes back (a new Pod on its claim) and rejoins.
        let primary = e.healthy(3, Duration::from_secs(120)).await;
        assert_eq!(primary, new, "one primary, the new one");
        assert_ne!(
            e.pod_uid(&old).await,
            old_uid,
            "the former primary's Pod was replaced"
        );
        e.verify(&acked).await;
        return;
    }
    // PID 1 killed: the kubelet restarts the container at once. If it is
    // back before the operator's next poll, it recovers in place as the
    // primary (it still holds its lease); otherwise the operator fails over.
    // Either way: writes resume, one primary, nothing acknowledged lost.
    w.wait_for_more(20, Duration::from_secs(60)).await;
    let out = w.stop().await;
    let took = out.outage_after(fault);
    let primary = e.healthy(3, Duration::from_secs(120)).await;
    let restarts = e.restarts(&old).await;
    eprintln!(
        "PID 1 of {old} killed: primary now {primary}, first write after the fault acknowledged after {took:?}, {restarts} restarts"
    );
    // What the user sees of a kill: the container restarted in place, or
    // another instance took over. Neither means the kill missed.
    assert!(
        restarts >= 1 || primary != old,
        "PID 1 of {old} was killed, yet its container never restarted and it is still the primary"
    );
    e.verify(&out.acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn failover_when_the_primary_pod_is_deleted_loses_no_acknowledged_row() {
    failover_case("delete").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn failover_when_the_primary_pid_1_is_killed_loses_no_acknowledged_row() {
    failover_case("kill").await;
}

pub(crate) async fn lost_node_case(kind: &str) {
    let e = env("required").await;
    let old = e.status().await.current_primary.unwrap();
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    // A connection straight to the old primary, held through the fault as
    // a client's pool holds one.
    let mut held = e.direct(&old).await;
    // A second one, to try a write once the old primary runs again.
    let mut writer = e.direct(&old).await;
    let fault = Instant::now();
    e.k.fault(kind, NS, &old).await.unwrap();
    let (new, took, acked) = failover(&e, w, &old, fault).await;
    eprintln!(
        "failover ({kind} node): {old} → {new}, first write after the fault acknowledged after {took:?}"
    );
    // Under `required` the old primary's lease was passed on once every
    // replica stopped receiving from it, not waited out
    // (docs/topology.md, "Failing over before the lease expires").
    assert!(
        e.events_named("LeasePassed").await > 0,
        "the lease was waited out ({took:?})"
    );
    assert_eq!(e.events_named("FailingOver").await, 1);
    // The old primary is healed: it must not take writes, and it rejoins
    // (or is replaced); there is one primary.
    // The node's CPU is taken while the old primary resumes (two busy
    // processes per core): its manager gets no head start on its server.
    let hogs = (kind == "freeze").then(cnmysql_kubetest::CpuHogs::start);
    let healed = Instant::now();
    e.k.fault("heal", NS, &old).await.unwrap();
    if kind == "freeze" {
        // A write sent the moment it runs again: never acknowledged,
        // whatever @@read_only says (no replica acknowledges it).
        let late_write = tokio::spawn(async move {
            let r = tokio::time::timeout(
                Duration::from_secs(30),
                writer.query_drop("INSERT INTO app.w (id) VALUES (9000000000000)"),
            )
            .await;
            (r, writer)
        });
        let writable_for = writable_after_resume(&mut held, healed).await;
        let (late, writer) = late_write.await.unwrap();
        drop(writer);
        drop(hogs);
        eprintln!(
            "{old} resumed from the freeze on a saturated CPU: @@read_only 0 for {writable_for:?} after it ran again; a write sent then: {}",
            match &late {
                Ok(Ok(())) => "ACKNOWLEDGED".to_string(),
                Ok(Err(e)) => format!("refused ({e})"),
                Err(_) => "no answer within 30 s".to_string(),
            }
        );
        assert!(
            !matches!(late, Ok(Ok(()))),
            "{old} acknowledged a write after it resumed, beside {new}"
        );
        // Its lease passed on during the freeze: once its manager finds
        // that out (the status naming a failover from it, the lease another
        // holder's) it is killed without being asked to turn read-only; the
        // kubelet's SIGTERM may come first, and then it is asked for 0.5 s.
        // How soon depends on when its manager gets the CPU (measured,
        // docs/topology.md); what keeps it from being a second primary is
        // the acknowledgement no replica gives (above).
        let budget = Duration::from_secs(5);
        assert!(
            writable_for < budget,
            "{old} was still writable {writable_for:?} after it ran again, beside {new}"
        );
    }
    drop(held);
    // Its node now carries out the deletion of its Pod (fenced out during
    // the failover): SIGTERM, and SIGKILL after the grace period when a
    // commit still waits for a replica's acknowledgement that will never
    // come. Then it rejoins, or is kept out as diverged (a transaction it
    // wrote but never acknowledged); either way one primary, nothing lost.
    let rejoined = until(
        "the former primary back or kept out",
        Duration::from_secs(300),
        || async {
            let st = e.k.cluster_status(NS, "db").await.ok()?;
            let primaries = st
                .instance_states
                .values()
                .filter(|s| s.role == "primary")
                .count();
            if st.current_primary.as_deref() != Some(new.as_str()) || primaries != 1 {
                return None;
            }
            if st.diverged_instances.contains(&old) {
                return Some(false);
            }
            let ready = st.instance_states.values().filter(|s| s.ready).count();
            (ready == 3 && st.phase == Some(cnmysql_api::Phase::Healthy)).then_some(true)
        },
    )
    .await
    .unwrap();
    eprintln!(
        "{old} after the {kind}: {}",
        if rejoined {
            "rejoined"
        } else {
            "kept out as diverged"
        }
    );
    let keep: Vec<String> = ["db-1", "db-2", "db-3"]
        .into_iter()
        .filter(|i| rejoined || *i != old)
        .map(String::from)
        .collect();
    let missing = e.k.rows_missing(NS, "db", &keep, &acked).await.unwrap();
    assert_eq!(missing, 0, "acknowledged rows lost");
}

/// How long a server resumed at `resumed` still answered writable on
/// `held` (read-only, or gone, ends it). The answers are the server's own
/// moments: each query is sent after the thaw.
pub(crate) async fn writable_after_resume(
    held: &mut mysql_async::Conn,
    resumed: Instant,
) -> Duration {
    loop {
        let ro = tokio::time::timeout(
            Duration::from_secs(5),
            held.query_first::<i64, _>("SELECT @@read_only"),
        )
        .await;
        match ro {
            Ok(Ok(Some(0))) => tokio::time::sleep(Duration::from_millis(20)).await,
            _ => return resumed.elapsed(),
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(30),
            "the resumed primary stays writable"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn failover_when_the_primary_node_is_cut_off_passes_its_lease_on_and_loses_nothing()
 {
    lost_node_case("cut").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn failover_when_the_primary_node_freezes_passes_its_lease_on_and_loses_nothing() {
    lost_node_case("freeze").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn fencing_with_the_plugin_takes_an_instance_out_and_back() {
    let e = env("preferred").await;
    let primary = e.status().await.current_primary.unwrap();
    let replica = if primary == "db-3" { "db-2" } else { "db-3" };
    e.plugin(&["cnmsql", "-n", NS, "fence", "on", "db", replica]);
    until("the replica fenced", Duration::from_secs(60), || async {
        let st = e.status().await;
        let s = st.instance_states.get(replica)?;
        let routable = routable_label(&e, replica).await?;
        (st.fenced_instances.contains(&replica.to_string())
            && s.read_only
            && routable.as_deref() != Some("true"))
        .then_some(())
    })
    .await
    .unwrap();
    e.plugin(&["cnmsql", "-n", NS, "fence", "off", "db", replica]);
    until("the replica unfenced", Duration::from_secs(60), || async {
        let st = e.status().await;
        let routable = routable_label(&e, replica).await?;
        (st.fenced_instances.is_empty() && routable.as_deref() == Some("true")).then_some(())
    })
    .await
    .unwrap();
    e.healthy(3, Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn an_isolated_instance_fails_its_liveness_probe_and_is_restarted() {
    let e = env("preferred").await;
    let primary = e.status().await.current_primary.unwrap();
    let replica = if primary == "db-3" { "db-2" } else { "db-3" };
    let before = e.restarts(replica).await;
    e.k.fault("isolate", NS, replica).await.unwrap();
    until(
        "the isolated instance restarted",
        Duration::from_secs(120),
        || async { (e.restarts(replica).await > before).then_some(()) },
    )
    .await
    .unwrap();
    e.k.fault("heal", NS, replica).await.unwrap();
    e.healthy(3, Duration::from_secs(120)).await;
}

/// The Pod's `cnmysql.io/routable` label (None when the Pod cannot be read;
/// Some(None) when it has no such label).
pub(crate) async fn routable_label(e: &Env, pod: &str) -> Option<Option<String>> {
    let pod = e.pods.get(pod).await.ok()?;
    Some(
        pod.metadata
            .labels
            .unwrap_or_default()
            .get("cnmysql.io/routable")
            .cloned(),
    )
}
