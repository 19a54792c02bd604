//! Certificate renewal on the local platform, against real servers: short
//! lived certificates are issued again before they expire and taken into
//! use by mysqld, the control API and replication without a restart and
//! without a failed write.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use mysql_async::prelude::*;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

const REQUIRED: &str = "    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: required\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n";

fn pki(c: &LocalCluster) -> std::path::PathBuf {
    std::path::Path::new(&c.state_arg()).join("pki")
}

/// The certificate the control API of `instance` presents now, if it
/// checks out against the cluster CA.
async fn control_api_certificate(c: &LocalCluster, instance: &str) -> Option<Vec<u8>> {
    let ca = std::fs::read_to_string(pki(c).join("ca.crt")).unwrap();
    let cfg = client_without_certificate(&ca);
    let port = c.control_port(instance);
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .ok()?;
    Some(tls.get_ref().1.peer_certificates()?[0].to_vec())
}

/// `Ssl_server_not_after` over a new TLS connection that checks the
/// server's certificate against the cluster CA.
async fn server_not_after(c: &LocalCluster, instance: &str) -> String {
    let ssl = mysql_async::SslOpts::default().with_root_certs(vec![pki(c).join("ca.crt").into()]);
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(c.instance_port(instance))
        .user(Some("app"))
        .pass(Some(c.app_password()))
        .prefer_socket(false)
        .ssl_opts(Some(ssl));
    let mut conn = mysql_async::Conn::new(opts).await.unwrap();
    let row: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_server_not_after'")
        .await
        .unwrap();
    row.unwrap().1
}

