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
        let out = local_up(&m, &state, "0", &[]);
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

/// Every command that names an existing cluster refuses a name it does not
/// know, saying which and what to do; none prints nothing and succeeds.
#[test]
fn every_command_refuses_a_cluster_that_does_not_exist() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(BIN)
            .args(args)
            .env("XDG_DATA_HOME", home.path())
            .env("HOME", home.path())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    for args in [
        &["local", "status", "nosuch"][..],
        &["local", "status", "--name", "nosuch"],
        &["local", "events", "nosuch"],
        &["local", "down", "nosuch"],
        &["local", "destroy", "nosuch"],
        &["local", "upgrade", "nosuch"],
        &["local", "promote", "nosuch", "nosuch-2"],
        &["local", "promote", "--name", "nosuch", "nosuch-2"],
        &["local", "promote", "nosuch-2"],
        &["local", "fence", "on", "nosuch", "nosuch-2"],
        &["local", "restart-inplace", "nosuch", "nosuch-2"],
    ] {
        let (ok, err) = run(args);
        assert!(!ok, "{args:?} succeeded");
        assert!(
            err.contains("there is no local cluster nosuch") && err.contains("local up"),
            "{args:?}: {err}"
        );
    }
    // Named twice, differently: refused before anything is looked up.
    let (ok, err) = run(&["local", "promote", "--name", "a", "b", "b-2"]);
    assert!(!ok && err.contains("named twice"), "{err}");
}

/// A state directory that cannot be made is named, with the flag that
/// chooses another, and nothing is started.
#[test]
fn an_unusable_state_directory_is_named_with_the_flag_to_change_it() {
    let tmp = tempfile::tempdir().unwrap();
    let m = tmp.path().join("cluster.yaml");
    std::fs::write(&m, manifest("fs", 1)).unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let state = file.join("state");
    let out = local_up(&m, &state, "0", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&state.display().to_string()) && err.contains("--state-dir"),
        "{err}"
    );
}
