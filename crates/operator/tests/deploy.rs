//! deploy/operator.yaml is what the code generates.

#[test]
fn the_committed_operator_manifest_matches_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/operator.yaml");
    let want = cnmysql_operator::deploy::manifest(cnmysql_operator::deploy::DEFAULT_IMAGE);
    if std::env::var_os("CNMYSQL_UPDATE_DEPLOY").is_some() {
        std::fs::write(path, &want).unwrap();
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        have == want,
        "deploy/operator.yaml is out of date: run `CNMYSQL_UPDATE_DEPLOY=1 cargo test -p cnmysql-operator --test deploy` (or `cnmysql deploy-manifest > deploy/operator.yaml`) and commit it"
    );
    // The CRD inside is the committed one.
    let crd = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crd.yaml"
    ))
    .unwrap();
    let body: String = crd
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(have.contains(&body));
}
