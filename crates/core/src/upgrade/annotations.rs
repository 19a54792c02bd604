//! What the `cnmysql.io/upgrade-*` annotations ask and record: the
//! `upgrade-to` value parsed, the status annotations an instance carries,
//! the retry back-off, and what the platform read of them ([`Asked`]).
//! Pure vocabulary: nothing here looks at a snapshot (the decisions that
//! do are in `annotated.rs`).

use std::collections::BTreeMap;

pub const UPGRADE_TO: &str = "cnmysql.io/upgrade-to";
pub const UPGRADE_STATUS: &str = "cnmysql.io/upgrade-status";
pub const UPGRADE_RELEASE: &str = "cnmysql.io/upgrade-release";
pub const LAST_FAILED_ATTEMPT_AT: &str = "cnmysql.io/upgrade-last-failed-attempt-at";
pub const ATTEMPTS: &str = "cnmysql.io/upgrade-attempts";

/// The first retry waits this long; each further one twice as long, up to
/// [`MAX_BACKOFF_MS`].
pub const FIRST_BACKOFF_MS: i64 = 10_000;
pub const MAX_BACKOFF_MS: i64 = 300_000;

/// What `cnmysql.io/upgrade-to` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The running operator's executable.
    ManagerFromOperator,
    /// An executable on the instance's filesystem, with the SHA-256 it must
    /// have (hex, lower case) when given.
    ManagerFromFile {
        path: String,
        sha256: Option<String>,
    },
    /// A server image.
    Image(String),
    /// A server version.
    Version(String),
}

/// Parse the annotation's value; the error names the annotation and says
/// how to write it.
pub fn parse(value: &str) -> Result<Target, String> {
    let how = "write it as manager=operator, manager=file:///path[#sha256=<hex>], image=<server image> or version=<server version>";
    let bad = |why: String| format!("{UPGRADE_TO}: {why}; {how}");
    let (key, rest) = value
        .trim()
        .split_once('=')
        .ok_or_else(|| bad(format!("{value:?} has no key")))?;
    match key {
        "manager" if rest == "operator" => Ok(Target::ManagerFromOperator),
        "manager" => {
            let file = rest.strip_prefix("file://").ok_or_else(|| {
                bad(format!(
                    "manager={rest} is neither operator nor a file:// path"
                ))
            })?;
            let (path, sha256) = match file.split_once('#') {
                None => (file, None),
                Some((p, frag)) => {
                    let hex = frag
                        .strip_prefix("sha256=")
                        .ok_or_else(|| bad(format!("#{frag} is not #sha256=<64 hex digits>")))?;
                    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(bad(format!("sha256={hex} is not 64 hex digits")));
                    }
                    (p, Some(hex.to_ascii_lowercase()))
                }
            };
            if !path.starts_with('/') {
                return Err(bad(format!("file://{path} is not an absolute path")));
            }
            Ok(Target::ManagerFromFile {
                path: path.to_string(),
                sha256,
            })
        }
        "image" if !rest.is_empty() => Ok(Target::Image(rest.to_string())),
        "version" => crate::upgrade::version::Version::parse(rest)
            .filter(|v| v.to_string() == rest)
            .map(|_| Target::Version(rest.to_string()))
            .ok_or_else(|| bad(format!("version={rest} is not a server version"))),
        _ => Err(bad(format!("{key}={rest} is not understood"))),
    }
}

/// `cnmysql.io/upgrade-status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    InProgress,
    Failed,
    Done,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in-progress",
            Status::Failed => "failed",
            Status::Done => "done",
        }
    }
    pub fn parse(s: &str) -> Option<Status> {
        match s {
            "in-progress" => Some(Status::InProgress),
            "failed" => Some(Status::Failed),
            "done" => Some(Status::Done),
            _ => None,
        }
    }
}

/// What an instance's status annotations say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    pub status: Option<Status>,
    pub release: Option<String>,
    pub last_failed_ms: Option<i64>,
    pub attempts: u32,
}

/// How long after its last failure an attempt may be made again.
pub fn backoff_ms(attempts: u32) -> i64 {
    let doublings = attempts.saturating_sub(1).min(16);
    (FIRST_BACKOFF_MS << doublings).min(MAX_BACKOFF_MS)
}

/// What to do about one instance's `upgrade-to` now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// It runs what was asked: record `done` with this release.
    Done { release: String },
    /// Start an attempt (record `in-progress`, count it).
    Start,
    /// An attempt is under way, or the back-off runs: nothing now.
    Wait(String),
}

/// Decide for an instance asked for something. `reached`: the release it
/// runs when it runs what was asked (None while it does not); `ready`:
/// whether the instance is ready now.
pub fn decide(reached: Option<&str>, recorded: &Recorded, ready: bool, now_ms: i64) -> Decision {
    if let Some(release) = reached {
        return Decision::Done {
            release: release.to_string(),
        };
    }
    match recorded.status {
        Some(Status::InProgress) => Decision::Wait("the attempt is under way".into()),
        Some(Status::Failed) => {
            let since = now_ms - recorded.last_failed_ms.unwrap_or(i64::MIN / 2);
            let wait = backoff_ms(recorded.attempts);
            if since >= wait {
                Decision::Start
            } else {
                Decision::Wait(format!(
                    "attempt {} failed; the next in {} s",
                    recorded.attempts,
                    (wait - since + 999) / 1000
                ))
            }
        }
        // Done, and not ready for now (a switchover points it at its new
        // source, a restart): still done. A new attempt is for an
        // instance seen ready on something else.
        Some(Status::Done) if !ready => Decision::Wait("done; not ready for now".into()),
        // Asked anew (or again after done, for something else).
        Some(Status::Done) | None => Decision::Start,
    }
}

/// What the `cnmysql.io/upgrade-*` annotations ask, as the platform read
/// them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Asked {
    /// The Cluster's annotations.
    pub cluster: BTreeMap<String, String>,
    /// Each instance's annotations, for the instances whose object could
    /// be read (an instance missing here is unknown, not unannotated: a
    /// Pod being recreated).
    pub instances: BTreeMap<String, BTreeMap<String, String>>,
    /// Server targets resolved by the platform ([`resolve_server`]), by
    /// `upgrade-to` value.
    pub servers: BTreeMap<String, Result<ServerTarget, String>>,
}

/// A server target, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTarget {
    pub image: String,
    /// The version it holds (required: an upgrade is validated by it).
    pub version: String,
}

/// The `upgrade-to` values in `asked` that name a server (the platform
/// resolves each with [`resolve_server`]).
pub fn server_values(asked: &Asked) -> Vec<String> {
    let mut out: Vec<String> = asked
        .instances
        .values()
        .chain(std::iter::once(&asked.cluster))
        .filter_map(|a| a.get(UPGRADE_TO))
        .filter(|v| matches!(parse(v), Ok(Target::Image(_) | Target::Version(_))))
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Where an in-place upgrade of `name` takes its executable from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The control plane's own executable, streamed.
    Operator,
    /// A file on the instance's filesystem (SHA-256 when given).
    File {
        path: String,
        sha256: Option<String>,
    },
}
