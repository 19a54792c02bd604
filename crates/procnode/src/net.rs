//! Addresses, users and network faults.
//!
//! Each node takes a block `198.18.N.0/24` of addresses (from the range
//! set aside for network benchmarks, RFC 2544; an exclusive lock file per
//! block, so nodes of parallel tests never share one): Pod k's address
//! `198.18.N.k` is put on the loopback interface while the Pod lives, and
//! the node's own probes come from `198.18.N.254`. (The API server refuses
//! 127.0.0.0/8 addresses in EndpointSlices, so Pods cannot use those if
//! Services are to route by their EndpointSlices, as kube-proxy does.) A Pod's processes run as a host user of its own
//! (like user namespaces map a container's user to a host range), so the
//! node can cut one Pod's traffic with policy-routing rules: nothing reaches
//! its address, and nothing its user sends leaves it, while its processes
//! keep running. These rules need the `local` table's rule to come after
//! them, so the first cut moves it from priority 0 to 1000 (the same
//! routing, later in the list); cuts are removed when healed and when the
//! node stops.

use std::collections::BTreeSet;
use std::fs::File;
use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{Context as _, bail};

/// This node's block of addresses and users.
pub struct Block {
    n: u8,
    _lock: nix::fcntl::Flock<File>,
    used: std::sync::Mutex<(u32, BTreeSet<u32>)>,
}

const LOCK_DIR: &str = "/tmp/cnmysql-procnode";

impl Block {
    /// Take a free block.
    pub fn acquire() -> anyhow::Result<Block> {
        std::fs::create_dir_all(LOCK_DIR)?;
        for n in 10..=250u8 {
            let f = File::create(format!("{LOCK_DIR}/block-{n}.lock"))?;
            if let Ok(lock) =
                nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
            {
                return Ok(Block {
                    n,
                    _lock: lock,
                    used: Default::default(),
                });
            }
        }
        bail!("no free address block 198.18.10-250.0/24: too many process nodes on this machine")
    }

    /// A free Pod slot (addresses are not reused until the counter wraps).
    pub fn take(&self) -> anyhow::Result<u32> {
        let mut g = self.used.lock().unwrap();
        loop {
            anyhow::ensure!(
                g.1.len() < 253,
                "all 253 Pod addresses of this node are in use"
            );
            g.0 = if g.0 >= 253 { 1 } else { g.0 + 1 };
            let k = g.0;
            if g.1.contains(&k) {
                continue;
            }
            g.1.insert(k);
            add_address(self.pod_ip(k))?;
            return Ok(k);
        }
    }

    pub fn release(&self, k: u32) {
        del_address(self.pod_ip(k));
        self.used.lock().unwrap().1.remove(&k);
    }

    pub fn pod_ip(&self, k: u32) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.n, k as u8)
    }

    /// The source address of the node's probes.
    pub fn probe_source(&self) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.n, 254)
    }

    /// The host user a Pod's processes run as.
    pub fn uid(&self, k: u32) -> u32 {
        3_000_000 + u32::from(self.n) * 256 + k
    }

    /// Remove what an earlier node of this block left behind (addresses,
    /// cut rules), then put up the probe source address.
    pub fn reset(&self) -> anyhow::Result<()> {
        for k in 1..=254u32 {
            let ip = Ipv4Addr::new(198, 18, self.n, k as u8);
            heal(ip, self.uid(k));
        }
        let prefix = format!("198.18.{}.", self.n);
        let text = ip(&["-o", "-4", "addr", "show", "dev", "lo"])?;
        for w in text.split_whitespace() {
            if let Some(a) = w.strip_suffix("/32")
                && a.starts_with(&prefix)
            {
                let _ = ip(&["addr", "del", w, "dev", "lo"]);
            }
        }
        add_address(self.probe_source())
    }

    /// Take down every address of the block.
    pub fn clear(&self) {
        for k in self.used.lock().unwrap().1.iter() {
            del_address(self.pod_ip(*k));
        }
        del_address(self.probe_source());
    }
}

fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn add_address(a: Ipv4Addr) -> anyhow::Result<()> {
    let cidr = format!("{a}/32");
    match ip(&["addr", "add", &cidr, "dev", "lo"]) {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("File exists") => Ok(()),
        Err(e) => Err(e),
    }
}

fn del_address(a: Ipv4Addr) {
    let _ = ip(&["addr", "del", &format!("{a}/32"), "dev", "lo"]);
}

