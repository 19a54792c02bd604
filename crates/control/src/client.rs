//! A small mutual-TLS HTTP/1.1 client for instance managers' control APIs,
//! used by peers (clone, status) and by the control planes (status polls,
//! requests, upgrades, backups).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

#[derive(Clone)]
pub struct ControlClient {
    tls: Arc<ClientConfig>,
    connect_timeout: Duration,
    /// The name the server's certificate must carry, when not the host.
    server_name: Option<String>,
}

impl ControlClient {
    pub fn new(tls: Arc<ClientConfig>) -> ControlClient {
        ControlClient {
            tls,
            connect_timeout: Duration::from_secs(2),
            server_name: None,
        }
    }

    pub fn with_connect_timeout(mut self, t: Duration) -> ControlClient {
        self.connect_timeout = t;
        self
    }

    /// A client whose servers' certificates must name `name` when given
    /// (a peer's Pod reached by IP), else the host they are reached at.
    pub fn with_server_name(&self, name: Option<String>) -> ControlClient {
        ControlClient {
            server_name: name,
            ..self.clone()
        }
    }

    /// A client whose servers' certificates must name `name`.
    pub fn expecting(&self, name: &str) -> ControlClient {
        ControlClient {
            server_name: Some(name.to_string()),
            ..self.clone()
        }
    }

    /// Send one request on a fresh connection and return the response head
    /// with its streaming body.
    pub async fn send(
        &self,
        host: &str,
        port: u16,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Option<Bytes>,
    ) -> anyhow::Result<Response<Incoming>> {
        let body = Full::new(body.unwrap_or_default())
            .map_err(|never| match never {})
            .boxed();
        self.send_body(host, port, method, path, headers, body)
            .await
    }

    /// [`ControlClient::send`] with a streaming request body.
    pub async fn send_body(
        &self,
        host: &str,
        port: u16,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: BoxBody<Bytes, std::io::Error>,
    ) -> anyhow::Result<Response<Incoming>> {
        let tcp = tokio::time::timeout(self.connect_timeout, TcpStream::connect((host, port)))
            .await
            .map_err(|_| anyhow::anyhow!("connecting to {host}:{port} timed out"))??;
        tcp.set_nodelay(true)?;
        let name =
            ServerName::try_from(self.server_name.clone().unwrap_or_else(|| host.to_string()))?;
        let tls = tokio::time::timeout(
            self.connect_timeout,
            TlsConnector::from(self.tls.clone()).connect(name, tcp),
        )
        .await
        .map_err(|_| anyhow::anyhow!("TLS handshake with {host}:{port} timed out"))??;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", format!("{host}:{port}"));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let resp = sender.send_request(req.body(body)?).await?;
        Ok(resp)
    }

    /// GET a JSON document.
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        host: &str,
        port: u16,
        path: &str,
    ) -> anyhow::Result<T> {
        let resp = self.send(host, port, "GET", path, &[], None).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            anyhow::bail!(
                "{path} answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(serde_json::from_slice(&body)?)
    }

    /// POST and return the status and body text.
    pub async fn post(
        &self,
        host: &str,
        port: u16,
        path: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> anyhow::Result<(u16, String)> {
        let resp = self
            .send(host, port, "POST", path, headers, Some(body))
            .await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}
