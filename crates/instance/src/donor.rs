//! `cnmysql donor`: run on the host of a MariaDB server outside the
//! operator, it streams a physical copy of that server (`mariadb-backup
//! --backup --stream=mbstream`) over TLS to a Cluster importing it with
//! `spec.bootstrap.import.method: backup`.
//!
//! The importer signs in with the import account (HTTP Basic, inside TLS).
//! The donor first signs in to the server with it (over TLS on the
//! loopback: import accounts require it), then runs `mariadb-backup` as
//! that account: the server's own
//! grants decide what may be copied (RELOAD, PROCESS, LOCK TABLES, BINLOG
//! MONITOR), and the donor holds no password of its own. The password goes
//! to `mariadb-backup` in a private option file, never on a command line,
//! and is never logged. One copy at a time.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use mysql_async::prelude::*;
use tokio::sync::{Semaphore, watch};

use crate::clone::{HISTORY_HEADER, SIZE_HEADER, backup_args, dir_size, stream_backup};

/// What `cnmysql donor` is told.
#[derive(Clone, Debug)]
pub struct DonorOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The donor's TLS certificate and key (PEM): the importer checks them
    /// against the `ca.crt` of its import Secret, as it checks the server's
    /// (MariaDB's own server certificate does).
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    /// Where the server listens on this host (the donor signs in over TLS,
    /// which import accounts require).
    pub server: SocketAddr,
    /// The server's option file, for `mariadb-backup` to read the server's
    /// InnoDB settings from (none: the data directory the server reports).
    pub server_cnf: Option<PathBuf>,
    /// The `mariadb-backup` program.
    pub mariadb_backup: PathBuf,
    /// Where copies are staged (their option files and work directories).
    pub work_dir: PathBuf,
}

struct Donor {
    opts: DonorOptions,
    /// One copy at a time: a streaming copy holds the only permit.
    slot: Arc<Semaphore>,
}

/// Serve copies until `shutdown` turns true.
pub async fn run(opts: DonorOptions, shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
    // The server's certificate is not checked on the way there: only an
    // address of this host keeps the importer's password from going to
    // another one.
    if std::net::UdpSocket::bind((opts.server.ip(), 0)).is_err() {
        anyhow::bail!(
            "--server {}: not an address of this host; give the server's address here (127.0.0.1:PORT, or the one it listens on): the donor copies the data files of a server on this host",
            opts.server
        );
    }
    let read = |p: &PathBuf, what: &str| {
        std::fs::read_to_string(p)
            .map_err(|e| anyhow::anyhow!("cannot read the {what} {}: {e}", p.display()))
    };
    let identity = cnmysql_tls::Identity {
        cert_pem: read(&opts.tls_cert, "TLS certificate (--tls-cert)")?,
        key_pem: read(&opts.tls_key, "TLS key (--tls-key)")?,
    };
    let tls = cnmysql_tls::server_config_without_client_auth(&identity)
        .map_err(|e| anyhow::anyhow!("--tls-cert/--tls-key: {e}"))?;
    std::fs::create_dir_all(&opts.work_dir).map_err(|e| {
        anyhow::anyhow!(
            "cannot make the work directory {}: {e}",
            opts.work_dir.display()
        )
    })?;
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {} (--listen): {e}", opts.listen))?;
    tracing::info!(listen = %listener.local_addr()?, server = %opts.server, "donor ready");
    let donor = Arc::new(Donor {
        opts,
        slot: Arc::new(Semaphore::new(1)),
    });
    let app = Router::new()
        .route(cnmysql_control::contract::BACKUP, get(backup))
        .with_state(donor);
    let (_keep, tls) = watch::channel(tls);
    crate::api::serve(listener, tls, app, shutdown, Default::default()).await;
    Ok(())
}

fn refuse(status: StatusCode, why: String) -> Response {
    tracing::warn!(status = status.as_u16(), "{why}");
    let mut r = (status, why).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Basic realm=\"cnmysql donor\""),
        );
    }
    r
}

