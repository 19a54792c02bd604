//! The control API and replication know whom they talk to.

use super::*;

/// What `client` gets from the control API at `port`: a change only the
/// operator may make (semi-sync), and a copy of the data.
pub(crate) async fn ask_as(
    client: cnmysql_control::client::ControlClient,
    port: u16,
) -> (anyhow::Result<String>, anyhow::Result<u16>) {
    let semi = cnmysql_control::contract::SemiSync {
        enabled: false,
        wait_for_count: 1,
        timeout_millis: 1000,
    };
    let set = cnmysql_control::requests::set_semi_sync(&client, "127.0.0.1", port, &semi).await;
    let copy = client
        .send(
            "127.0.0.1",
            port,
            "GET",
            cnmysql_control::contract::BACKUP,
            &[],
            None,
        )
        .await;
    (set, copy.map(|r| r.status().as_u16()))
}

/// A client of `c`'s control APIs presenting a certificate of `ca` for
/// `who` with `names`.
pub(crate) fn client_as(
    c: &LocalCluster,
    ca: &cnmysql_tls::Ca,
    who: &str,
    names: &[String],
) -> cnmysql_control::client::ControlClient {
    let trust = std::fs::read_to_string(Path::new(&c.state_arg()).join("pki/ca.crt")).unwrap();
    let m = cnmysql_tls::Material {
        ca_pem: trust,
        identity: ca.issue(who, names).unwrap(),
    };
    cnmysql_control::client::ControlClient::new(m.client_config().unwrap())
}

pub(crate) fn cluster_ca(c: &LocalCluster) -> cnmysql_tls::Ca {
    let pki = Path::new(&c.state_arg()).join("pki");
    cnmysql_tls::Ca {
        identity: cnmysql_tls::Identity {
            cert_pem: std::fs::read_to_string(pki.join("ca.crt")).unwrap(),
            key_pem: std::fs::read_to_string(pki.join("ca.key")).unwrap(),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn the_control_api_and_replication_know_whom_they_talk_to() {
    secrets();
    use cnmysql_api::names::{OPERATOR_IDENTITY, identity};
    let name = "sec-who";
    let c = LocalCluster::start_as_made(name, &manifest(name, 2));
    let primary = c.current_primary();
    let port = c.control_port(&primary);
    let ask = |client| ask_as(client, port);
    // The operator's common name, from another CA: no handshake at all.
    let other = cnmysql_tls::Ca::generate(name).unwrap();
    let (set, copy) = ask(client_as(
        &c,
        &other,
        OPERATOR_IDENTITY,
        &[OPERATOR_IDENTITY.into()],
    ))
    .await;
    assert!(
        set.is_err() && copy.is_err(),
        "another CA's certificate was served"
    );
    // The cluster's own CA (a shared issuer), but the common name alone,
    // or the identity of the same cluster name in another namespace, or
    // of another cluster: refused what only the operator may do, and the
    // data.
    let ca = cluster_ca(&c);
    for names in [
        vec![OPERATOR_IDENTITY.to_string()],
        vec![identity("staging", name, OPERATOR_IDENTITY)],
        vec![identity("local", "other", OPERATOR_IDENTITY)],
        vec![identity("staging", name, &format!("{name}-2"))],
    ] {
        let (set, copy) = ask(client_as(&c, &ca, OPERATOR_IDENTITY, &names)).await;
        let refused = set
            .as_ref()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(refused.contains("403"), "{names:?}: {set:?}");
        assert_eq!(copy.unwrap(), 403, "{names:?} may copy the data");
    }
    // The operator's own identity is served.
    let (set, _) = ask(client_as(
        &c,
        &ca,
        OPERATOR_IDENTITY,
        &[identity("local", name, OPERATOR_IDENTITY)],
    ))
    .await;
    assert!(set.is_ok(), "{set:?}");

    // Replication: the account's password with a certificate of the
    // cluster's CA for another subject is refused; its own instances'
    // certificate signs in.
    let repl =
        std::fs::read_to_string(Path::new(&c.state_arg()).join("secrets/replication-password"))
            .unwrap();
    let dir = c.dir.path().join("stranger");
    std::fs::create_dir_all(&dir).unwrap();
    let stranger = ca.issue("other-cluster", &["127.0.0.1".into()]).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, &stranger.cert_pem).unwrap();
    std::fs::write(&key, &stranger.key_pem).unwrap();
    let pki = Path::new(&c.state_arg()).join("pki");
    let sign_in = |cert: PathBuf, key: PathBuf| {
        let ssl = mysql_async::SslOpts::default()
            .with_root_certs(vec![pki.join("ca.crt").into()])
            .with_danger_skip_domain_validation(true)
            .with_client_identity(Some(mysql_async::ClientIdentity::new(
                cert.into(),
                key.into(),
            )));
        let opts = OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(c.instance_port(&primary))
            .user(Some("cnmysql_replication"))
            .pass(Some(repl.trim().to_string()))
            .prefer_socket(false)
            .ssl_opts(Some(ssl));
        Conn::new(opts)
    };
    assert!(
        sign_in(cert, key).await.is_err(),
        "a stranger's certificate signed in as the replication account"
    );
    let own = format!("{name}-2");
    assert!(
        sign_in(
            pki.join(format!("{own}.crt")),
            pki.join(format!("{own}.key"))
        )
        .await
        .is_ok(),
        "an instance's certificate is refused"
    );
    c.destroy();
}
