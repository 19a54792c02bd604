//! A real Azure Blob Storage server for tests: Azurite (the npm package
//! `azurite`, which `scripts/setup` installs into
//! `~/.cache/cnmysql/tools/azurite`), on a free loopback port with its own
//! data directory and one container, reached as Azure's well-known
//! development account; killed when dropped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::free_port;

/// The development account every Azurite accepts, and its key (public,
/// documented by Microsoft for the emulator).
pub const ACCOUNT: &str = "devstoreaccount1";
pub const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A running `azurite-blob`.
pub struct BlobServer {
    child: Child,
    _dir: tempfile::TempDir,
    /// The account's URL: `http://127.0.0.1:<port>/devstoreaccount1`.
    pub endpoint: String,
    pub container: String,
}

impl BlobServer {
    /// Start one holding the container `container`; returns once it is
    /// made.
    pub async fn start(container: &str) -> anyhow::Result<BlobServer> {
        let program = crate::tools::find_tool(
            "CNMYSQL_AZURITE",
            "azurite-blob",
            "cnmysql/tools/azurite/node_modules/.bin/azurite-blob",
            "Azurite's azurite-blob, which scripts/setup installs from the npm package azurite",
        )?;
        let dir = tempfile::Builder::new()
            .prefix("cnmysql-azurite-")
            .tempdir()?;
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("azurite.log"))?;
        let child = Command::new(program)
            .args(["--blobHost", "127.0.0.1", "--blobPort"])
            .arg(port.to_string())
            .arg("--location")
            .arg(dir.path())
            .args(["--skipApiVersionCheck", "--disableTelemetry"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start azurite-blob")?;
        let mut server = BlobServer {
            child,
            endpoint: format!("http://127.0.0.1:{port}/{ACCOUNT}"),
            container: container.to_string(),
            _dir: dir,
        };
        let began = Instant::now();
        loop {
            if let Some(st) = server.child.try_wait()? {
                let log = std::fs::read_to_string(server._dir.path().join("azurite.log"))
                    .unwrap_or_default();
                bail!("azurite-blob exited ({st}):\n{log}");
            }
            match server.create_container(port).await {
                Ok(()) => return Ok(server),
                Err(e) if began.elapsed() > Duration::from_secs(60) => {
                    return Err(e.context("azurite-blob did not serve within 60 s"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// `PUT <account>/<container>?restype=container`, signed with the
    /// account's shared key.
    async fn create_container(&self, port: u16) -> anyhow::Result<()> {
        let date = jiff::Timestamp::now()
            .strftime("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let version = "2021-08-06";
        let resource = format!("/{ACCOUNT}/{ACCOUNT}/{}\nrestype:container", self.container);
        let to_sign = format!(
            "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n{resource}"
        );
        let b64 = base64::engine::general_purpose::STANDARD;
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &b64.decode(ACCOUNT_KEY)?);
        let signature = b64.encode(ring::hmac::sign(&key, to_sign.as_bytes()).as_ref());
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let req = format!(
            "PUT /{ACCOUNT}/{}?restype=container HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nx-ms-date: {date}\r\nx-ms-version: {version}\r\nAuthorization: SharedKey {ACCOUNT}:{signature}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.container
        );
        s.write_all(req.as_bytes()).await?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await?;
        let head = String::from_utf8_lossy(&answer[..answer.len().min(200)]).to_string();
        if head.starts_with("HTTP/1.1 201") || head.starts_with("HTTP/1.1 409") {
            Ok(())
        } else {
            bail!("creating container {}: {head}", self.container)
        }
    }
}

impl Drop for BlobServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
