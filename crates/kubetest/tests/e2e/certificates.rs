//! Certificates renewed through their Secrets, a new CA, a user's server certificate.

use super::basics::operator_metrics;
use super::*;

/// The loaded certificate's expiry of every instance, from the operator's
/// metrics (what each manager reports).
pub(crate) async fn certificate_expiry(e: &Env) -> std::collections::BTreeMap<String, f64> {
    let text = operator_metrics(e).await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("cnmysql_instance_certificate_expiry_timestamp_seconds{"))
        .filter_map(|l| {
            let name = l
                .split("instance=\"")
                .nth(1)?
                .split('"')
                .next()?
                .to_string();
            let v: f64 = l.rsplit(' ').next()?.parse().ok()?;
            Some((name, v))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn certificates_are_renewed_through_their_secrets_and_loaded_without_a_restart_or_a_failed_write()
 {
    // Six minutes: renewed after four, leaving the kubelet's Secret sync
    // (a minute or more) time to deliver before expiry.
    let yaml = cluster_yaml("required").replace(
        "  failoverDelay: 0\n",
        "  failoverDelay: 0\n  secrets:\n    certificateLifetimeSeconds: 360\n",
    );
    let e = env_with_manifest(&yaml, &[]).await;
    let names = ["db-1", "db-2", "db-3"];
    let first = until(
        "every instance's certificate expiry",
        Duration::from_secs(60),
        || async {
            let m = certificate_expiry(&e).await;
            names.iter().all(|n| m.contains_key(*n)).then_some(m)
        },
    )
    .await
    .unwrap();
    let mut restarts = Vec::new();
    for n in names {
        restarts.push(e.restarts(n).await);
    }
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let renewed = until(
        "every instance on a renewed certificate",
        Duration::from_secs(360),
        || async {
            let m = certificate_expiry(&e).await;
            names
                .iter()
                .all(|n| {
                    m.get(*n)
                        .zip(first.get(*n))
                        .is_some_and(|(now, was)| now > was)
                })
                .then_some(())
        },
    )
    .await;
    if let Err(err) = renewed {
        let m = certificate_expiry(&e).await;
        panic!(
            "{err}: expiry then {first:?}, now {m:?}\n{}",
            e.k.diagnose(NS, "db")
        );
    }
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let o = w.stop().await;
    assert_eq!(o.errors, 0, "writes failed across the renewals");
    for (i, n) in names.iter().enumerate() {
        assert_eq!(e.restarts(n).await, restarts[i], "{n} was restarted");
    }
    e.healthy(3, Duration::from_secs(30)).await;
    e.verify(&o.acked).await;
    assert!(e.events_named("CertificateRenewed").await >= 3);
    eprintln!(
        "certificate renewal: {} acknowledged, 0 failed, longest gap {:?}",
        o.acked.len(),
        o.longest_gap
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn a_new_ca_is_trusted_then_used_then_the_old_one_dropped_without_a_failed_write()
{
    let e = env("required").await;
    let secrets: Api<Secret> = Api::namespaced(e.k.client.clone(), NS);
    let ca_of = |s: &Secret, k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| String::from_utf8_lossy(&b.0).to_string())
            .unwrap_or_default()
    };
    let old = ca_of(&secrets.get("db-ca").await.unwrap(), "ca.crt");
    let mut restarts = Vec::new();
    for n in ["db-1", "db-2", "db-3"] {
        restarts.push(e.restarts(n).await);
    }
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    // Rotating the generated CA: delete it; the operator makes a new one.
    secrets.delete("db-ca", &Default::default()).await.unwrap();
    let fp = cnmysql_tls::rotation::bundle_fingerprints;
    let done = until(
        "every Secret on the new CA alone",
        Duration::from_secs(600),
        || async {
            let new = ca_of(&secrets.get_opt("db-ca").await.ok()??, "ca.crt");
            if fp(&new) == fp(&old) {
                return None;
            }
            for s in ["db-1-tls", "db-2-tls", "db-3-tls", "db-operator-tls"] {
                let held = secrets.get(s).await.ok()?;
                let leaf = ca_of(&held, "tls.crt");
                if fp(&ca_of(&held, "ca.crt")) != fp(&new) || !cnmysql_tls::signed_by(&leaf, &new) {
                    return None;
                }
            }
            // And every manager has loaded it.
            let st = e.status().await;
            let want = fp(&new);
            st.instance_states
                .values()
                .all(|i| i.tls_trust == want && i.tls_issuer.as_ref() == want.first())
                .then_some(())
        },
    )
    .await;
    if let Err(err) = done {
        panic!("{err}\n{}", e.k.diagnose(NS, "db"));
    }
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let o = w.stop().await;
    assert_eq!(o.errors, 0, "writes failed across the CA change");
    for (i, n) in ["db-1", "db-2", "db-3"].iter().enumerate() {
        assert_eq!(e.restarts(n).await, restarts[i], "{n} was restarted");
    }
    e.healthy(3, Duration::from_secs(30)).await;
    e.verify(&o.acked).await;
    assert!(
        e.events_named("CertificateRenewed").await >= 12,
        "trust, issue, narrow for 4 Secrets"
    );
    eprintln!(
        "CA rotation: {} acknowledged, 0 failed, longest gap {:?}",
        o.acked.len(),
        o.longest_gap
    );
}

/// The Secret `db-server-tls` as cert-manager writes one: a certificate
/// of `ca` naming the Services clients connect by, its key, the CA.
pub(crate) fn server_tls_secret(ca: &cnmysql_tls::Ca, lifetime_secs: i64) -> serde_json::Value {
    let names: Vec<String> = ["rw", "ro", "r"]
        .iter()
        .flat_map(|s| {
            let svc = format!("db-{s}");
            [
                svc.clone(),
                format!("{svc}.{NS}"),
                format!("{svc}.{NS}.svc"),
                format!("{svc}.{NS}.svc.cluster.local"),
            ]
        })
        .collect();
    let id = ca.issue_for("db-rw", &names, lifetime_secs).unwrap();
    serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "db-server-tls", "namespace": NS},
        "stringData": {"tls.crt": id.cert_pem, "tls.key": id.key_pem, "ca.crt": ca.identity.cert_pem},
    })
}

