//! Ports for the servers the tests start.

use std::net::TcpListener;

/// A TCP port free on every address now, never handed out before by
/// this process, and below the kernel's ephemeral range: a port the
/// kernel picks for `bind(0)` is one it also gives outgoing connections,
/// and a test running beside this one took such a port (etcd's) between
/// its check and its use. Below the range only another `bind` can take
/// it, and tests pick at random among some twenty thousand.
pub fn free_port() -> u16 {
    use rand::Rng;
    use std::collections::BTreeSet;
    static GIVEN: std::sync::Mutex<BTreeSet<u16>> = std::sync::Mutex::new(BTreeSet::new());
    let top = ephemeral_low().clamp(10_001, 65_535);
    let mut rng = rand::rng();
    let mut given = GIVEN.lock().unwrap();
    for _ in 0..10_000 {
        let p = rng.random_range(10_000..top);
        if !given.contains(&p) && TcpListener::bind(("0.0.0.0", p)).is_ok() {
            given.insert(p);
            return p;
        }
    }
    panic!("no free TCP port between 10000 and {top}");
}

/// The lowest port the kernel gives outgoing connections
/// (`net.ipv4.ip_local_port_range`), 32768 if it cannot be read.
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    #[test]
    fn free_ports_are_below_the_ephemeral_range_and_never_handed_out_twice() {
        let low = super::ephemeral_low();
        let ports: Vec<u16> = (0..200).map(|_| super::free_port()).collect();
        assert!(
            ports.iter().all(|p| (10_000..low.max(10_001)).contains(p)),
            "{ports:?}"
        );
        let mut unique = ports.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
    }
}