fn move_local_rule() -> anyhow::Result<()> {
    let rules = ip(&["rule", "show"])?;
    if rules
        .lines()
        .any(|l| l.starts_with("1000:") && l.contains("lookup local"))
    {
        return Ok(());
    }
    ip(&["rule", "add", "priority", "1000", "lookup", "local"])?;
    ip(&["rule", "del", "priority", "0", "lookup", "local"])?;
    Ok(())
}

fn rules(pod: Ipv4Addr, uid: u32, probes: Option<Ipv4Addr>) -> Vec<Vec<String>> {
    let (pod, uids) = (pod.to_string(), format!("{uid}-{uid}"));
    let mut out = vec![
        // The Pod reaches itself.
        vec![
            "uidrange", &uids, "to", &pod, "lookup", "local", "priority", "500",
        ],
        vec!["to", &pod, "prohibit", "priority", "502"],
        vec!["uidrange", &uids, "prohibit", "priority", "503"],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(String::from).collect())
    .collect::<Vec<Vec<String>>>();
    if let Some(src) = probes {
        let src = src.to_string();
        out.push(
            [
                "from", &src, "to", &pod, "lookup", "local", "priority", "501",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        );
    }
    out
}

/// Cut a Pod's traffic: nothing reaches `pod` (but the node's probes from
/// `probes`, when given), nothing leaves user `uid`.
pub fn cut(pod: Ipv4Addr, uid: u32, probes: Option<Ipv4Addr>) -> anyhow::Result<()> {
    move_local_rule()?;
    for r in rules(pod, uid, probes) {
        let args: Vec<&str> = std::iter::once("rule")
            .chain(std::iter::once("add"))
            .chain(r.iter().map(String::as_str))
            .collect();
        ip(&args)?;
    }
    Ok(())
}

/// Undo [`cut`] (whichever of its rules exist).
pub fn heal(pod: Ipv4Addr, uid: u32) {
    let text = ip(&["rule", "show"]).unwrap_or_default();
    let (pod_s, uid_s) = (pod.to_string(), format!("{uid}-{uid}"));
    for line in text.lines() {
        let Some((prio, rest)) = line.split_once(':') else {
            continue;
        };
        let prio = prio.trim();
        let words: Vec<&str> = rest.split_whitespace().collect();
        if !matches!(prio, "500" | "501" | "502" | "503")
            || !words.iter().any(|w| *w == pod_s || *w == uid_s)
        {
            continue;
        }
        // Delete by priority and the rule's own selector.
        let mut sel: Vec<&str> = vec!["rule", "del", "priority", prio];
        let mut i = 0;
        while i + 1 < words.len() {
            if matches!(words[i], "from" | "to" | "uidrange") {
                if words[i + 1] != "all" {
                    sel.extend([words[i], words[i + 1]]);
                }
                i += 2;
            } else {
                i += 1;
            }
        }
        let _ = ip(&sel);
    }
}

fn hex_addr(s: &str) -> Option<(Ipv4Addr, u16)> {
    let (a, p) = s.split_once(':')?;
    if a.len() != 8 {
        return None;
    }
    let n = u32::from_str_radix(a, 16).ok()?;
    Some((
        Ipv4Addr::from(n.swap_bytes()),
        u16::from_str_radix(p, 16).ok()?,
    ))
}

/// Close the established TCP connections of these processes (a cut
/// must also stop what is already flowing into them).
pub fn kill_connections(pids: &[i32]) {
    let mut inodes = std::collections::BTreeSet::new();
    for pid in pids {
        for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(l) = std::fs::read_link(e.path())
                && let Some(n) = l
                    .to_str()
                    .and_then(|t| t.strip_prefix("socket:["))
                    .and_then(|t| t.strip_suffix(']'))
            {
                inodes.insert(n.to_string());
            }
        }
    }
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local remote st ... uid timeout inode
        if f.len() < 10 || f[3] == "0A" || !inodes.contains(f[9]) {
            continue;
        }
        let (Some((la, lp)), Some((ra, rp))) = (hex_addr(f[1]), hex_addr(f[2])) else {
            continue;
        };
        let _ = Command::new("ss")
            .args([
                "-K",
                "-t",
                "src",
                &la.to_string(),
                "sport",
                "=",
                &format!(":{lp}"),
            ])
            .args(["dst", &ra.to_string(), "dport", "=", &format!(":{rp}")])
            .output();
    }
}
