//! `cnmysql donor`: run on the host of a MariaDB server outside the
//! operator, it streams a physical copy of that server (`mariadb-backup
//! --backup --stream=mbstream`) over TLS to a Cluster importing it with
//! `spec.bootstrap.import.method: backup`.
//!
//! What it trusts, and what it gives away:
//! - An importer proves itself twice: with the donor's token (a secret the
//!   donor's operator made and put in the import Secret; the server's
//!   accounts cannot leak it), then with the import account (HTTP Basic,
//!   inside TLS), which the server itself checks. Whatever fails, the
//!   answer is the same 401, and nothing about the server or the account
//!   is said to the caller.
//! - The donor signs in to the server on this host as that account only
//!   after checking the server's certificate against `--server-ca`, then
//!   runs `mariadb-backup` as the account with the same CA: the server's
//!   own grants decide what may be copied, and the donor holds no password
//!   of its own. The password goes to `mariadb-backup` in a private option
//!   file that is gone when the copy ends, never on a command line, never
//!   in a log.
//! - It listens where it is told, serves one copy at a time and a few
//!   connections at once, and closes a connection that sends no request.
//!   Its work files live in a private directory it made (or one that is
//!   already its own, private, and no link).

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

/// The header an importer presents the donor's token in.
pub const TOKEN_HEADER: &str = "X-CNMSQL-Donor-Token";

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
    /// A file holding the token an importer must present (the import
    /// Secret's `donor-token`).
    pub token_file: PathBuf,
    /// Where the server listens on this host (the donor signs in over TLS,
    /// which import accounts require).
    pub server: SocketAddr,
    /// The CA that issued the server's certificate: nothing is signed in
    /// to a server that does not present one of its certificates.
    pub server_ca: PathBuf,
    /// The name the server's certificate must carry (none: the CA alone
    /// is checked, as the server is reached at an address of this host).
    pub server_name: Option<String>,
    /// The server's option file, for `mariadb-backup` to read the server's
    /// InnoDB settings from (none: the data directory the server reports).
    pub server_cnf: Option<PathBuf>,
    /// The `mariadb-backup` program.
    pub mariadb_backup: PathBuf,
    /// Where copies are staged (their option files and work directories).
    pub work_dir: PathBuf,
}

/// Connections the donor serves at once.
const MAX_CONNECTIONS: usize = 4;

struct Donor {
    opts: DonorOptions,
    /// The SHA-256 of the token: compared in constant time.
    token: [u8; 32],
    /// One copy at a time: a streaming copy holds the only permit.
    slot: Arc<Semaphore>,
}

/// Serve copies until `shutdown` turns true.
pub async fn run(opts: DonorOptions, shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
    // The donor copies the data files of a server on this host.
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
    let token = read(&opts.token_file, "token file (--token-file)")?;
    let token = token.trim();
    anyhow::ensure!(
        token.len() >= 16,
        "--token-file {}: the token is shorter than 16 characters; make one with `openssl rand -hex 32`",
        opts.token_file.display()
    );
    read(&opts.server_ca, "server's CA (--server-ca)")?;
    private_work_dir(&opts.work_dir)?;
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {} (--listen): {e}", opts.listen))?;
    tracing::info!(listen = %listener.local_addr()?, server = %opts.server, "donor ready");
    let donor = Arc::new(Donor {
        token: sha256(token.as_bytes()),
        opts,
        slot: Arc::new(Semaphore::new(1)),
    });
    let app = Router::new()
        .route(cnmysql_control::contract::BACKUP, get(backup))
        .with_state(donor);
    let (_keep, tls) = watch::channel(tls);
    let limits = crate::serve::Limits {
        max_connections: MAX_CONNECTIONS,
        header_timeout: std::time::Duration::from_secs(10),
        keep_alive: false,
        per_source: usize::MAX,
    };
    crate::serve::serve(listener, tls, app, shutdown, Default::default(), limits).await;
    Ok(())
}

fn sha256(b: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(b).into()
}

/// Whether `given` is the token, in time that does not depend on where
/// they differ.
fn token_matches(token: &[u8; 32], given: &str) -> bool {
    let given = sha256(given.trim().as_bytes());
    token.iter().zip(given).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

/// Make `dir` the donor's private work directory: created 0700 when it is
/// not there; when it is, it must be a directory (not a link) of this
/// user's that nobody else may open. Anything else is refused: another
/// user's directory could have the copies' option files (with the import
/// account's password) read, or swapped.
pub fn private_work_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let bad = |why: String| {
        anyhow::anyhow!(
            "--work-dir {}: {why}; name a directory of your own that only you can open, or one that does not exist yet",
            dir.display()
        )
    };
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| bad(format!("cannot be made: {e}"))),
        Err(e) => Err(bad(e.to_string())),
        Ok(m) if m.file_type().is_symlink() => Err(bad("is a symbolic link".into())),
        Ok(m) if !m.is_dir() => Err(bad("is not a directory".into())),
        Ok(m) if m.uid() != nix::unistd::geteuid().as_raw() => {
            Err(bad(format!("belongs to another user (uid {})", m.uid())))
        }
        Ok(m) if m.permissions().mode() & 0o077 != 0 => Err(bad(format!(
            "others may open it (mode {:o})",
            m.permissions().mode() & 0o777
        ))),
        Ok(_) => Ok(()),
    }
}

