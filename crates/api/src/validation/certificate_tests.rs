#[test]
fn a_certificate_lifetime_under_a_minute_is_refused_naming_the_field() {
    let m = |life: &str| {
        format!(
            "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: db\nspec:\n  secrets:\n    certificateLifetimeSeconds: {life}\n"
        )
    };
    let e = super::parse_cluster(&m("30")).unwrap_err().to_string();
    assert!(
        e.contains("spec.secrets.certificateLifetimeSeconds: is 30; use at least 60"),
        "{e}"
    );
    let c = super::parse_cluster(&m("86400")).unwrap();
    assert_eq!(c.spec.secrets.certificate_lifetime(), 86_400);
    let c = super::parse_cluster(&m("null")).unwrap();
    assert_eq!(c.spec.secrets.certificate_lifetime(), 90 * 86_400);
}

#[test]
fn a_secret_name_that_is_a_path_is_refused_naming_the_field() {
    let m = "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: db\nspec:\n  secrets:\n    serverTlsSecret: ../../etc\n";
    let e = super::parse_cluster(m).unwrap_err().to_string();
    assert!(e.contains("spec.secrets.serverTlsSecret"), "{e}");
    let ok = m.replace("../../etc", "db-server.tls");
    super::parse_cluster(&ok).unwrap();
}

#[test]
fn a_binlog_volume_size_that_is_not_a_size_is_refused_naming_the_field() {
    let m = "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: db\nspec:\n  storage:\n    binlogs:\n      size: lots\n";
    let e = super::parse_cluster(m).unwrap_err().to_string();
    assert!(e.contains("spec.storage.binlogs.size"), "{e}");
}