fn file_certificate(c: &LocalCluster, instance: &str) -> Vec<u8> {
    let pem = std::fs::read_to_string(pki(c).join(format!("{instance}.crt"))).unwrap();
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_lived_certificates_are_renewed_and_loaded_without_a_restart_or_a_failed_write() {
    let text = format!(
        "{}{REQUIRED}  secrets:\n    certificateLifetimeSeconds: 60\n",
        manifest("cert", 3)
    );
    let c = LocalCluster::start("cert", &text);
    let names: Vec<String> = (1..=3).map(|i| format!("cert-{i}")).collect();
    let pids: Vec<(i32, i32)> = names.iter().map(|n| c.instance_pids(n)).collect();
    let first: Vec<Vec<u8>> = names.iter().map(|n| file_certificate(&c, n)).collect();
    let mut not_after = Vec::new();
    for n in &names {
        assert_eq!(
            control_api_certificate(&c, n).await,
            Some(file_certificate(&c, n))
        );
        not_after.push(server_not_after(&c, n).await);
    }
    let w = writer::start(&c).await;
    w.wait_for_more(20, Duration::from_secs(20)).await;
    // Issued again with a third of the minute left, then in use everywhere.
    for (i, n) in names.iter().enumerate() {
        wait_for(
            &format!("{n} renewed and its servers on the new certificate"),
            Duration::from_secs(90),
            || async {
                let now = file_certificate(&c, n);
                (now != first[i]
                    && control_api_certificate(&c, n).await == Some(now)
                    && server_not_after(&c, n).await != not_after[i])
                    .then_some(())
            },
        )
        .await;
        let e = c
            .events()
            .into_iter()
            .find(|e| e["reason"] == "CertificateRenewed" && e["instance"] == n.as_str());
        assert!(e.is_some(), "a CertificateRenewed event for {n}");
    }
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let out = w.stop().await;
    assert_eq!(
        out.errors,
        0,
        "writes failed across the renewals: {}",
        out.failures_report()
    );
    // New replication connections present and check the new certificates:
    // a switchover re-points every replica.
    let primary = c.current_primary();
    let other = names.iter().find(|n| **n != primary).unwrap().clone();
    ok(&c.local(&["promote", &other]), "promote");
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    let next = out.acked.iter().max().unwrap() + 1;
    rw.query_drop(format!("INSERT INTO app.w (id) VALUES ({next})"))
        .await
        .unwrap();
    let mut acked = out.acked.clone();
    acked.push(next);
    for n in &names {
        writer::verify_on(&c, n, &acked).await;
    }
    // Reloading wrote nothing of its own on a replica (a binary-logged
    // FLUSH would be a transaction only it has): one history everywhere.
    wait_for(
        "one history on every instance",
        Duration::from_secs(30),
        || async {
            let st = c.status();
            let g = &st["gtidExecutedByInstance"];
            (st["divergedInstances"].is_null()
                && names.iter().all(|n| g[n] == g[names[0].as_str()]))
            .then_some(())
        },
    )
    .await;
    let after: Vec<(i32, i32)> = names.iter().map(|n| c.instance_pids(n)).collect();
    assert_eq!(after, pids, "no manager or server was restarted");
    eprintln!(
        "renewals under writes: {} acknowledged, 0 failed, longest gap {:.3}s",
        out.acked.len(),
        out.longest_gap.as_secs_f64()
    );
    c.destroy();
}

/// A new CA (the old one removed, as a person rotating it would): trusted
/// everywhere beside the old one first, then every certificate issued from
/// it, then the old one dropped; the cluster carries on without a restart
/// or a failed write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_ca_reissues_every_certificate_and_the_cluster_carries_on() {
    let c = LocalCluster::start("rca", &format!("{}{REQUIRED}", manifest("rca", 3)));
    let names: Vec<String> = (1..=3).map(|i| format!("rca-{i}")).collect();
    let pids: Vec<(i32, i32)> = names.iter().map(|n| c.instance_pids(n)).collect();
    let old_ca = std::fs::read_to_string(pki(&c).join("ca.crt")).unwrap();
    let w = writer::start(&c).await;
    w.wait_for_more(20, Duration::from_secs(20)).await;
    std::fs::remove_file(pki(&c).join("ca.key")).unwrap();
    std::fs::remove_file(pki(&c).join("ca.crt")).unwrap();
    for n in &names {
        wait_for(
            &format!("{n} on a certificate of the new CA"),
            Duration::from_secs(60),
            || async {
                let ca = std::fs::read_to_string(pki(&c).join("ca.crt")).ok()?;
                let cert = std::fs::read_to_string(pki(&c).join(format!("{n}.crt"))).ok()?;
                (ca != old_ca
                    && cnmysql_tls::signed_by(&cert, &ca)
                    && control_api_certificate(&c, n).await == Some(file_certificate(&c, n)))
                .then_some(())
            },
        )
        .await;
    }
    // Once every instance presents the new CA's certificate, the old CA
    // leaves every trust bundle.
    for n in names.iter().map(String::as_str).chain(["cnmysql-operator"]) {
        wait_for(
            &format!("{n} trusting the new CA alone"),
            Duration::from_secs(60),
            || async {
                let ca = std::fs::read_to_string(pki(&c).join("ca.crt")).ok()?;
                let trust = std::fs::read_to_string(pki(&c).join(format!("{n}-ca.crt"))).ok()?;
                let fp = cnmysql_tls::rotation::bundle_fingerprints;
                (fp(&trust) == fp(&ca)).then_some(())
            },
        )
        .await;
    }
    let e = c.events().into_iter().find(|e| {
        e["reason"] == "CertificateRenewed"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("another certificate authority signed it"))
    });
    assert!(e.is_some(), "CertificateRenewed naming the new CA");
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let out = w.stop().await;
    // The control plane reaches every manager with its new certificate,
    // and replication reconnects with the new ones: a switchover.
    let primary = c.current_primary();
    let other = names.iter().find(|n| **n != primary).unwrap().clone();
    ok(&c.local(&["promote", &other]), "promote");
    for n in &names {
        writer::verify_on(&c, n, &out.acked).await;
    }
    let after: Vec<(i32, i32)> = names.iter().map(|n| c.instance_pids(n)).collect();
    assert_eq!(after, pids, "no manager or server was restarted");
    eprintln!(
        "CA replaced under writes: {} acknowledged, {} failed, longest gap {:.3}s",
        out.acked.len(),
        out.errors,
        out.longest_gap.as_secs_f64()
    );
    assert_eq!(
        out.errors,
        0,
        "writes failed across the CA change: {}",
        out.failures_report()
    );
    c.destroy();
}
