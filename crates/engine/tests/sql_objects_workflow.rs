//! The declared-objects workflow (`cnmysql_engine::sql_objects`) with an
//! in-memory platform: what is recorded and said when a User's Secret is
//! missing, when there is no primary, and what a deleted object under
//! `deletionPolicy: Keep` becomes. Objects carried out on a real primary
//! are proven by the local suite (`crates/cnmysql/tests/sql_objects.rs`).

use cnmysql_api::backup::SecretKeyRef;
use cnmysql_api::sql_objects::SqlObjectDoc;
use cnmysql_api::{ClusterSpec, ClusterStatus};
use cnmysql_control::client::ControlClient;
use cnmysql_core::event::Event;
use cnmysql_engine::sql_objects::{Outcome, Pass, Present, SqlObjectsPlatform, reconcile};

#[derive(Default)]
struct Memory {
    records: Vec<(String, Outcome)>,
    forgotten: Vec<String>,
    events: Vec<Event>,
    asked_address: bool,
    asked_secrets: Vec<String>,
}

impl SqlObjectsPlatform for Memory {
    async fn client(&mut self) -> Result<ControlClient, String> {
        Err("no client in memory".into())
    }
    async fn address(&mut self, _instance: &str) -> Result<Option<(String, u16)>, String> {
        self.asked_address = true;
        Ok(None)
    }
    async fn secret(&mut self, key: &SecretKeyRef) -> Result<String, String> {
        self.asked_secrets.push(key.name.clone());
        Err(format!("the Secret {} has no key {}", key.name, key.key))
    }
    async fn record(&mut self, doc: &SqlObjectDoc, outcome: &Outcome) {
        self.records.push((doc.key(), outcome.clone()));
    }
    async fn forget(&mut self, doc: &SqlObjectDoc) {
        self.forgotten.push(doc.key());
    }
    async fn event(&mut self, event: &Event) {
        self.events.push(event.clone());
    }
}

fn doc(kind: &str, spec: &str) -> SqlObjectDoc {
    let text = format!(
        "apiVersion: mysql.cnmysql.io/v1\nkind: {kind}\nmetadata:\n  name: shop\nspec:\n  cluster: {{name: db}}\n{spec}"
    );
    SqlObjectDoc::parse(kind, &text).unwrap().unwrap()
}

fn present(d: SqlObjectDoc) -> Present {
    Present {
        doc: d,
        last: Outcome::default(),
    }
}

#[tokio::test]
async fn a_user_without_its_secret_waits_and_says_which_once() {
    let mut p = Memory::default();
    let user = doc(
        "User",
        "  passwordSecretKeyRef: {name: shop-pw, key: password}\n",
    );
    let status = ClusterStatus::default();
    let spec: ClusterSpec = serde_json::from_str("{}").unwrap();
    let pass = |last: Outcome| Pass {
        cluster: "db",
        spec: &spec,
        neighbours: Vec::new(),
        status: &status,
        present: vec![Present {
            doc: user.clone(),
            last,
        }],
        deleted: vec![],
        digest_key: "k".into(),
    };
    reconcile(&mut p, pass(Outcome::default())).await;
    let (key, outcome) = &p.records[0];
    assert_eq!(key, "User/shop");
    assert!(!outcome.ready);
    assert_eq!(outcome.message, "the Secret shop-pw has no key password");
    assert_eq!(p.events.len(), 1, "said once: {:?}", p.events);
    assert!(p.events[0].warning && p.events[0].message.starts_with("User/shop: "));
    // The same reason again: recorded, not said again.
    let last = outcome.clone();
    reconcile(&mut p, pass(last)).await;
    assert_eq!(p.events.len(), 1);
    assert!(!p.asked_address, "nothing was sent");
}

#[tokio::test]
async fn without_a_primary_every_object_waits_and_a_kept_deletion_is_let_go() {
    let mut p = Memory::default();
    let status = ClusterStatus::default();
    let spec: ClusterSpec = serde_json::from_str("{}").unwrap();
    let kept = doc("Database", "");
    let dropped = doc(
        "Grant",
        "  privileges: [SELECT]\n  database: shop\n  username: shopper\n  deletionPolicy: Delete\n",
    );
    reconcile(
        &mut p,
        Pass {
            cluster: "db",
            spec: &spec,
            neighbours: Vec::new(),
            status: &status,
            present: vec![present(doc("Database", "  name: orders\n"))],
            deleted: vec![kept, dropped],
            digest_key: "k".into(),
        },
    )
    .await;
    assert_eq!(p.forgotten, ["Database/shop"], "Keep: forgotten at once");
    assert_eq!(p.records.len(), 1);
    assert_eq!(p.records[0].1.message, "waiting for a primary");
}

#[tokio::test]
async fn a_users_password_never_comes_from_the_clusters_own_secrets_nor_says_which_exist() {
    let status = ClusterStatus::default();
    let spec: ClusterSpec =
        serde_json::from_str(r#"{"instances": 2, "secrets": {"rootSecret": "prod-admin"}}"#)
            .unwrap();
    for secret in [
        "db-root",
        "db-app",
        "db-replication",
        "db-1-tls",
        "prod-admin",
    ] {
        let mut p = Memory::default();
        let user = doc(
            "User",
            &format!("  passwordSecretKeyRef: {{name: {secret}, key: password}}\n"),
        );
        reconcile(
            &mut p,
            Pass {
                cluster: "db",
                spec: &spec,
                neighbours: vec![("other".into(), spec.clone())],
                status: &status,
                present: vec![present(user)],
                deleted: vec![],
                digest_key: "k".into(),
            },
        )
        .await;
        assert!(p.asked_secrets.is_empty(), "{secret} was read");
        let (_, outcome) = &p.records[0];
        assert!(!outcome.ready);
        assert!(
            outcome
                .message
                .starts_with("spec.passwordSecretKeyRef.name:")
                && outcome.message.contains("uses itself"),
            "{}",
            outcome.message
        );
    }
}
