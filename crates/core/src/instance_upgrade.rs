//! Upgrades asked for by annotation, one instance at a time (issue 22; not
//! yet carried out by any platform): what `cnmysql.io/upgrade-to` asks
//! for, and what to do about it given what the instance runs and what its
//! status annotations say.
//!
//! - `manager=operator`: the running operator's executable, in place;
//! - `manager=file:///path[#sha256=HEX]`: an executable already on the
//!   instance's filesystem, checked by its SHA-256, in place;
//! - `image=REF` / `version=V`: the instance recreated on that server.
//!
//! Progress is recorded on the same object: `cnmysql.io/upgrade-status`
//! (`in-progress`, `failed`, `done`), `cnmysql.io/upgrade-release` (what
//! it runs once done), `cnmysql.io/upgrade-last-failed-attempt-at`, and
//! `cnmysql.io/upgrade-attempts` for the back-off. A failed attempt is
//! tried again while `upgrade-to` stays, never sooner than the back-off.

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
        "version" => crate::server_upgrade::Version::parse(rest)
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

/// Decide for an instance asked for `target`. `running`: the release it
/// runs now for that kind of target (its manager's hash, or its server
/// version), when known; `wanted`: the release the target means (the
/// operator's or the file's hash, the version; None for an image whose
/// version is not known yet).
pub fn decide(
    target: &Target,
    recorded: &Recorded,
    running: Option<&str>,
    wanted: Option<&str>,
    now_ms: i64,
) -> Decision {
    let reached = match (target, running, wanted) {
        (Target::Version(v), Some(r), _) => crate::server_upgrade::matches(r, v),
        (_, Some(r), Some(w)) => r == w,
        _ => false,
    };
    if reached {
        return Decision::Done {
            release: running.unwrap_or_default().to_string(),
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
        // Asked anew (or again after done, for something else).
        Some(Status::Done) | None => Decision::Start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44";

    #[test]
    fn every_form_parses_and_a_bad_one_says_how_to_write_it() {
        assert_eq!(parse("manager=operator"), Ok(Target::ManagerFromOperator));
        assert_eq!(
            parse(&format!(
                "manager=file:///opt/cnmysql#sha256={}",
                HASH.to_uppercase()
            )),
            Ok(Target::ManagerFromFile {
                path: "/opt/cnmysql".into(),
                sha256: Some(HASH.into())
            })
        );
        assert_eq!(
            parse("manager=file:///opt/cnmysql"),
            Ok(Target::ManagerFromFile {
                path: "/opt/cnmysql".into(),
                sha256: None
            })
        );
        assert_eq!(
            parse("image=mariadb:11.8"),
            Ok(Target::Image("mariadb:11.8".into()))
        );
        assert_eq!(
            parse("version=10.11.19"),
            Ok(Target::Version("10.11.19".into()))
        );
        for bad in [
            "operator",
            "manager=latest",
            "manager=file://relative/path",
            "manager=file:///x#md5=abc",
            "manager=file:///x#sha256=abc",
            "version=eleven",
            "image=",
            "colour=blue",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(
                e.starts_with(UPGRADE_TO) && e.contains("write it as"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn done_once_it_runs_what_was_asked_failed_attempts_retried_with_a_growing_backoff() {
        let t = Target::ManagerFromOperator;
        let none = Recorded::default();
        assert_eq!(
            decide(&t, &none, Some("old"), Some("new"), 0),
            Decision::Start
        );
        let going = Recorded {
            status: Some(Status::InProgress),
            attempts: 1,
            ..Default::default()
        };
        assert!(matches!(
            decide(&t, &going, Some("old"), Some("new"), 0),
            Decision::Wait(_)
        ));
        assert_eq!(
            decide(&t, &going, Some("new"), Some("new"), 0),
            Decision::Done {
                release: "new".into()
            }
        );
        let failed = |attempts| Recorded {
            status: Some(Status::Failed),
            last_failed_ms: Some(1_000_000),
            attempts,
            ..Default::default()
        };
        assert!(matches!(
            decide(&t, &failed(1), Some("old"), Some("new"), 1_000_000 + 9_000),
            Decision::Wait(w) if w.contains("next in 1 s")
        ));
        assert_eq!(
            decide(&t, &failed(1), Some("old"), Some("new"), 1_010_000),
            Decision::Start
        );
        assert!(matches!(
            decide(&t, &failed(3), Some("old"), Some("new"), 1_030_000),
            Decision::Wait(_)
        ));
        assert_eq!(
            decide(&t, &failed(3), Some("old"), Some("new"), 1_040_000),
            Decision::Start
        );
        assert_eq!(backoff_ms(50), MAX_BACKOFF_MS);
        // A version is reached at the precision it is asked.
        let v = Target::Version("11.8".into());
        assert_eq!(
            decide(&v, &going, Some("11.8.9"), None, 0),
            Decision::Done {
                release: "11.8.9".into()
            }
        );
    }
}
