use super::*;

#[test]
fn a_certificate_says_when_it_expires() {
    let ca = Ca::generate("db").unwrap();
    let id = ca.issue("db-1", &["db-1".into()]).unwrap();
    let m = Material {
        ca_pem: ca.identity.cert_pem.clone(),
        identity: id,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let left_days = (m.expires_at().unwrap() - now) / 86_400;
    // The leaf's 90 days, the CA's 3650: the sooner counts.
    assert!((89..=90).contains(&left_days), "{left_days}");
    let broken = Material {
        ca_pem: "junk".into(),
        ..m
    };
    assert_eq!(broken.expires_at(), None);
}

#[test]
fn a_leaf_is_renewed_with_a_third_of_its_life_left_or_when_another_ca_signed_it() {
    let ca = Ca::generate("db").unwrap();
    let life = 3_000;
    let id = ca.issue_for("db-1", &["db-1".into()], life).unwrap();
    let (from, until) = validity_of(&id.cert_pem).unwrap();
    let ca_pem = &ca.identity.cert_pem;
    assert_eq!(renewal_due(&id.cert_pem, ca_pem, life, from + 60), None);
    let two_thirds = from + 60 + life * 2 / 3;
    assert_eq!(
        renewal_due(&id.cert_pem, ca_pem, life, two_thirds - 5),
        None
    );
    assert!(renewal_due(&id.cert_pem, ca_pem, life, two_thirds + 5).is_some());
    assert!(renewal_due(&id.cert_pem, ca_pem, life, until + 1).is_some());
    // A changed lifetime, another CA, junk.
    assert!(renewal_due(&id.cert_pem, ca_pem, 90 * 86_400, from + 60).is_some());
    let other = Ca::generate("db").unwrap();
    assert!(signed_by(&id.cert_pem, ca_pem));
    assert!(!signed_by(&id.cert_pem, &other.identity.cert_pem));
    assert_eq!(
        renewal_due(&id.cert_pem, &other.identity.cert_pem, life, from + 60),
        Some("another certificate authority signed it")
    );
    assert!(renewal_due("junk", ca_pem, life, from).is_some());
}

#[test]
fn concurrent_writers_of_one_file_all_succeed() {
    // Two replicas cloned at once both write the primary's backup.cnf:
    // a shared temporary name made one rename fail with ENOENT.
    let dir = std::env::temp_dir().join(format!("cnmysql-tls-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("backup.cnf");
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    write_private(&path, &format!("writer {t} round {i}\n"), true).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .starts_with("writer ")
    );
    // Nothing but the file itself is left.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn issues_certificates_that_name_their_holder() {
    let ca = Ca::generate("db").unwrap();
    let id = ca
        .issue("db-1", &["localhost".into(), "127.0.0.1".into()])
        .unwrap();
    let der = certs(&id.cert_pem, "x").unwrap();
    assert_eq!(common_name(&der[0]).as_deref(), Some("db-1"));
    let m = Material {
        ca_pem: ca.identity.cert_pem.clone(),
        identity: id,
    };
    m.server_config().unwrap();
    m.client_config().unwrap();
    assert!(!format!("{:?}", m.identity).contains("PRIVATE"));
}

#[test]
fn a_leaf_carries_its_identity_and_its_names_read_as_the_servers_write_them() {
    let ca = Ca::generate("db").unwrap();
    let id = "spiffe://cnmysql.io/ns/prod/cluster/db/instance/db-1".to_string();
    let leaf = ca
        .issue_leaf(
            &Leaf {
                common_name: "db",
                unit: Some("prod"),
                names: &["db-1".into(), "10.0.0.1".into(), id.clone()],
            },
            600,
        )
        .unwrap();
    assert!(carries_identity(&leaf.cert_pem, &id));
    assert!(!carries_identity(
        &leaf.cert_pem,
        "spiffe://cnmysql.io/ns/other/cluster/db/instance/db-1"
    ));
    assert_eq!(
        oneline(&leaf.cert_pem, Name::Subject).as_deref(),
        Some("/CN=db/O=cloudnative-mysql/OU=prod")
    );
    assert_eq!(
        oneline(&leaf.cert_pem, Name::Issuer).as_deref(),
        Some("/CN=cnmysql db CA/O=cloudnative-mysql")
    );
}