/// Answer `status` with `answer`; `why` (which may name the server or
/// the account) goes to the donor's log only.
fn refuse(status: StatusCode, why: String, answer: &'static str) -> Response {
    tracing::warn!(status = status.as_u16(), "{why}");
    let mut r = (status, answer).into_response();
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

/// The one answer to whoever fails to prove themselves.
fn unauthorized(why: String) -> Response {
    refuse(
        StatusCode::UNAUTHORIZED,
        why,
        "not authorized: present the donor's token and an import account the server accepts",
    )
}

async fn backup(State(d): State<Arc<Donor>>, headers: HeaderMap) -> Response {
    let token = headers
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !token_matches(&d.token, token) {
        return unauthorized("a copy was asked for without the donor's token".into());
    }
    let Some((user, password)) = basic_credentials(&headers) else {
        return unauthorized("a copy was asked for without an account (HTTP Basic)".into());
    };
    let Ok(permit) = d.slot.clone().try_acquire_owned() else {
        let why = "a copy is already streaming; ask again when it is done";
        return refuse(StatusCode::CONFLICT, why.into(), why);
    };
    let server = match server_facts(&d.opts, &user, &password).await {
        Ok(f) => f,
        Err(e) if matches!(e.downcast_ref(), Some(mysql_async::Error::Server(_))) => {
            return unauthorized(format!("the server refused the account {user}: {e}"));
        }
        Err(e) => {
            let why = format!(
                "cannot reach the server at {} (--server) over TLS checked against --server-ca: {e}",
                d.opts.server
            );
            return refuse(
                StatusCode::BAD_GATEWAY,
                why,
                "the donor cannot reach its server; its log says why",
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
                .unwrap_or_else(|e| {
                    refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string(), "failed")
                })
        }
        Err(e) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot start mariadb-backup: {e:#}"),
            "the copy could not start; the donor's log says why",
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
    // The server on this host: its certificate checked before the
    // account's password goes to it.
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(o.server.ip().to_string())
        .tcp_port(o.server.port())
        .prefer_socket(false)
        .ssl_opts(Some(server_tls(o)))
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

/// The TLS the donor reaches its server with: the server's certificate
/// must chain to `--server-ca` (no other root), and carry `--server-name`
/// when one is given.
fn server_tls(o: &DonorOptions) -> mysql_async::SslOpts {
    let ssl = mysql_async::SslOpts::default()
        .with_root_certs(vec![o.server_ca.clone().into()])
        .with_disable_built_in_roots(true);
    match &o.server_name {
        Some(name) => ssl.with_danger_tls_hostname_override(Some(name.clone())),
        None => ssl.with_danger_skip_domain_validation(true),
    }
}

/// The `[client]` options of `mariadb-backup`: the importer's account, at
/// the server over TLS, the certificate checked against the server's CA.
fn client_cnf(user: &str, password: &str, server: SocketAddr, ca: &std::path::Path) -> String {
    use crate::config::option_value;
    format!(
        "[client]\nuser = {}\npassword = {}\nhost = {}\nport = {}\nprotocol = TCP\nssl\nssl-ca = {}\n",
        option_value(user),
        option_value(password),
        server.ip(),
        server.port(),
        option_value(&ca.display().to_string())
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
    let client = client_cnf(user, password, o.server, &o.server_ca);
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

    #[test]
    fn the_token_is_compared_whole() {
        let t = sha256(b"0123456789abcdef0123");
        assert!(token_matches(&t, "0123456789abcdef0123"));
        assert!(token_matches(&t, "0123456789abcdef0123\n"));
        assert!(!token_matches(&t, "0123456789abcdef012"));
        assert!(!token_matches(&t, ""));
    }

    #[test]
    fn the_work_directory_is_private_and_the_donors_own() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let fresh = d.path().join("work");
        private_work_dir(&fresh).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        private_work_dir(&fresh).expect("its own private directory again");
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = private_work_dir(&open).unwrap_err().to_string();
        assert!(e.contains("--work-dir") && e.contains("mode 755"), "{e}");
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&fresh, &link).unwrap();
        let e = private_work_dir(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let file = d.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(private_work_dir(&file).is_err());
    }
}
