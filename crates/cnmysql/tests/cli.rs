//! The CLI refuses bad manifests before starting anything, naming the field
//! and the fix.

mod common;

use common::*;

const BASE: &str =
    "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: bad\nspec:\n";

#[test]
fn invalid_specs_are_refused_before_anything_starts() {
    let cases = [
        ("  instances: 0\n", "spec.instances"),
        (
            "  instances: 3\n  minSyncReplicas: 2\n  maxSyncReplicas: 1\n",
            "spec.minSyncReplicas",
        ),
        (
            "  instances: 2\n  maxSyncReplicas: 2\n",
            "spec.maxSyncReplicas",
        ),
        (
            "  instances: 3\n  managed:\n    services:\n      disabledDefaultServices: [rw]\n",
            "disabledDefaultServices",
        ),
        (
            "  instances: 3\n  managed:\n    services:\n      additional:\n      - {name: ro, selectorType: ro}\n",
            "additional[0].name",
        ),
        (
            "  instances: 3\n  managed:\n    services:\n      additional:\n      - {name: lb, selectorType: rw}\n      - {name: lb, selectorType: ro}\n",
            "additional[1].name",
        ),
        (
            "  instances: 3\n  mysql:\n    flavor: oracle\n",
            "spec.mysql.flavor",
        ),
        (
            "  instances: 3\n  failoverDelay: -1\n",
            "spec.failoverDelay",
        ),
        (
            "  instances: 3\n  maxSwitchoverDelay: -10\n",
            "spec.maxSwitchoverDelay",
        ),
        (
            "  instances: 3\n  mysql:\n    parameters:\n      server_id: \"5\"\n",
            "spec.mysql.parameters.server_id",
        ),
        ("  instancez: 3\n", "spec.instancez"),
    ];
    for (body, field) in cases {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("c.yaml");
        std::fs::write(&m, format!("{BASE}{body}")).unwrap();
        let state = dir.path().join("state");
        let out = cnmysql(&[
            "local",
            "up",
            "-f",
            m.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
            "--port-base",
            "0",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted {body:?}");
        assert!(
            err.contains(field),
            "the error for {body:?} does not name {field}:\n{err}"
        );
        assert!(
            !state.exists(),
            "a state directory was created for an invalid manifest"
        );
        assert!(processes_mentioning(state.to_str().unwrap()).is_empty());
    }
}

#[test]
fn the_crd_command_prints_the_committed_crd() {
    let out = cnmysql(&["crd"]);
    assert!(out.status.success());
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crd.yaml"
    ))
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), committed);
}

#[test]
fn status_of_a_missing_cluster_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = cnmysql(&[
        "local",
        "status",
        "--state-dir",
        dir.path().join("nope").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no local cluster"));
}
