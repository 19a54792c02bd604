//! The control API: HTTPS with mutual TLS against the cluster CA. A client
//! without a certificate, or with one from another CA, fails the handshake.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use cnmysql_api::names::OPERATOR_IDENTITY;
use cnmysql_control::contract::{self, FromFile, SemiSync};
use cnmysql_core::status::InstanceStatus;

/// Who the caller is: the identities (URI names) of the client certificate
/// it presented, which the TLS handshake verified against the cluster's CA.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    pub identities: Vec<String>,
}

impl Peer {
    /// The identities of the certificates a TLS client presented (none: a
    /// caller nothing accepts).
    pub fn of(certs: Option<&[rustls_pki_types::CertificateDer<'static>]>) -> Peer {
        Peer {
            identities: certs
                .and_then(|c| c.first())
                .map(cnmysql_tls::uris_of)
                .unwrap_or_default(),
        }
    }

    /// Whether the caller is `who` (the operator, or an instance) of this
    /// instance's cluster and namespace.
    pub fn is(&self, cfg: &crate::config::InstanceConfig, who: &str) -> bool {
        let id = cnmysql_api::names::identity(&cfg.namespace, &cfg.cluster, who);
        self.identities.contains(&id)
    }
}

/// What the API needs from the manager.
pub trait Backend: Send + Sync + 'static {
    fn status(&self) -> impl Future<Output = InstanceStatus> + Send;
    fn config(&self) -> &crate::config::InstanceConfig;
    fn apply_semi_sync(
        &self,
        s: &cnmysql_core::semisync::Settings,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// Make the primary hold the declared databases, users and grants.
    fn reconcile_sql_objects(
        &self,
        objects: Vec<cnmysql_control::contract::SqlObject>,
    ) -> impl Future<Output = anyhow::Result<Vec<cnmysql_control::contract::SqlObjectResult>>> + Send;
    /// Bring the system tables to the running server's version (MariaDB:
    /// `mariadb-upgrade`); says what it did.
    fn upgrade_system_tables(&self) -> impl Future<Output = anyhow::Result<String>> + Send;
    /// The cluster status as the platform last holds it.
    fn cluster_status(
        &self,
    ) -> impl Future<Output = anyhow::Result<cnmysql_api::ClusterStatus>> + Send;
    /// The manager's own binary, replaced by an upgrade.
    fn executable_path(&self) -> &std::path::Path;
    /// Whether a re-exec may happen now (not while cloning or starting).
    fn may_reexec(&self) -> Result<(), String>;
    /// Re-exec `exe` shortly (after the answer went out); `upgraded`: a new
    /// binary was installed, put the previous one back if the exec fails.
    /// `answered` fires once the HTTP answer has been written out.
    fn reexec(
        self: Arc<Self>,
        exe: std::path::PathBuf,
        upgraded: bool,
        answered: tokio::sync::oneshot::Receiver<()>,
    );
}

pub fn router<B: Backend>(backend: Arc<B>) -> Router {
    Router::new()
        .route(contract::STATUS, get(status::<B>))
        .route("/healthz", get(healthz::<B>))
        .route("/readyz", get(ready::<B>))
        .route(contract::BACKUP, get(backup::<B>))
        .route(contract::SEMISYNC, axum::routing::post(semi_sync::<B>))
        .route(
            contract::UPGRADE,
            axum::routing::post(upgrade::<B>).layer(axum::extract::DefaultBodyLimit::max(
                crate::upgrade::MAX_EXECUTABLE_BYTES as usize,
            )),
        )
        .route(
            contract::UPGRADE_FROM_FILE,
            axum::routing::post(upgrade_from_file::<B>),
        )
        .route(
            contract::UPGRADE_SYSTEM_TABLES,
            axum::routing::post(upgrade_system_tables::<B>),
        )
        .route(contract::SQL_OBJECTS, axum::routing::post(sql_objects::<B>))
        .route(
            contract::RESTART_IN_PLACE,
            axum::routing::post(restart_inplace::<B>),
        )
        .with_state(backend)
}

/// 403 unless the caller presented this cluster's operator certificate.
fn operator_only<B: Backend>(b: &B, peer: &Peer, what: &str) -> Option<Response> {
    (!peer.is(b.config(), OPERATOR_IDENTITY)).then(|| {
        tracing::warn!(identities = ?peer.identities, "refused: only the operator may {what}");
        (
            StatusCode::FORBIDDEN,
            format!("only the operator may {what}"),
        )
            .into_response()
    })
}

/// `POST /instance/mysql/upgrade`: the system tables are brought to the
/// running server's version (after a server version change).
async fn upgrade_system_tables<B: Backend>(
    State(b): State<Arc<B>>,
    Extension(peer): Extension<Peer>,
) -> Response {
    if let Some(refused) = operator_only(b.as_ref(), &peer, "upgrade the system tables") {
        return refused;
    }
    match b.upgrade_system_tables().await {
        Ok(done) => (StatusCode::OK, done).into_response(),
        Err(e) => (StatusCode::CONFLICT, format!("{e:#}")).into_response(),
    }
}

/// `POST /instance/manager/upgrade`: the operator streams its executable;
/// it is checked against the hash header and put over the manager's binary,
/// then the manager re-execs (mysqld keeps running).
async fn upgrade<B: Backend>(
    State(b): State<Arc<B>>,
    Extension(peer): Extension<Peer>,
    req: axum::extract::Request,
) -> Response {
    if let Some(refused) = operator_only(b.as_ref(), &peer, "upgrade the instance manager") {
        return refused;
    }
    tracing::info!("instance manager upgrade requested");
    if let Err(why) = b.may_reexec() {
        return (StatusCode::CONFLICT, why).into_response();
    }
    let Some(hash) = req
        .headers()
        .get(cnmysql_api::names::MANAGER_HASH_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
    else {
        return (
            StatusCode::BAD_REQUEST,
            format!(
                "the {} header is missing",
                cnmysql_api::names::MANAGER_HASH_HEADER
            ),
        )
            .into_response();
    };
    let exe = b.executable_path().to_path_buf();
    let body = req.into_body().into_data_stream();
    match crate::upgrade::install(&exe, &hash, body).await {
        Ok(()) => {
            let (answer, answered) = answer_then(format!("installed {hash}; re-executing"));
            b.clone().reexec(exe, true, answered);
            answer
        }
        Err(crate::upgrade::InstallError::Refused(why)) => {
            tracing::warn!(reason = why, "instance manager upgrade refused");
            (StatusCode::BAD_REQUEST, why).into_response()
        }
        Err(crate::upgrade::InstallError::Failed(why)) => {
            tracing::error!(reason = why, "instance manager upgrade failed");
            (StatusCode::INTERNAL_SERVER_ERROR, why).into_response()
        }
    }
}

/// `POST /instance/manager/upgrade-from-file`: an executable already on
/// this instance's filesystem is checked (regular, executable, its
/// SHA-256 when given) and put over the manager's binary, then the manager
/// re-execs (mysqld keeps running). Answers the file's SHA-256; a file
/// that is what the manager already runs changes nothing.
async fn upgrade_from_file<B: Backend>(
    State(b): State<Arc<B>>,
    Extension(peer): Extension<Peer>,
    Json(req): Json<FromFile>,
) -> Response {
    if let Some(refused) = operator_only(b.as_ref(), &peer, "upgrade the instance manager") {
        return refused;
    }
    tracing::info!(
        path = req.path,
        "instance manager upgrade from a file requested"
    );
    if let Err(why) = b.may_reexec() {
        return (StatusCode::CONFLICT, why).into_response();
    }
    let refused = |e: crate::upgrade::InstallError| match e {
        crate::upgrade::InstallError::Refused(why) => {
            tracing::warn!(reason = why, "instance manager upgrade refused");
            (StatusCode::BAD_REQUEST, why).into_response()
        }
        crate::upgrade::InstallError::Failed(why) => {
            tracing::error!(reason = why, "instance manager upgrade failed");
            (StatusCode::INTERNAL_SERVER_ERROR, why).into_response()
        }
    };
    let hash = match crate::upgrade::check_file(&req.path, req.sha256.as_deref()).await {
        Ok(h) => h,
        Err(e) => return refused(e),
    };
    if b.status().await.executable_hash == hash {
        return (StatusCode::OK, hash).into_response();
    }
    let stream = match crate::upgrade::file_stream(&req.path).await {
        Ok(s) => s,
        Err(e) => {
            return refused(crate::upgrade::InstallError::Refused(format!(
                "{}: cannot be read ({e})",
                req.path
            )));
        }
    };
    let exe = b.executable_path().to_path_buf();
    // Hashed again as it is copied: a file changed since the check is refused.
    match crate::upgrade::install(&exe, &hash, stream).await {
        Ok(()) => {
            let (answer, answered) = answer_then(hash);
            b.clone().reexec(exe, true, answered);
            answer
        }
        Err(e) => refused(e),
    }
}

/// `POST /instance/manager/restart-inplace`: re-exec the running binary
/// (byte for byte the same) without stopping mysqld.
async fn restart_inplace<B: Backend>(
    State(b): State<Arc<B>>,
    Extension(peer): Extension<Peer>,
) -> Response {
    if let Some(refused) = operator_only(b.as_ref(), &peer, "restart the instance manager") {
        return refused;
    }
    tracing::info!("instance manager restart in place requested");
    if let Err(why) = b.may_reexec() {
        return (StatusCode::CONFLICT, why).into_response();
    }
    let (answer, answered) = answer_then("re-executing in place".into());
    b.clone().reexec("/proc/self/exe".into(), false, answered);
    answer
}

/// A 200 answer, and a signal that fires once its body has been written
/// out (the server asked the body for more after its only chunk): the
/// re-exec that follows closes the connection, so it waits for this
/// instead of guessing a delay.
fn answer_then(text: String) -> (Response, tokio::sync::oneshot::Receiver<()>) {
    use futures::StreamExt;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let chunk =
        futures::stream::iter([Ok::<_, std::convert::Infallible>(bytes::Bytes::from(text))]);
    let done = futures::stream::once(async move {
        let _ = tx.send(());
    })
    .filter_map(|()| async { None::<Result<bytes::Bytes, std::convert::Infallible>> });
    let body = axum::body::Body::from_stream(chunk.chain(done));
    (
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/plain; charset=utf-8")
            .body(body)
            .expect("a static response is valid"),
        rx,
    )
}

/// The kubelet's probes and hooks on a plain-HTTP port: health,
/// readiness, and the preStop hook; nothing that reveals or changes data.
pub fn probe_router<B: Backend>(backend: Arc<B>) -> Router {
    Router::new()
        .route("/healthz", get(healthz::<B>))
        .route("/readyz", get(ready::<B>))
        .route("/prestop", get(prestop::<B>))
        .with_state(backend)
}

/// The preStop hook of a Pod being deleted: a primary holds its shutdown
/// until the control plane has handed its role over (or gives up waiting,
/// see `cnmysql_core::handover::prestop`); anything else goes at once.
async fn prestop<B: Backend>(State(b): State<Arc<B>>) -> Response {
    use cnmysql_core::handover::{PreStop, prestop};
    let me = b.config().instance.clone();
    // A replica has nothing to hand over: it goes at once, without asking
    // the cluster state (which an isolated instance cannot reach: the
    // kubelet runs this hook before a liveness restart too).
    if b.status().await.role != cnmysql_core::status::Role::Primary {
        return (StatusCode::OK, "ok").into_response();
    }
    let started = std::time::Instant::now();
    loop {
        let waited = started.elapsed().as_millis() as i64;
        let read = tokio::time::timeout(std::time::Duration::from_secs(2), b.cluster_status());
        let decision = match read.await {
            Ok(Ok(st)) => prestop(&me, &st, waited),
            _ if waited < cnmysql_core::handover::START_WAIT_MS => PreStop::Wait,
            _ => PreStop::Go("the cluster status cannot be read"),
        };
        match decision {
            PreStop::Wait => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            PreStop::GoAfter(settle_ms) => {
                // Answer (read-only) while the routes move away.
                tokio::time::sleep(std::time::Duration::from_millis(settle_ms)).await;
                let why = "handed over: another instance is primary";
                tracing::info!(waited_ms = waited, reason = why, "preStop: shutting down");
                return (StatusCode::OK, "ok").into_response();
            }
            PreStop::Go(why) => {
                tracing::info!(waited_ms = waited, reason = why, "preStop: shutting down");
                return (StatusCode::OK, "ok").into_response();
            }
        }
    }
}

async fn status<B: Backend>(State(b): State<Arc<B>>) -> Json<InstanceStatus> {
    Json(b.status().await)
}

/// Liveness: fails only when the instance is isolated (cluster state
/// unreachable for 30 s and no peer reachable).
async fn healthz<B: Backend>(State(b): State<Arc<B>>) -> Response {
    if b.status().await.isolated {
        // Why is in the manager's log; the probe port tells strangers nothing.
        (StatusCode::SERVICE_UNAVAILABLE, "unhealthy").into_response()
    } else {
        (StatusCode::OK, "ok").into_response()
    }
}

/// Whether this manager has answered ready since it started.
static EVER_READY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The longest `/readyz?waitMillis=` may hold an answer.
const READY_WAIT_MAX_MS: u64 = 4_000;

/// `waitMillis=N` of a query string, at most [`READY_WAIT_MAX_MS`].
fn wait_millis(query: Option<&str>) -> u64 {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("waitMillis=")?.parse().ok())
        .unwrap_or(0u64)
        .min(READY_WAIT_MAX_MS)
}

/// Readiness. `?waitMillis=N` (the Pod's readiness probe): until this
/// manager has been ready once, an answer that would say "not ready" waits
/// up to N ms for the instance to become ready. A restarted instance is
/// then routed again as soon as it is ready, not at the kubelet's next
/// probe a second later; once it has been ready, every answer is at once,
/// so that going out of service is never delayed.
async fn ready<B: Backend>(State(b): State<Arc<B>>, uri: axum::http::Uri) -> Response {
    use std::sync::atomic::Ordering;
    let wait = if EVER_READY.load(Ordering::Relaxed) {
        0
    } else {
        wait_millis(uri.query())
    };
    let until = tokio::time::Instant::now() + Duration::from_millis(wait);
    let mut s = b.status().await;
    while !s.ready && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(25)).await;
        s = b.status().await;
    }
    if s.ready {
        EVER_READY.store(true, Ordering::Relaxed);
        (StatusCode::OK, "ready").into_response()
    } else {
        // The phase and its message are in `/status` (mutual TLS only).
        (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
    }
}

