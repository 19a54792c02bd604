//! Startup, readiness and liveness probes: HTTP GET, TCP and exec, with the
//! probe's timeout, period and thresholds.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Timing of a probe, with the API's defaults.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    pub fn of(p: &Probe) -> Timing {
        let secs = |v: Option<i32>, d: i32| Duration::from_secs(v.unwrap_or(d).max(0) as u64);
        Timing {
            initial_delay: secs(p.initial_delay_seconds, 0),
            period: secs(p.period_seconds, 10).max(Duration::from_secs(1)),
            timeout: secs(p.timeout_seconds, 1).max(Duration::from_secs(1)),
            success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

fn port(c: &Container, p: &IntOrString) -> Option<u16> {
    match p {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|cp| cp.name.as_deref() == Some(name))
            .and_then(|cp| u16::try_from(cp.container_port).ok()),
    }
}

async fn connect(source: IpAddr, to: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind(SocketAddr::new(source, 0))?;
    sock.connect(to).await
}

/// Run one probe; true when it succeeded within its timeout.
pub async fn check(
    p: &Probe,
    c: &Container,
    pod_ip: IpAddr,
    source: IpAddr,
    pid1: Option<i32>,
) -> bool {
    let timeout = Timing::of(p).timeout;
    let fut = async {
        if let Some(h) = &p.http_get {
            let Some(port) = port(c, &h.port) else {
                return false;
            };
            let host: IpAddr = h
                .host
                .as_deref()
                .and_then(|h| h.parse().ok())
                .unwrap_or(pod_ip);
            let Ok(mut s) = connect(source, SocketAddr::new(host, port)).await else {
                return false;
            };
            let path = h.path.clone().unwrap_or_else(|| "/".into());
            let req = format!(
                "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.28\r\nAccept: */*\r\nConnection: close\r\n\r\n"
            );
            if s.write_all(req.as_bytes()).await.is_err() {
                return false;
            }
            let mut buf = [0u8; 64];
            let mut n = 0;
            while n < 12 {
                match s.read(&mut buf[n..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k,
                }
            }
            let head = String::from_utf8_lossy(&buf[..n]);
            let code: u16 = head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            (200..400).contains(&code)
        } else if let Some(t) = &p.tcp_socket {
            let Some(port) = port(c, &t.port) else {
                return false;
            };
            let host: IpAddr = t
                .host
                .as_deref()
                .and_then(|h| h.parse().ok())
                .unwrap_or(pod_ip);
            connect(source, SocketAddr::new(host, port)).await.is_ok()
        } else if let Some(e) = &p.exec {
            let Some(pid) = pid1 else { return false };
            let argv = e.command.clone().unwrap_or_default();
            if argv.is_empty() {
                return false;
            }
            // Inside the container: its mount and PID namespaces.
            tokio::process::Command::new("nsenter")
                .arg(format!("--target={pid}"))
                .args(["--mount", "--pid", "--"])
                .args(&argv)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .status()
                .await
                .map(|s| s.success())
                .unwrap_or(false)
        } else {
            true
        }
    };
    tokio::time::timeout(timeout, fut).await.unwrap_or(false)
}
