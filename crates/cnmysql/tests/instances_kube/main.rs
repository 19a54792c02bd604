//! Instance managers on Kubernetes: real mariadbd, a real kube-apiserver,
//! the operator's objects. The test plays the kubelet for the operator's
//! Pods — it gives each a loopback Pod IP, writes its Secrets where the Pod
//! mounts them, and starts `cnmysql instance run --kubernetes` with the Pod's
//! environment and a token of the cluster's ServiceAccount — so what runs
//! is what a Pod runs. The first instance initialises and claims the
//! primary (status and Lease, through its own RBAC), the second clones it
//! and replicates over TLS to its Pod IP, the operator labels the primary
//! for the rw Service, and a clean stop gives the Lease back.
//!
//! Ignored unless run by `scripts/test-kube` with `KUBEBUILDER_ASSETS` set.

#[path = "../common/mod.rs"]
mod common;
mod failover;
mod kubelet;
mod through_the_api_server;
