//! The kubectl plugin binary against a Kubernetes API (the in-memory fake,
//! served over HTTP and found through a kubeconfig, as kubectl would).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use cnmysql_api::{Cluster, ClusterSpec, ClusterStatus};
use cnmysql_k8s::fake::{FakeApi, write_kubeconfig};
use serde_json::json;

struct Kube {
    api: FakeApi,
    kubeconfig: PathBuf,
    bin: PathBuf,
    _dir: tempfile::TempDir,
}

async fn kube() -> Kube {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::new();
    let spec: ClusterSpec = serde_json::from_value(json!({ "instances": 3 })).unwrap();
    let mut c = Cluster::new("db", spec);
    c.metadata.namespace = Some("shop".into());
    c.status = Some(ClusterStatus {
        current_primary: Some("db-1".into()),
        target_primary: Some("db-1".into()),
        ready_instances: 3,
        // What the operator's last poll saw.
        instance_states: [
            ("db-1", "primary", "running", true, false),
            ("db-2", "replica", "running", true, true),
            ("db-3", "unreachable", "", false, false),
        ]
        .into_iter()
        .map(|(n, role, phase, ready, read_only)| {
            (
                n.to_string(),
                cnmysql_api::InstanceState {
                    role: role.into(),
                    phase: phase.into(),
                    ready,
                    read_only,
                    ..Default::default()
                },
            )
        })
        .collect(),
        ..Default::default()
    });
    api.put_cluster(serde_json::to_value(c).unwrap());
    let url = api.serve().await.unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(&kubeconfig, &url, "shop").unwrap();
    let bin = dir.path().join("bin");
    let out = common::cnmysql(&["plugin", "install", "--dir", bin.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Kube {
        api,
        kubeconfig,
        bin,
        _dir: dir,
    }
}

impl Kube {
    async fn run(&self, name: &str, args: &[&str]) -> Output {
        tokio::process::Command::new(self.bin.join(name))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env_remove("KUBECONFIG")
            .kill_on_drop(true)
            .output()
            .await
            .unwrap()
    }

    fn status(&self) -> ClusterStatus {
        serde_json::from_value(self.api.cluster("shop", "db").unwrap()["status"].clone()).unwrap()
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test]
async fn install_links_both_plugin_names() {
    let k = kube().await;
    for name in ["kubectl-cnmsql", "kubectl-cloudnative_mysql"] {
        let p = k.bin.join(name);
        assert!(
            std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_link(&p).unwrap(),
            Path::new(common::BIN).canonicalize().unwrap()
        );
    }
    // Installing again replaces its own links.
    let out = common::cnmysql(&["plugin", "install", "--dir", k.bin.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let help = k.run("kubectl-cnmsql", &["--help"]).await;
    assert!(text(&help).contains("kubectl cnmsql"), "{}", text(&help));
}

/// `kubectl cnmsql` and `kubectl cloudnative-mysql`, as the docs write
/// them, through the real kubectl's plugin lookup.
#[tokio::test]
async fn kubectl_finds_the_plugin_under_both_names() {
    let Some(kubectl) = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("kubectl"))
            .find(|k| k.is_file())
    }) else {
        eprintln!("kubectl is not installed here; its plugin lookup is not checked");
        return;
    };
    let k = kube().await;
    // A link from an older install under the name kubectl misreads.
    let old = k.bin.join("kubectl-cloudnative-mysql");
    std::os::unix::fs::symlink(common::BIN, &old).unwrap();
    let out = common::cnmysql(&["plugin", "install", "--dir", k.bin.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        std::fs::symlink_metadata(&old).is_err(),
        "the old link is removed"
    );
    let path = std::env::join_paths(
        std::iter::once(k.bin.clone())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    for words in [&["cnmsql"][..], &["cloudnative-mysql"][..]] {
        let out = tokio::process::Command::new(&kubectl)
            .args(words)
            .args([
                "--kubeconfig",
                k.kubeconfig.to_str().unwrap(),
                "status",
                "db",
            ])
            .env("PATH", &path)
            .env_remove("KUBECONFIG")
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl {}: {}",
            words.join(" "),
            text(&out)
        );
        assert!(text(&out).contains("db-1"), "{}", text(&out));
    }
}

#[tokio::test]
async fn promote_and_fence_write_the_cluster_status() {
    let k = kube().await;
    // The namespace comes from the kubeconfig's context.
    let out = k
        .run("kubectl-cnmsql", &["promote", "db", "db-2", "--wait=false"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("from db-1 to db-2 requested"),
        "{}",
        text(&out)
    );
    let st = k.status();
    assert_eq!(st.target_primary.as_deref(), Some("db-2"));
    assert_eq!(st.current_primary.as_deref(), Some("db-1"));

    // A second request while the first is pending is refused, and says why.
    let out = k
        .run("kubectl-cnmsql", &["promote", "db", "db-3", "--wait=false"])
        .await;
    assert!(!out.status.success());
    assert!(text(&out).contains("already in progress"), "{}", text(&out));

    let out = k
        .run("kubectl-cloudnative_mysql", &["fence", "on", "db", "db-3"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(k.status().fenced_instances, ["db-3"]);
    let out = k
        .run("kubectl-cnmsql", &["fence", "on", "db", "db-1"])
        .await;
    assert!(text(&out).contains("accepts no writes"), "{}", text(&out));
    let out = k.run("kubectl-cnmsql", &["status", "db"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!table.contains('\x1b'), "no colours when piped: {table}");
    let line = |inst: &str| {
        table
            .lines()
            .find(|l| l.starts_with(inst))
            .unwrap_or("")
            .to_string()
    };
    assert!(line("db-1").contains("primary (fenced)"), "{table}");
    // The status view, as `cnmysql local status` shows it, with live
    // per-instance columns from the operator's report.
    assert!(
        table.lines().any(|l| l.split_whitespace().eq([
            "INSTANCE",
            "ROLE",
            "READY",
            "READ-ONLY",
            "PHASE",
            "GTID",
            "LAG",
            "SEMI-SYNC",
            "VERSION",
            "MANAGER",
            "STORAGE",
            "USED"
        ])),
        "{table}"
    );
    let cols = |inst: &str| {
        line(inst)
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // INSTANCE, ROLE (marks), READY, READ-ONLY, PHASE
    assert_eq!(
        cols("db-2")[1..6],
        ["replica", "(target)", "yes", "yes", "running"],
        "{table}"
    );
    assert_eq!(
        cols("db-3")[1..6],
        ["unreachable", "(fenced)", "no", "-", "-"],
        "{table}"
    );
    let out = k
        .run("kubectl-cnmsql", &["status", "db", "-o", "json"])
        .await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"]["fencedInstances"], json!(["db-1", "db-3"]));

    for i in ["db-1", "db-3"] {
        let out = k.run("kubectl-cnmsql", &["fence", "off", "db", i]).await;
        assert!(out.status.success(), "{}", text(&out));
    }
    assert!(k.status().fenced_instances.is_empty());
    let reasons: Vec<String> = k
        .api
        .events()
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        reasons,
        [
            "SwitchoverRequested",
            "SwitchoverRefused",
            "Fenced",
            "Fenced",
            "Unfenced",
            "Unfenced"
        ]
    );
}

#[tokio::test]
async fn promote_waits_for_the_operator() {
    let k = kube().await;
    let operator = k.api.clone();
    // Plays the operator: once the request is in, the target takes over.
    tokio::spawn(async move {
        loop {
            let mut c = operator.cluster("shop", "db").unwrap();
            if c["status"]["targetPrimary"] == "db-2" {
                tokio::time::sleep(Duration::from_millis(300)).await;
                c["status"]["currentPrimary"] = json!("db-2");
                operator.put_cluster(c);
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let out = k
        .run(
            "kubectl-cnmsql",
            &["promote", "db", "db-2", "--timeout", "20"],
        )
        .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("db-2 is the primary"), "{}", text(&out));
}

#[tokio::test]
async fn bad_targets_say_what_to_fix() {
    let k = kube().await;
    let out = k
        .run("kubectl-cnmsql", &["-n", "other", "status", "db"])
        .await;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("cluster db not found in namespace other"),
        "{}",
        text(&out)
    );

    let out = k
        .run("kubectl-cnmsql", &["fence", "on", "db", "db-7"])
        .await;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("instances are db-1 to db-3"),
        "{}",
        text(&out)
    );

    let out = k
        .run("kubectl-cnmsql", &["fence", "maybe", "db", "db-2"])
        .await;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("possible values: on, off"),
        "{}",
        text(&out)
    );

    let out = k
        .run("kubectl-cnmsql", &["--state-dir", "/tmp/x", "status", "db"])
        .await;
    assert!(text(&out).contains("add --local"), "{}", text(&out));

    let missing = k.bin.join("no-such-kubeconfig");
    let out = tokio::process::Command::new(k.bin.join("kubectl-cnmsql"))
        .args(["--kubeconfig", missing.to_str().unwrap(), "status", "db"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("--kubeconfig"), "{}", text(&out));

    // No secret of the kubeconfig reaches the output.
    assert!(!text(&out).contains("not-a-secret"));
}