/// The operator's steady-state semi-sync adjustment of the primary.
async fn semi_sync<B: Backend>(
    State(b): State<Arc<B>>,
    Extension(peer): Extension<Peer>,
    Json(req): Json<SemiSync>,
) -> Response {
    if let Some(refused) = operator_only(b.as_ref(), &peer, "change semi-sync settings") {
        return refused;
    }
    let s = cnmysql_core::semisync::Settings {
        enabled: req.enabled,
        wait_for_count: req.wait_for_count,
        timeout_millis: req.timeout_millis,
    };
    match b.apply_semi_sync(&s).await {
        Ok(()) => {
            tracing::info!(
                enabled = s.enabled,
                wait_for_count = s.wait_for_count,
                timeout_millis = s.timeout_millis,
                "semi-sync adjusted"
            );
            (StatusCode::OK, "applied").into_response()
        }
        Err(e) => (StatusCode::CONFLICT, e.to_string()).into_response(),
    }
}

/// `POST /instance/sql-objects`: the primary is made to hold the declared
/// databases, users and grants; the body says what was done for each.
async fn sql_objects<B: Backend>(
    State(b): State<Arc<B>>,
    Extension(peer): Extension<Peer>,
    Json(objects): Json<Vec<cnmysql_control::contract::SqlObject>>,
) -> Response {
    if let Some(refused) = operator_only(b.as_ref(), &peer, "declare databases, users and grants") {
        return refused;
    }
    match b.reconcile_sql_objects(objects).await {
        Ok(done) => Json(done).into_response(),
        Err(e) => (StatusCode::CONFLICT, format!("{e:#}")).into_response(),
    }
}

