//! The control API speaks HTTPS with mutual TLS against the cluster's CA
//! only; identities are checked for operations that copy data.

mod common;

use std::sync::Arc;

use cnmysql_control::client::ControlClient;
use cnmysql_tls::{Ca, Material, TlsPaths};
use common::*;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn cluster_ca(c: &LocalCluster) -> String {
    std::fs::read_to_string(std::path::Path::new(&c.state_arg()).join("pki/ca.crt")).unwrap()
}

/// A raw GET with a client that presents no certificate at all.
async fn get_without_certificate(ca_pem: &str, port: u16) -> Result<String, String> {
    let cfg = client_without_certificate(ca_pem);
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    tls.write_all(b"GET /status HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = String::new();
    tls.read_to_string(&mut buf)
        .await
        .map_err(|e| e.to_string())?;
    if buf.is_empty() {
        Err("connection closed without an answer".into())
    } else {
        Ok(buf)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_clients_of_the_cluster_ca_are_served() {
    let c = LocalCluster::start("api", &manifest("api", 1));
    let port = c.control_port("api-1");
    let pki = std::path::Path::new(&c.state_arg()).join("pki");

    // The operator's certificate works.
    let operator = TlsPaths::in_dir(&pki, "cnmysql-operator").load().unwrap();
    let client = ControlClient::new(operator.client_config().unwrap());
    let st: serde_json::Value = client.get_json("127.0.0.1", port, "/status").await.unwrap();
    assert_eq!(st["instance"], "api-1");
    assert_eq!(st["ready"], true);
    assert_eq!(st["executableHash"].as_str().unwrap().len(), 64);
    assert!(st["uptimeSeconds"].is_u64());
    assert!(st["managerVersion"].is_string());
    for path in ["/healthz", "/readyz"] {
        let resp = client
            .send("127.0.0.1", port, "GET", path, &[], None)
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }

    // No certificate: refused.
    let refused = get_without_certificate(&cluster_ca(&c), port).await;
    assert!(
        refused.is_err(),
        "served a client without a certificate: {refused:?}"
    );

    // A certificate from another CA (even with a plausible name): refused.
    let other = Ca::generate("other").unwrap();
    let forged = Material {
        ca_pem: cluster_ca(&c),
        identity: other
            .issue("cnmysql-operator", &["cnmysql-operator".into()])
            .unwrap(),
    };
    let r = ControlClient::new(forged.client_config().unwrap())
        .get_json::<serde_json::Value>("127.0.0.1", port, "/status")
        .await;
    assert!(r.is_err(), "served a certificate of another CA");

    // A certificate of our CA but of a foreign identity may read status, not copy data.
    let ca = Ca {
        identity: cnmysql_tls::Identity {
            cert_pem: cluster_ca(&c),
            key_pem: std::fs::read_to_string(pki.join("ca.key")).unwrap(),
        },
    };
    let stranger = Material {
        ca_pem: cluster_ca(&c),
        identity: ca.issue("someone-else", &["someone-else".into()]).unwrap(),
    };
    let stranger = ControlClient::new(stranger.client_config().unwrap());
    let resp = stranger
        .send("127.0.0.1", port, "GET", "/backup", &[], None)
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    c.destroy();
}
