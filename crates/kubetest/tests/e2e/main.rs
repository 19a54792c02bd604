//! End to end on Kubernetes: a real API server and a real node (kubelet,
//! containerd, kube-proxy: `cnmysql-kubetest`) running the operator's
//! Deployment and the instance Pods it renders from the server images,
//! clients through the rw Service's ClusterIP, and the write checker
//! proving that no acknowledged row is lost.
//!
//! Run with `scripts/test-kube` (needs KUBEBUILDER_ASSETS and root).

use std::time::{Duration, Instant};

use cnmysql_api::Cluster;
use cnmysql_kubetest::{KubeCluster, until};
use cnmysql_workload::writer::WriteChecker;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams};
use mysql_async::prelude::*;

const NS: &str = "e2e";

fn cluster_yaml(durability: &str) -> String {
    cnmysql_kubetest::cluster_manifest(NS, "db", durability)
}

fn cnmysql_exe() -> std::path::PathBuf {
    cnmysql_kubetest::cnmysql_exe()
}

struct Env {
    k: KubeCluster,
    clusters: Api<Cluster>,
    pods: Api<Pod>,
}

/// A cluster on the node, with `db` created and healthy.
async fn env(durability: &str) -> Env {
    env_with_images(durability, &[]).await
}

/// The same, the node also knowing the images in `images`.
async fn env_with_images(durability: &str, images: &[String]) -> Env {
    env_with_manifest(&cluster_yaml(durability), images).await
}

/// A cluster made from `manifest`, ready.
async fn env_with_manifest(manifest: &str, images: &[String]) -> Env {
    env_made_with(images, async |_| manifest.to_string()).await
}

/// A cluster made from the manifest `make` writes once the node runs
/// (given the address Pods reach this machine at), ready.
async fn env_made_with(
    images: &[String],
    make: impl AsyncFnOnce(std::net::IpAddr) -> String,
) -> Env {
    let k = KubeCluster::start_with_images(&cnmysql_exe(), images)
        .await
        .unwrap();
    let manifest = make(k.host_address()).await;
    k.apply_in_new_namespace(NS, &manifest).await.unwrap();
    let e = Env {
        clusters: Api::namespaced(k.client.clone(), NS),
        pods: Api::namespaced(k.client.clone(), NS),
        k,
    };
    e.healthy(3, Duration::from_secs(120)).await;
    e
}

impl Env {
    async fn status(&self) -> cnmysql_api::ClusterStatus {
        self.k.cluster_status(NS, "db").await.unwrap()
    }

    /// Wait until `n` instances are ready, one primary; returns it.
    async fn healthy(&self, n: usize, timeout: Duration) -> String {
        self.k.wait_healthy(NS, "db", n, timeout).await.unwrap()
    }

    async fn app_password(&self) -> String {
        self.k.app_password(NS, "db").await.unwrap()
    }

    async fn writer(&self) -> WriteChecker {
        let rw = self.k.wait_service(NS, "db-rw").await.unwrap();
        drop(self.admin(rw).await);
        WriteChecker::start_at(rw, self.app_password().await).await
    }

    /// A connection through a Service (waiting for an endpoint).
    async fn admin(&self, at: std::net::SocketAddr) -> mysql_async::Conn {
        let pw = self.app_password().await;
        let host = at.ip().to_string();
        until("a connection", Duration::from_secs(30), || {
            cnmysql_kubetest::connect(&host, at.port(), &pw)
        })
        .await
        .unwrap()
    }

    /// A connection straight to an instance's Pod, as the app user.
    async fn direct(&self, instance: &str) -> mysql_async::Conn {
        let pw = self.app_password().await;
        let ip = self
            .pods
            .get(instance)
            .await
            .unwrap()
            .status
            .and_then(|s| s.pod_ip)
            .unwrap();
        until("a connection to the Pod", Duration::from_secs(30), || {
            cnmysql_kubetest::connect(&ip, 3306, &pw)
        })
        .await
        .unwrap()
    }

    /// Every acknowledged row is on every instance.
    async fn verify(&self, acked: &[u64]) {
        assert!(!acked.is_empty(), "no write was acknowledged");
        let all: Vec<String> = ["db-1", "db-2", "db-3"].map(String::from).to_vec();
        let missing = self.k.rows_missing(NS, "db", &all, acked).await.unwrap();
        assert_eq!(missing, 0, "acknowledged rows lost");
    }

    fn plugin(&self, args: &[&str]) -> String {
        self.k.plugin(&cnmysql_exe(), args).unwrap()
    }

    async fn pod_uid(&self, name: &str) -> Option<String> {
        self.pods.get_opt(name).await.ok()??.metadata.uid
    }

    async fn restarts(&self, name: &str) -> i32 {
        self.pods
            .get(name)
            .await
            .ok()
            .and_then(|p| {
                p.status?
                    .container_statuses?
                    .first()
                    .map(|c| c.restart_count)
            })
            .unwrap_or(0)
    }
}

/// The primary changes away from `old`; returns the new one and when the
/// first write sent after `fault` was acknowledged.
async fn failover(
    e: &Env,
    w: WriteChecker,
    old: &str,
    fault: Instant,
) -> (String, Duration, Vec<u64>) {
    let new = until("a new primary", Duration::from_secs(90), || async {
        let p = e.status().await.current_primary?;
        (p != old).then_some(p)
    })
    .await
    .unwrap_or_else(|err| {
        let events =
            e.k.cp
                .kubectl(&["-n", NS, "get", "events", "-o", "wide"], None)
                .unwrap_or_default();
        let status =
            e.k.cp
                .kubectl(&["-n", NS, "get", "cluster", "db", "-o", "yaml"], None)
                .unwrap_or_default();
        panic!("{err}\nevents:\n{events}\ncluster:\n{status}")
    });
    w.wait_for_more(20, Duration::from_secs(60)).await;
    let out = w.stop().await;
    (new, out.outage_after(fault), out.acked)
}

mod annotated;
mod backups;
mod basics;
mod certificates;
mod failover;
mod hibernation;
mod monitoring;
mod sql_objects;
mod storage;
mod upgrades;