/// Only the operator and instances of the same cluster (and namespace)
/// may copy the data.
fn may_clone(cfg: &crate::config::InstanceConfig, peer: &Peer) -> bool {
    peer.is(cfg, OPERATOR_IDENTITY) || peer.identities.iter().any(|id| instance_of(cfg, id))
}

/// Whether `id` names an instance of this cluster (any ordinal: a new
/// replica is not among the peers this manager started with).
fn instance_of(cfg: &crate::config::InstanceConfig, id: &str) -> bool {
    let prefix = cnmysql_api::names::identity(&cfg.namespace, &cfg.cluster, "");
    id.strip_prefix(&prefix)
        .is_some_and(|i| cnmysql_api::names::ordinal_of(&cfg.cluster, i).is_some())
}

async fn backup<B: Backend>(State(b): State<Arc<B>>, Extension(peer): Extension<Peer>) -> Response {
    if !may_clone(b.config(), &peer) {
        tracing::warn!(
            identities = ?peer.identities,
            "backup refused to a certificate of another identity"
        );
        return (StatusCode::FORBIDDEN, "this identity may not copy the data").into_response();
    }
    let st = b.status().await;
    if !st.ready {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready to serve a backup: {:?} {}", st.phase, st.message),
        )
            .into_response();
    }
    tracing::info!(identities = ?peer.identities, "backup requested");
    if b.config().flavor() == cnmysql_api::Flavor::Mysql {
        return match crate::mysql_backup::start(b.config()).await {
            Ok((gtid, size, stream)) => Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "application/x-tar")
                .header(crate::mysql_backup::GTID_HEADER, gtid)
                .header(crate::clone::SIZE_HEADER, size.to_string())
                .body(Body::from_stream(stream))
                .expect("valid response"),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot start the backup: {e:#}"),
            )
                .into_response(),
        };
    }
    match crate::clone::start_backup(b.config()) {
        Ok((size, stream)) => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header(crate::clone::SIZE_HEADER, size.to_string())
            .header(crate::clone::HISTORY_HEADER, st.gtid_executed.trim())
            .body(Body::from_stream(stream))
            .expect("valid response"),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot start the backup: {e}"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_are_known_by_the_identity_of_this_cluster_and_namespace() {
        let cfg = crate::config::tests::sample(std::path::Path::new("/x"));
        let peer = |ns: &str, cluster: &str, who: &str| Peer {
            identities: vec![cnmysql_api::names::identity(ns, cluster, who)],
        };
        assert!(may_clone(&cfg, &peer("prod", "db", "db-2")));
        assert!(may_clone(&cfg, &peer("prod", "db", "db-17")));
        assert!(may_clone(&cfg, &peer("prod", "db", OPERATOR_IDENTITY)));
        assert!(!may_clone(&cfg, &peer("prod", "other", "other-2")));
        assert!(!may_clone(&cfg, &peer("staging", "db", "db-2")));
        assert!(!may_clone(&cfg, &peer("staging", "db", OPERATOR_IDENTITY)));
        assert!(!may_clone(&cfg, &Peer::default()));
        assert!(peer("prod", "db", OPERATOR_IDENTITY).is(&cfg, OPERATOR_IDENTITY));
        assert!(!peer("staging", "db", OPERATOR_IDENTITY).is(&cfg, OPERATOR_IDENTITY));
        assert!(!peer("prod", "db", "db-2").is(&cfg, OPERATOR_IDENTITY));
    }

    #[test]
    fn a_readiness_wait_is_read_from_the_query_and_bounded() {
        assert_eq!(wait_millis(None), 0);
        assert_eq!(wait_millis(Some("waitMillis=900")), 900);
        assert_eq!(wait_millis(Some("a=1&waitMillis=300")), 300);
        assert_eq!(wait_millis(Some("waitMillis=soon")), 0);
        assert_eq!(wait_millis(Some("waitMillis=600000")), READY_WAIT_MAX_MS);
    }
}
