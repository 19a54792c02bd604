#[test]
fn a_wrong_kind_or_version_is_quoted_as_written() {
    let e = super::parse_cluster("apiVersion: v1\nkind: Clusters\nmetadata:\n  name: db\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("kind: is \"Clusters\"; set it to Cluster"),
        "{e}"
    );
    assert!(e.contains("apiVersion: is \"v1\""), "{e}");
    assert!(!e.contains("Some("), "{e}");
    let e = super::parse_cluster("metadata:\n  name: db\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("kind: is missing"), "{e}");
}
