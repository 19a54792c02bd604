//! What every reconcile shares: the client, the platform facts the builders
//! need, the operator's executable hash, the metrics, the watch caches the
//! topology tasks read, and what those tasks remember.

use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::runtime::reflector::Store;

use cnmysql_api::Cluster;

use crate::metrics::Metrics;
use crate::objects::Environment;

pub struct Context {
    pub client: kube::Client,
    pub env: Environment,
    /// SHA-256 of the running operator executable (`status.operatorExecutableHash`).
    pub operator_hash: String,
    pub metrics: Metrics,
    /// What the operator remembers per Cluster.
    pub memory: crate::memory::Memories,
    /// The controllers' Cluster caches and the Pod caches (one per watched
    /// namespace, or one for all).
    pub clusters: Mutex<Vec<Store<Cluster>>>,
    pub pods: Mutex<Vec<Store<Pod>>>,
    /// The Clusters' Secrets (the operator's client certificate is read
    /// from here on every poll).
    pub secrets: Mutex<Vec<Store<Secret>>>,
    /// The Nodes without their status ([`crate::nodes`]); none until the
    /// operator leads.
    pub nodes: Mutex<Option<Store<Node>>>,
    /// True once the operator stops leading or shuts down: every task ends.
    pub stop: tokio::sync::watch::Sender<bool>,
}

impl Context {
    /// A context with empty caches and memory, before any controller runs.
    pub fn new(
        client: kube::Client,
        env: Environment,
        operator_hash: String,
        metrics: Metrics,
    ) -> Context {
        Context {
            client,
            env,
            operator_hash,
            metrics,
            memory: Default::default(),
            clusters: Default::default(),
            pods: Default::default(),
            secrets: Default::default(),
            nodes: Default::default(),
            stop: tokio::sync::watch::channel(false).0,
        }
    }
}