/// The account an importer signs in with.
pub fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// The `Authorization` header for `user` and `password`.
pub fn basic_authorization(user: &str, password: &str) -> String {
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

async fn backup(State(d): State<Arc<Donor>>, headers: HeaderMap) -> Response {
    let Some((user, password)) = basic_credentials(&headers) else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "a copy was asked for without an account (HTTP Basic)".into(),
        );
    };
    let Ok(permit) = d.slot.clone().try_acquire_owned() else {
        return refuse(
            StatusCode::CONFLICT,
            "a copy is already streaming; ask again when it is done".into(),
        );
    };
    let server = match server_facts(&d.opts, &user, &password).await {
        Ok(f) => f,
        Err(e) if matches!(e.downcast_ref(), Some(mysql_async::Error::Server(_))) => {
            return refuse(
                StatusCode::UNAUTHORIZED,
                format!("the server refused the account {user}: {e}"),
            );
        }
        Err(e) => {
            return refuse(
                StatusCode::BAD_GATEWAY,
                format!(
                    "cannot reach the server at {} (--server): {e}",
                    d.opts.server
                ),
            );
        }
    };
    match start(&d.opts, &user, &password, &server, permit) {
        Ok(body) => {
            tracing::info!(user, bytes = server.size, "streaming a copy");
            Response::builder()
                .header(SIZE_HEADER, server.size.to_string())
                .header(HISTORY_HEADER, server.history.replace('\n', ""))
                .body(body)
                .unwrap_or_else(|e| refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
        }
        Err(e) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot start mariadb-backup: {e:#}"),
        ),
    }
}

/// What the donor learns from the server, signed in as the importer.
struct ServerFacts {
    data_dir: PathBuf,
    history: String,
    size: u64,
}

async fn server_facts(o: &DonorOptions, user: &str, password: &str) -> anyhow::Result<ServerFacts> {
    // The server on this host, over the loopback: TLS because the account
    // requires it, not to authenticate the server.
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(o.server.ip().to_string())
        .tcp_port(o.server.port())
        .prefer_socket(false)
        .ssl_opts(Some(
            mysql_async::SslOpts::default().with_danger_accept_invalid_certs(true),
        ))
        .user(Some(user))
        .pass(Some(password));
    let mut c = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        mysql_async::Conn::new(opts),
    )
    .await
    .map_err(|_| anyhow::anyhow!("no answer at {} within 10 s", o.server))??;
    let (data_dir, history): (String, String) = c
        .query_first("SELECT @@datadir, @@gtid_binlog_state")
        .await?
        .unwrap_or_default();
    c.disconnect().await.ok();
    let data_dir = PathBuf::from(data_dir);
    let size = dir_size(&data_dir);
    Ok(ServerFacts {
        data_dir,
        history,
        size,
    })
}

/// The `[client]` options of `mariadb-backup`: the importer's account, at
/// the server over TLS (the loopback; the certificate is not checked).
fn client_cnf(user: &str, password: &str, server: SocketAddr) -> String {
    use crate::config::option_value;
    format!(
        "[client]\nuser = {}\npassword = {}\nhost = {}\nport = {}\nprotocol = TCP\nssl\n",
        option_value(user),
        option_value(password),
        server.ip(),
        server.port()
    )
}

/// Start `mariadb-backup` as the importer's account: the body streaming
/// its output. The option file and work directory go when it ends.
fn start(
    o: &DonorOptions,
    user: &str,
    password: &str,
    server: &ServerFacts,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> anyhow::Result<Body> {
    let stage = tempfile::Builder::new()
        .prefix("copy-")
        .tempdir_in(&o.work_dir)?;
    let cnf = stage.path().join("backup.cnf");
    let include = o
        .server_cnf
        .as_ref()
        .map(|p| format!("!include {}\n", p.display()))
        .unwrap_or_default();
    let client = client_cnf(user, password, o.server);
    cnmysql_tls::write_private(&cnf, &format!("{include}{client}"), true)?;
    let target = stage.path().join("target");
    std::fs::create_dir_all(&target)?;
    let mut cmd = tokio::process::Command::new(&o.mariadb_backup);
    backup_args(&mut cmd, &cnf, &target).arg(format!("--datadir={}", server.data_dir.display()));
    let child = cmd
        .spawn()
        .map_err(|e| anyhow::anyhow!("{}: {e}", o.mariadb_backup.display()))?;
    // The permit and the stage live as long as the stream.
    Ok(Body::from_stream(stream_backup(
        child,
        target,
        (permit, stage),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_round_trip_and_a_missing_header_is_none() {
        let mut h = HeaderMap::new();
        assert_eq!(basic_credentials(&h), None);
        h.insert(
            header::AUTHORIZATION,
            basic_authorization("importer", "p:w").parse().unwrap(),
        );
        assert_eq!(
            basic_credentials(&h),
            Some(("importer".into(), "p:w".into()))
        );
        h.insert(header::AUTHORIZATION, "Bearer x".parse().unwrap());
        assert_eq!(basic_credentials(&h), None);
    }
}
