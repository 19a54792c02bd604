//! The other instances: their addresses (the platform's current view, Pod
//! IPs on Kubernetes, over the static configuration) and their `/status`
//! over the control API, asked with this instance's peer certificate.

use super::*;

pub(super) struct Peers<C: ClusterState> {
    cfg: Arc<InstanceConfig>,
    cluster: Arc<C>,
    certs: Arc<certificates::Certificates>,
}

impl<C: ClusterState> Peers<C> {
    pub fn new(
        cfg: Arc<InstanceConfig>,
        cluster: Arc<C>,
        certs: Arc<certificates::Certificates>,
    ) -> Self {
        Peers {
            cfg,
            cluster,
            certs,
        }
    }

    /// Every instance's address.
    pub fn all(&self) -> BTreeMap<String, PeerAddr> {
        let mut all = self.cfg.peers.clone();
        all.extend(self.cluster.peers());
        all
    }

    /// One instance's address.
    pub fn get(&self, name: &str) -> Option<PeerAddr> {
        self.cluster
            .peers()
            .remove(name)
            .or_else(|| self.cfg.peers.get(name).cloned())
    }

    /// The instance a replication source address names, or the address
    /// itself for a server outside the cluster.
    pub fn source_name(&self, host: &str, port: u16) -> Option<String> {
        self.all()
            .into_iter()
            .find(|(_, p)| p.host == host && p.mysql_port == port)
            .map(|(n, _)| n)
            .or_else(|| Some(format!("{host}:{port}")))
    }

    /// Status of a peer instance over the control API, if it answers
    /// quickly.
    pub async fn status(&self, name: &str) -> Option<InstanceStatus> {
        self.status_within(name, Duration::from_millis(1500)).await
    }

    /// Status of a peer instance, if it answers within `patience`.
    pub async fn status_within(&self, name: &str, patience: Duration) -> Option<InstanceStatus> {
        let peer = self.get(name)?;
        tokio::time::timeout(
            patience,
            self.certs
                .peers()
                .with_server_name(peer.tls_name.clone())
                .get_json::<InstanceStatus>(&peer.host, peer.control_port, "/status"),
        )
        .await
        .ok()?
        .ok()
    }
}
