//! A server certificate the user brings (`spec.secrets.serverTlsSecret`),
//! on the local platform against real servers: clients that trust only
//! the user's CA connect to every instance and check its name; replication
//! and a switchover work with it; a renewed Secret is taken into use
//! without a restart or a failed write.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use mysql_async::prelude::*;

const REQUIRED: &str = "    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: required\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n";

/// Write the Secret `srv` as a person (or cert-manager) would: a
/// certificate of `ca` naming the address clients use, its key, the CA.
fn write_secret(dir: &Path, ca: &cnmysql_tls::Ca, lifetime_secs: i64) -> String {
    let d = dir.join("srv");
    std::fs::create_dir_all(&d).unwrap();
    let id = ca
        .issue_for(
            "db-rw",
            &["127.0.0.1".into(), "localhost".into()],
            lifetime_secs,
        )
        .unwrap();
    // The key first, as a writer that is not atomic might: the manager
    // takes nothing until the two belong together.
    std::fs::write(d.join("tls.key"), &id.key_pem).unwrap();
    std::fs::write(d.join("tls.crt"), &id.cert_pem).unwrap();
    std::fs::write(d.join("ca.crt"), &ca.identity.cert_pem).unwrap();
    id.cert_pem
}

/// `Ssl_server_not_after` over a new connection to `port` that checks
/// the server's certificate, and the name in it, against `ca_file` alone.
async fn not_after_trusting(port: u16, password: &str, ca_file: &Path) -> Result<String, String> {
    let ssl = mysql_async::SslOpts::default().with_root_certs(vec![ca_file.to_path_buf().into()]);
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(port)
        .user(Some("app"))
        .pass(Some(password))
        .prefer_socket(false)
        .ssl_opts(Some(ssl));
    let mut conn = mysql_async::Conn::new(opts)
        .await
        .map_err(|e| e.to_string())?;
    let row: Option<(String, String)> = conn
        .query_first("SHOW SESSION STATUS LIKE 'Ssl_server_not_after'")
        .await
        .map_err(|e| e.to_string())?;
    conn.disconnect().await.ok();
    Ok(row.map(|r| r.1).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_server_certificate_is_presented_checked_by_clients_and_renewed_without_a_failed_write()
 {
    let secrets = tempfile::tempdir().unwrap();
    // The only test of this binary: the local platform reads it when it
    // writes the instances' configuration.
    unsafe { std::env::set_var("CNMYSQL_SECRETS_DIR", secrets.path()) };
    let corp = cnmysql_tls::Ca::generate("corp").unwrap();
    let corp_ca = secrets.path().join("corp-ca.crt");
    std::fs::write(&corp_ca, &corp.identity.cert_pem).unwrap();
    write_secret(secrets.path(), &corp, 86_400);

    let text = format!(
        "{}{REQUIRED}  secrets:\n    serverTlsSecret: srv\n",
        manifest("usr", 3)
    );
    let c = LocalCluster::start("usr", &text);
    let names: Vec<String> = (1..=3).map(|i| format!("usr-{i}")).collect();
    let pids: Vec<(i32, i32)> = names.iter().map(|n| c.instance_pids(n)).collect();
    let pw = c.app_password();
    let mut first = Vec::new();
    for n in &names {
        let got = not_after_trusting(c.instance_port(n), &pw, &corp_ca).await;
        first.push(got.unwrap_or_else(|e| panic!("{n} with the corp CA alone: {e}")));
    }
    // The cluster's own CA no longer vouches for what mysqld presents.
    let own_ca = Path::new(&c.state_arg()).join("pki/ca.crt");
    assert!(
        not_after_trusting(c.service_port("rw"), &pw, &own_ca)
            .await
            .is_err(),
        "the user's certificate is presented, not the cluster CA's"
    );

    let w = writer::start(&c).await;
    w.wait_for_more(30, Duration::from_secs(20)).await;
    write_secret(secrets.path(), &corp, 2 * 86_400);
    for (i, n) in names.iter().enumerate() {
        wait_for(
            &format!("{n} presenting the renewed certificate"),
            Duration::from_secs(30),
            || async {
                let now = not_after_trusting(c.instance_port(n), &pw, &corp_ca)
                    .await
                    .ok()?;
                (now != first[i]).then_some(())
            },
        )
        .await;
    }
    w.wait_for_more(30, Duration::from_secs(20)).await;
    let out = w.stop().await;
    assert_eq!(
        out.errors,
        0,
        "writes failed across the renewal: {}",
        out.failures_report()
    );

    // Replication checks the user's CA: a switchover re-points every
    // replica to the new primary, and each holds every acknowledged row.
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
    let after: Vec<(i32, i32)> = names.iter().map(|n| c.instance_pids(n)).collect();
    assert_eq!(after, pids, "no manager or server was restarted");
    eprintln!(
        "user's server certificate renewed under writes: {} acknowledged, 0 failed, longest gap {:.3}s",
        out.acked.len(),
        out.longest_gap.as_secs_f64()
    );
    c.destroy();
}
