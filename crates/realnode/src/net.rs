//! The node's network: its own network namespace joined to the host by one
//! veth pair, so that everything the kubelet, the CNI plugins and kube-proxy
//! change (bridges, routes, nftables rules, `ip_forward`) stays in there.
//!
//! ```text
//! host  cnrN-h 10.243.N.1/30 ── veth ── node netns  cnrN-n 10.243.N.2/30
//!                                         bridge cnrN 10.244.N.1/24 ── Pods 10.244.N.x
//! host routes: 10.244.N.0/24 (Pods) and 10.96.N.0/24 (ClusterIPs) via 10.243.N.2
//! ```
//!
//! With several nodes, the host forwards between their veths (and only
//! those), so that Pods of one node reach the Pods of another.
//!
//! N is a slot taken under a lock, so that several nodes (parallel tests)
//! never share an address; the host keeps nothing but the veth and the two
//! routes, which go with the veth.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::bail;

use crate::cmd::run;

/// Where slot locks live.
const LOCKS: &str = "/run/cnmysql-realnode";

/// One node's addresses and names.
pub struct Net {
    pub slot: u8,
    /// The host's end of the veth: the API server listens here.
    pub host_ip: Ipv4Addr,
    /// The node's end: the kubelet's and kube-proxy's address.
    pub node_ip: Ipv4Addr,
    pub pod_cidr: String,
    pub pod_gateway: Ipv4Addr,
    pub service_cidr: String,
    pub bridge: String,
    pub netns: String,
    host_veth: String,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl Net {
    /// Take a free slot and make the namespace, the veth and the routes;
    /// `dir` (the node's directory) is written into the slot's lock, so
    /// that what a run killed before it could clean up is found and
    /// removed by the next one to take the slot ([`crate::leftovers`]).
    pub fn create(dir: &Path) -> anyhow::Result<Net> {
        use std::io::{Read as _, Seek as _, Write as _};
        std::fs::create_dir_all(LOCKS)?;
        for slot in 1..=250u8 {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(Path::new(LOCKS).join(format!("slot-{slot}.lock")))?;
            let Ok(mut lock) =
                nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            else {
                continue;
            };
            let mut previous = String::new();
            lock.read_to_string(&mut previous)?;
            crate::leftovers::remove(slot, previous.trim());
            lock.set_len(0)?;
            lock.rewind()?;
            write!(&mut *lock, "{}", dir.display())?;
            let net = Net {
                slot,
                host_ip: Ipv4Addr::new(10, 243, slot, 1),
                node_ip: Ipv4Addr::new(10, 243, slot, 2),
                pod_cidr: format!("10.244.{slot}.0/24"),
                pod_gateway: Ipv4Addr::new(10, 244, slot, 1),
                service_cidr: format!("10.96.{slot}.0/24"),
                bridge: format!("cnr{slot}"),
                netns: format!("cnmysql-rn-{slot}"),
                host_veth: format!("cnr{slot}-h"),
                _lock: lock,
            };
            net.set_up().inspect_err(|_| net.tear_down())?;
            return Ok(net);
        }
        bail!("no free node slot (1-250) under {LOCKS}")
    }

    pub fn netns_path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.netns)
    }

    /// A command that runs `program` inside the node's network namespace
    /// (only the network: `ip netns exec` would also remount /sys and hide
    /// the cgroup hierarchies from the kubelet).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.netns_path().display()))
            .arg("--")
            .arg(program);
        c
    }

    /// Run `program args` in the namespace, failing with what it printed.
    pub fn run_in(&self, program: &str, args: &[&str]) -> anyhow::Result<String> {
        let ns = format!("--net={}", self.netns_path().display());
        let mut all = vec![ns.as_str(), "--", program];
        all.extend_from_slice(args);
        run("nsenter", &all)
    }

    fn set_up(&self) -> anyhow::Result<()> {
        let node_veth = format!("cnr{}-n", self.slot);
        run("ip", &["netns", "add", &self.netns])?;
        run(
            "ip",
            &[
                "link",
                "add",
                &self.host_veth,
                "type",
                "veth",
                "peer",
                "name",
                &node_veth,
            ],
        )?;
        run("ip", &["link", "set", &node_veth, "netns", &self.netns])?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/30", self.host_ip),
                "dev",
                &self.host_veth,
            ],
        )?;
        run("ip", &["link", "set", &self.host_veth, "up"])?;
        self.run_in("ip", &["link", "set", "lo", "up"])?;
        self.run_in(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/30", self.node_ip),
                "dev",
                &node_veth,
            ],
        )?;
        self.run_in("ip", &["link", "set", &node_veth, "up"])?;
        self.run_in(
            "ip",
            &["route", "add", "default", "via", &self.host_ip.to_string()],
        )?;
        // Per namespace: the node routes between its Pods and the host.
        self.run_in("sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
        // Traffic between two Pods of the bridge through a ClusterIP must
        // pass the DNAT rules (needs the br_netfilter module).
        let _ = run("modprobe", &["br_netfilter"]);
        let _ = self.run_in("sysctl", &["-qw", "net.bridge.bridge-nf-call-iptables=1"]);
        let via = self.node_ip.to_string();
        run(
            "ip",
            &[
                "route",
                "add",
                &self.pod_cidr,
                "via",
                &via,
                "dev",
                &self.host_veth,
            ],
        )?;
        run(
            "ip",
            &[
                "route",
                "add",
                &self.service_cidr,
                "via",
                &via,
                "dev",
                &self.host_veth,
            ],
        )?;
        Ok(())
    }

    /// Let the host forward what arrives from this node (to the Pods of
    /// another node): per interface, so the host forwards nothing else and
    /// the setting goes with the veth.
    pub fn route_between_nodes(&self) -> anyhow::Result<()> {
        run(
            "sysctl",
            &[
                "-qw",
                &format!("net.ipv4.conf.{}.forwarding=1", self.host_veth),
            ],
        )?;
        Ok(())
    }

    /// Cut the node off the host (its link down) or join it again: the
    /// way a node loses its network.
    pub fn set_link(&self, up: bool) -> anyhow::Result<()> {
        run(
            "ip",
            &[
                "link",
                "set",
                &self.host_veth,
                if up { "up" } else { "down" },
            ],
        )?;
        if up {
            // The routes went with the link.
            let via = self.node_ip.to_string();
            for cidr in [&self.pod_cidr, &self.service_cidr] {
                let _ = run(
                    "ip",
                    &[
                        "route",
                        "replace",
                        cidr,
                        "via",
                        &via,
                        "dev",
                        &self.host_veth,
                    ],
                );
            }
        }
        Ok(())
    }

    /// Remove the veth (the routes go with it) and the namespace.
    pub fn tear_down(&self) {
        let _ = run("ip", &["link", "del", &self.host_veth]);
        let _ = run("ip", &["netns", "del", &self.netns]);
    }
}