/// `Ssl_server_not_after` of a new connection to the Service `svc` that
/// trusts `ca_file` alone and checks the Service's DNS name.
pub(crate) async fn users_certificate_through(
    e: &Env,
    svc: &str,
    ca_file: &std::path::Path,
) -> Result<String, String> {
    let at = e.k.wait_service(NS, svc).await.map_err(|x| x.to_string())?;
    let ssl = mysql_async::SslOpts::default()
        .with_root_certs(vec![ca_file.to_path_buf().into()])
        .with_danger_tls_hostname_override(Some(format!("{svc}.{NS}.svc")));
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(at.ip().to_string())
        .tcp_port(at.port())
        .user(Some("app"))
        .pass(Some(e.app_password().await))
        .prefer_socket(false)
        .ssl_opts(Some(ssl));
    let connect = mysql_async::Conn::new(opts);
    let mut c = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| "no answer within 5 s".to_string())?
        .map_err(|x| x.to_string())?;
    let row: Option<(String, String)> = c
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_server_not_after'")
        .await
        .map_err(|x| x.to_string())?;
    c.disconnect().await.ok();
    Ok(row.map(|r| r.1).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn a_users_server_certificate_is_presented_through_the_services_and_renewed_without_a_failed_write()
 {
    let corp = cnmysql_tls::Ca::generate("corp").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let corp_ca = dir.path().join("corp-ca.crt");
    std::fs::write(&corp_ca, &corp.identity.cert_pem).unwrap();
    let yaml = format!(
        "{}---\n{}\n",
        cluster_yaml("required").replace(
            "  failoverDelay: 0\n",
            "  failoverDelay: 0\n  secrets:\n    serverTlsSecret: db-server-tls\n",
        ),
        server_tls_secret(&corp, 86_400)
    );
    let e = env_with_manifest(&yaml, &[]).await;
    let mut first = Vec::new();
    for svc in ["db-rw", "db-ro"] {
        let got = until(
            &format!("{svc} presenting the user's certificate"),
            Duration::from_secs(30),
            || async { users_certificate_through(&e, svc, &corp_ca).await.ok() },
        )
        .await
        .unwrap();
        first.push(got);
    }
    let mut restarts = Vec::new();
    for n in ["db-1", "db-2", "db-3"] {
        restarts.push(e.restarts(n).await);
    }
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    // cert-manager renews it: the Secret's data replaced in place.
    let secrets: Api<Secret> = Api::namespaced(e.k.client.clone(), NS);
    let renewed = server_tls_secret(&corp, 2 * 86_400);
    secrets
        .patch(
            "db-server-tls",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"stringData": renewed["stringData"]})),
        )
        .await
        .unwrap();
    let started = Instant::now();
    for (i, svc) in ["db-rw", "db-ro"].iter().enumerate() {
        let r = until(
            &format!("{svc} presenting the renewed certificate"),
            Duration::from_secs(240),
            || async {
                let now = users_certificate_through(&e, svc, &corp_ca).await.ok()?;
                (now != first[i]).then_some(())
            },
        )
        .await;
        if let Err(err) = r {
            panic!("{err}\n{}", e.k.diagnose(NS, "db"));
        }
    }
    let took = started.elapsed();
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let o = w.stop().await;
    assert_eq!(o.errors, 0, "writes failed across the renewal");
    for (i, n) in ["db-1", "db-2", "db-3"].iter().enumerate() {
        assert_eq!(e.restarts(n).await, restarts[i], "{n} was restarted");
    }
    // Replication trusts the user's CA: a switchover re-points it.
    let primary = e.healthy(3, Duration::from_secs(30)).await;
    let target = ["db-1", "db-2", "db-3"]
        .into_iter()
        .find(|n| *n != primary)
        .unwrap();
    e.plugin(&["cnmsql", "-n", NS, "promote", "db", target]);
    assert_eq!(e.healthy(3, Duration::from_secs(60)).await, target);
    e.verify(&o.acked).await;
    eprintln!(
        "user's server certificate renewed through its Secret: in use through rw and ro {took:?} after the patch, {} acknowledged, 0 failed, longest gap {:?}",
        o.acked.len(),
        o.longest_gap
    );
}
