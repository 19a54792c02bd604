//! The statements each server flavour needs, as plain text.
//!
//! The instance manager executes them; here they are pure functions, tested
//! for exactly what each flavour sends (and run against real MySQL 9.7 and
//! MariaDB servers by the end-to-end suites). Statements that carry a secret
//! keep a redacted form for logs.

use std::fmt;

use cnmysql_api::Flavor;

pub mod hand_over;

/// One statement, with the text to log in place of the real one.
#[derive(Clone, PartialEq, Eq)]
pub struct Sql {
    pub text: String,
    redacted: Option<String>,
}

impl Sql {
    pub fn new(text: impl Into<String>) -> Sql {
        Sql {
            text: text.into(),
            redacted: None,
        }
    }

    /// A statement carrying a secret: `shown` is what logs may print.
    pub fn secret(text: impl Into<String>, shown: impl Into<String>) -> Sql {
        Sql {
            text: text.into(),
            redacted: Some(shown.into()),
        }
    }

    /// The loggable form.
    pub fn shown(&self) -> &str {
        self.redacted.as_deref().unwrap_or(&self.text)
    }
}

impl fmt::Display for Sql {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.shown())
    }
}

impl fmt::Debug for Sql {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sql({:?})", self.shown())
    }
}

/// A SQL string literal.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Where and how a replica connects to its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceSpec {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub ssl_ca: String,
    pub ssl_cert: String,
    pub ssl_key: String,
    /// MariaDB: start from `gtid_slave_pos` (a freshly cloned replica) or
    /// `gtid_current_pos` (a former primary whose own writes count).
    pub use_current_pos: bool,
    /// Check the source's certificate names `host`. Off when the source is
    /// reached by a Pod IP its certificate cannot name: the chain is still
    /// verified against the cluster's own CA (verify-ca).
    pub verify_host: bool,
    /// MySQL: apply the source's transactions with this account's
    /// privileges (`PRIVILEGE_CHECKS_USER`): a source outside the cluster.
    /// None applies as the server (a peer of the same cluster), and says
    /// so, since a CHANGE keeps what it does not name.
    pub privilege_checks_user: Option<String>,
}

/// The account a source outside the cluster is applied as (MySQL's
/// `PRIVILEGE_CHECKS_USER`), on this server only.
pub const APPLIER_USER: &str = "cnmysql_applier";

/// What the applier of a source outside the cluster may do: the data,
/// definitions and accounts a source's history carries, and every
/// privilege its grants commonly give on (with the grant option): never a
/// file, `SUPER`, a shutdown, a tablespace, or an administrative dynamic
/// privilege (server settings, replication or clone administration). A
/// history that grants one of those stops the applier with the statement
/// named (docs/security.md). Made on this server only (not
/// binary-logged), locked (nobody signs in as it).
pub fn applier_account() -> Vec<Sql> {
    let who = format!("{}@'localhost'", quote(APPLIER_USER));
    vec![
        Sql::new(format!("CREATE USER IF NOT EXISTS {who} ACCOUNT LOCK")),
        Sql::new(format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, RELOAD, PROCESS, REFERENCES, \
             INDEX, ALTER, SHOW DATABASES, CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, \
             REPLICATION SLAVE, REPLICATION CLIENT, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, \
             ALTER ROUTINE, CREATE USER, EVENT, TRIGGER, CREATE ROLE, DROP ROLE, \
             BACKUP_ADMIN, SHOW_ROUTINE ON *.* TO {who} WITH GRANT OPTION"
        )),
        Sql::new(format!(
            "GRANT REPLICATION_APPLIER, SESSION_VARIABLES_ADMIN, SET_ANY_DEFINER, \
             ALLOW_NONEXISTENT_DEFINER ON *.* TO {who}"
        )),
    ]
}

pub fn read_only(flavor: Flavor, on: bool) -> Vec<Sql> {
    let v = if on { "ON" } else { "OFF" };
    match flavor {
        Flavor::Mariadb => vec![Sql::new(format!("SET GLOBAL read_only = {v}"))],
        // super_read_only implies read_only when switched on; switching it off
        // leaves read_only on, so clear both.
        Flavor::Mysql if on => vec![Sql::new("SET GLOBAL super_read_only = ON")],
        Flavor::Mysql => vec![
            Sql::new("SET GLOBAL super_read_only = OFF"),
            Sql::new("SET GLOBAL read_only = OFF"),
        ],
    }
}

/// Start-up options for a crash recovery as decided by
/// [`crate::role::recovery`]. MariaDB rolls back and truncates unacknowledged
/// binary-logged transactions with `--init-rpl-role=SLAVE`; it accepts its
/// own re-fetched events afterwards only as a semi-sync replica, so the
/// option is used only when semi-sync is on (replica side enabled at start).
/// MySQL has no such recovery: a former primary with such a transaction is
/// kept out as diverged.
pub fn recovery_options(
    flavor: Flavor,
    recovery: crate::role::Recovery,
    semi_sync: bool,
) -> Vec<String> {
    match (flavor, recovery, semi_sync) {
        (Flavor::Mariadb, crate::role::Recovery::AsReplica, true) => {
            vec!["--init-rpl-role=SLAVE".into()]
        }
        _ => Vec::new(),
    }
}

/// Load the server's TLS certificate, key and CA again from the files it
/// was started with; new connections use them, open ones keep theirs.
/// Never binary-logged: MariaDB writes a plain `FLUSH` to the binary log,
/// which on a replica would be a transaction of its own (diverged);
/// MySQL never logs `ALTER INSTANCE`.
pub fn reload_tls(flavor: Flavor) -> Sql {
    Sql::new(match flavor {
        Flavor::Mariadb => "FLUSH LOCAL SSL",
        Flavor::Mysql => "ALTER INSTANCE RELOAD TLS",
    })
}

pub fn stop_replica(flavor: Flavor) -> Sql {
    Sql::new(match flavor {
        Flavor::Mariadb => "STOP SLAVE",
        Flavor::Mysql => "STOP REPLICA",
    })
}

/// Stop receiving from the source; what was received is still applied.
pub fn stop_receiving(flavor: Flavor) -> Sql {
    Sql::new(match flavor {
        Flavor::Mariadb => "STOP SLAVE IO_THREAD",
        Flavor::Mysql => "STOP REPLICA IO_THREAD",
    })
}

pub fn start_replica(flavor: Flavor) -> Sql {
    Sql::new(match flavor {
        Flavor::Mariadb => "START SLAVE",
        Flavor::Mysql => "START REPLICA",
    })
}

/// Connect the IO thread again at once (it was waiting for its next
/// connect retry).
pub fn reconnect_io_thread(flavor: Flavor) -> [Sql; 2] {
    match flavor {
        Flavor::Mariadb => [
            Sql::new("STOP SLAVE IO_THREAD"),
            Sql::new("START SLAVE IO_THREAD"),
        ],
        Flavor::Mysql => [
            Sql::new("STOP REPLICA IO_THREAD"),
            Sql::new("START REPLICA IO_THREAD"),
        ],
    }
}

/// MySQL: the multi-threaded applier's coordinator, as the process list
/// shows it (no performance_schema needed): the first replication thread
/// started, busy with or waiting on the relay log. Its workers come after
/// it, and the receiver must already be stopped.
pub const MYSQL_APPLIER_COORDINATOR: &str = "SELECT ID FROM information_schema.PROCESSLIST \
     WHERE USER = 'system user' AND (STATE LIKE '%relay log%' OR STATE LIKE 'Waiting for %orkers%') \
     ORDER BY ID LIMIT 1";

/// Forget the source entirely (a promoted instance).
pub fn reset_replica(flavor: Flavor) -> Sql {
    Sql::new(match flavor {
        Flavor::Mariadb => "RESET SLAVE ALL",
        Flavor::Mysql => "RESET REPLICA ALL",
    })
}

pub fn replica_status(flavor: Flavor) -> Sql {
    Sql::new(match flavor {
        Flavor::Mariadb => "SHOW SLAVE STATUS",
        Flavor::Mysql => "SHOW REPLICA STATUS",
    })
}

/// Point replication at a source over TLS with GTID auto-positioning.
pub fn change_source(flavor: Flavor, s: &SourceSpec) -> Sql {
    let (statement, k, gtid) = match flavor {
        Flavor::Mariadb => (
            "CHANGE MASTER TO",
            "MASTER",
            format!(
                "MASTER_USE_GTID={}",
                if s.use_current_pos {
                    "current_pos"
                } else {
                    "slave_pos"
                }
            ),
        ),
        Flavor::Mysql => (
            "CHANGE REPLICATION SOURCE TO",
            "SOURCE",
            "SOURCE_AUTO_POSITION=1".to_string(),
        ),
    };
    // A client certificate only for accounts that require one (a replica
    // cluster's source account may take a password alone). Always named,
    // empty when there is none: a CHANGE keeps what it does not name, and
    // a certificate of another CA left from following a peer fails the
    // source's TLS handshake.
    let client = format!(
        "{k}_SSL_CERT={}, {k}_SSL_KEY={}, ",
        quote(&s.ssl_cert),
        quote(&s.ssl_key)
    );
    let checks = match (flavor, &s.privilege_checks_user) {
        (Flavor::Mariadb, _) => String::new(),
        (Flavor::Mysql, Some(u)) => format!(", PRIVILEGE_CHECKS_USER = {}@'localhost'", quote(u)),
        (Flavor::Mysql, None) => ", PRIVILEGE_CHECKS_USER = NULL".into(),
    };
    let render = |pw: &str| {
        format!(
            "{statement} {k}_HOST={}, {k}_PORT={}, {k}_USER={}, {k}_PASSWORD={pw}, \
             {k}_SSL=1, {k}_SSL_CA={}, {client}\
             {k}_SSL_VERIFY_SERVER_CERT={}, {k}_CONNECT_RETRY=1, {k}_HEARTBEAT_PERIOD=1, {gtid}{checks}",
            quote(&s.host),
            s.port,
            quote(&s.user),
            quote(&s.ssl_ca),
            u8::from(s.verify_host),
        )
    };
    Sql::secret(render(&quote(&s.password)), render("'<redacted>'"))
}

/// Start a freshly cloned replica from the GTID position its backup was taken at.
pub fn seed_gtid_position(flavor: Flavor, position: &str) -> Vec<Sql> {
    match flavor {
        Flavor::Mariadb => vec![Sql::new(format!(
            "SET GLOBAL gtid_slave_pos = {}",
            quote(position)
        ))],
        // The clone plugin carries the donor's gtid_executed into the copy.
        Flavor::Mysql => {
            let _ = position;
            Vec::new()
        }
    }
}

/// Give a copy whose binary log is empty (a MariaDB physical copy, a
/// restored backup, an import) the history it holds: `state` as its
/// binary log's GTID state, `position` as where its applier stands. MySQL
/// copies carry their `gtid_executed`: nothing to do.
pub fn adopt_history(flavor: Flavor, state: &str, position: &str) -> Vec<Sql> {
    if flavor == Flavor::Mysql || position.is_empty() {
        return Vec::new();
    }
    let mut out = vec![
        Sql::new("RESET MASTER"),
        Sql::new(format!("SET GLOBAL gtid_binlog_state = {}", quote(state))),
    ];
    out.extend(seed_gtid_position(flavor, position));
    out
}

/// What the replication account demands of a client certificate: this
/// cluster's subject and issuer (as `REQUIRE SUBJECT … AND ISSUER …`
/// compare them), either alone when the other is not known, any
/// certificate a trusted CA issued when neither is.
pub fn replication_requirement(subject: Option<&str>, issuer: Option<&str>) -> String {
    let parts: Vec<String> = [("SUBJECT", subject), ("ISSUER", issuer)]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k} {}", quote(v))))
        .collect();
    if parts.is_empty() {
        "REQUIRE X509".into()
    } else {
        format!("REQUIRE {}", parts.join(" AND "))
    }
}

/// The account replicas connect with; it demands a certificate as
/// `require` says ([`replication_requirement`]).
pub fn create_replication_user(
    flavor: Flavor,
    user: &str,
    password: &str,
    require: &str,
) -> Vec<Sql> {
    let grant = match flavor {
        Flavor::Mariadb => "REPLICATION SLAVE, REPLICATION CLIENT",
        // The same account is the clone plugin's donor account.
        Flavor::Mysql => "REPLICATION SLAVE, REPLICATION CLIENT, BACKUP_ADMIN",
    };
    let create = |pw: &str| {
        format!(
            "CREATE USER IF NOT EXISTS {}@'%' IDENTIFIED BY {} {require}",
            quote(user),
            pw
        )
    };
    vec![
        Sql::secret(create(&quote(password)), create("'<redacted>'")),
        Sql::new(format!("GRANT {grant} ON *.* TO {}@'%'", quote(user))),
    ]
}

/// Queries for the executed history and the read-only flag, one row:
/// (binary log history, position, read_only, applied position). MariaDB's
/// history is the binlog state together with the applied position (see
/// [`executed_history`]); MySQL's `gtid_executed` is complete by itself.
pub fn gtid_and_read_only(flavor: Flavor) -> Sql {
    Sql::new(match flavor {
        Flavor::Mariadb => {
            "SELECT @@gtid_binlog_state, @@gtid_current_pos, @@read_only, @@gtid_slave_pos"
        }
        Flavor::Mysql => "SELECT @@gtid_executed, @@gtid_executed, @@super_read_only, ''",
    })
}

/// How long ago, in microseconds, the oldest transaction a replica's
/// applier has in hand now was committed where it was first written (0
/// when it has none): MySQL's applier workers of the default channel.
/// MariaDB tells no such figure.
pub fn applying_lag_micros(flavor: Flavor) -> Option<Sql> {
    match flavor {
        Flavor::Mariadb => None,
        Flavor::Mysql => Some(Sql::new(
            "SELECT COALESCE(MAX(TIMESTAMPDIFF(MICROSECOND, \
             APPLYING_TRANSACTION_ORIGINAL_COMMIT_TIMESTAMP, NOW(6))), 0) \
             FROM performance_schema.replication_applier_status_by_worker \
             WHERE CHANNEL_NAME = '' AND APPLYING_TRANSACTION <> ''",
        )),
    }
}

/// The executed history an instance reports, from the columns of
/// [`gtid_and_read_only`]: for MariaDB the binlog state with the applied
/// position merged in (`BinlogState::with_applied`), so that a server cloned
/// and promoted before its binary log saw the old primary's writes is not
/// taken for one that never had them.
pub fn executed_history(flavor: Flavor, binlog: &str, applied: &str) -> String {
    match flavor {
        Flavor::Mysql => binlog.to_string(),
        Flavor::Mariadb => {
            let (Ok(state), Ok(pos)) = (
                binlog.parse::<cnmysql_gtid::mariadb::BinlogState>(),
                applied.parse::<cnmysql_gtid::mariadb::GtidPos>(),
            ) else {
                // Unparseable: report what the server said; the decisions
                // that read it refuse it with the parse error.
                return binlog.to_string();
            };
            state.with_applied(&pos).to_string()
        }
    }
}

/// How long (ms) the longest commit has waited for a semi-sync
/// acknowledgement (0 when none waits). MySQL reports whole seconds.
pub fn longest_ack_wait_ms(flavor: Flavor) -> Sql {
    Sql::new(match flavor {
        Flavor::Mariadb => {
            "SELECT CAST(COALESCE(MAX(TIME_MS), 0) AS UNSIGNED) FROM information_schema.PROCESSLIST \
             WHERE STATE LIKE 'Waiting for semi-sync ACK%'"
        }
        // information_schema: performance_schema's processlist is empty
        // while performance_schema is off (our default).
        Flavor::Mysql => {
            "SELECT CAST(COALESCE(MAX(TIME), 0) * 1000 AS UNSIGNED) FROM information_schema.PROCESSLIST \
             WHERE STATE LIKE 'Waiting for semi-sync ACK%'"
        }
    })
}

/// How many sessions wait for a semi-sync acknowledgement now (the
/// processlist's time is in whole seconds on MySQL: a waiter of less than
/// a second shows 0 there, so it is counted, not timed).
pub fn ack_waiters(_flavor: Flavor) -> Sql {
    Sql::new(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE STATE LIKE 'Waiting for semi-sync ACK%'",
    )
}

/// A server id no instance has: a replay's applier runs under it, since
/// an applier skips the events of its own server id and the archive holds
/// the source cluster's (the same ordinals as this one's).
pub const REPLAY_SERVER_ID: u32 = u32::MAX;

/// How many applier threads a replay runs.
pub const REPLAY_WORKERS: u32 = 4;

/// Apply relay log files already on disk: a source that is never reached
/// (only the applier starts), positioned at the start of `first_file`.
pub fn apply_relay_logs(flavor: Flavor, first_file: &str) -> Vec<Sql> {
    let file = quote(first_file);
    let (workers, change, start) = match flavor {
        Flavor::Mariadb => (
            "slave_parallel_threads",
            format!(
                "CHANGE MASTER TO MASTER_HOST='replay.invalid', MASTER_USE_GTID=no, \
                 RELAY_LOG_FILE={file}, RELAY_LOG_POS=4"
            ),
            "START SLAVE SQL_THREAD",
        ),
        Flavor::Mysql => (
            "replica_parallel_workers",
            format!(
                "CHANGE REPLICATION SOURCE TO SOURCE_HOST='replay.invalid', \
                 SOURCE_AUTO_POSITION=0, RELAY_LOG_FILE={file}, RELAY_LOG_POS=4"
            ),
            "START REPLICA SQL_THREAD",
        ),
    };
    vec![
        Sql::new(format!("SET GLOBAL server_id = {REPLAY_SERVER_ID}")),
        Sql::new(format!("SET GLOBAL {workers} = {REPLAY_WORKERS}")),
        Sql::new(change),
        Sql::new(start),
    ]
}

/// After a replay: the applier and its relay logs gone, the server id back.
pub fn end_replay(flavor: Flavor, server_id: u32) -> Vec<Sql> {
    vec![
        stop_replica(flavor),
        reset_replica(flavor),
        Sql::new(format!("SET GLOBAL server_id = {server_id}")),
    ]
}

/// Wait until the applied history includes `position` (seconds; -1 = timeout).
pub fn wait_for_position(flavor: Flavor, position: &str, timeout_secs: f64) -> Sql {
    Sql::new(match flavor {
        Flavor::Mariadb => format!(
            "SELECT MASTER_GTID_WAIT({}, {timeout_secs})",
            quote(position)
        ),
        Flavor::Mysql => format!(
            "SELECT WAIT_FOR_EXECUTED_GTID_SET({}, {timeout_secs})",
            quote(position)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> SourceSpec {
        SourceSpec {
            privilege_checks_user: None,
            host: "db-1".into(),
            port: 3306,
            user: "cnmysql_replication".into(),
            password: "s3cr'et".into(),
            ssl_ca: "/tls/ca.crt".into(),
            ssl_cert: "/tls/db-2.crt".into(),
            ssl_key: "/tls/db-2.key".into(),
            use_current_pos: false,
            verify_host: true,
        }
    }

    #[test]
    fn quoting_escapes_what_would_break_out() {
        assert_eq!(quote("it's"), "'it''s'");
        assert_eq!(quote("a\\b"), "'a\\\\b'");
        assert_eq!(quote("x\ny"), "'x\\ny'");
    }

    #[test]
    fn mysql_replication_uses_auto_position_over_tls() {
        let s = change_source(Flavor::Mysql, &source());
        assert!(
            s.text
                .starts_with("CHANGE REPLICATION SOURCE TO SOURCE_HOST='db-1', SOURCE_PORT=3306")
        );
        assert!(s.text.contains("SOURCE_AUTO_POSITION=1"));
        assert!(s.text.contains("SOURCE_SSL=1"));
        assert!(s.text.contains("SOURCE_SSL_CERT='/tls/db-2.crt'"));
        assert!(s.text.contains("SOURCE_PASSWORD='s3cr''et'"));
        // A peer is applied as the server, saying so (a CHANGE keeps what
        // it does not name); a source outside the cluster as the applier.
        assert!(
            s.text.ends_with("PRIVILEGE_CHECKS_USER = NULL"),
            "{}",
            s.text
        );
        let outside = SourceSpec {
            privilege_checks_user: Some(APPLIER_USER.into()),
            ..source()
        };
        assert!(
            change_source(Flavor::Mysql, &outside)
                .text
                .ends_with("PRIVILEGE_CHECKS_USER = 'cnmysql_applier'@'localhost'")
        );
        assert!(
            !change_source(Flavor::Mariadb, &outside)
                .text
                .contains("PRIVILEGE")
        );
        assert_eq!(start_replica(Flavor::Mysql).text, "START REPLICA");
        assert_eq!(reset_replica(Flavor::Mysql).text, "RESET REPLICA ALL");
        assert_eq!(replica_status(Flavor::Mysql).text, "SHOW REPLICA STATUS");
    }

    #[test]
    fn mariadb_replication_uses_gtid_over_tls() {
        let s = change_source(Flavor::Mariadb, &source());
        assert!(s.text.contains("MASTER_USE_GTID=slave_pos"));
        assert!(s.text.contains("MASTER_SSL=1"));
        let mut former = source();
        former.use_current_pos = true;
        assert!(
            change_source(Flavor::Mariadb, &former)
                .text
                .contains("MASTER_USE_GTID=current_pos")
        );
    }

    #[test]
    fn secrets_never_reach_the_loggable_form() {
        for f in [Flavor::Mysql, Flavor::Mariadb] {
            let s = change_source(f, &source());
            assert!(!s.to_string().contains("s3cr"));
            assert!(!format!("{s:?}").contains("s3cr"));
            for u in create_replication_user(f, "r", "s3cr'et", "REQUIRE X509") {
                assert!(!u.to_string().contains("s3cr"), "{u}");
            }
        }
        let require = replication_requirement(
            Some("/CN=db/O=cloudnative-mysql/OU=prod"),
            Some("/CN=cnmysql db CA/O=cloudnative-mysql"),
        );
        assert_eq!(
            require,
            "REQUIRE SUBJECT '/CN=db/O=cloudnative-mysql/OU=prod' AND ISSUER '/CN=cnmysql db CA/O=cloudnative-mysql'"
        );
        assert!(
            create_replication_user(Flavor::Mariadb, "r", "pw", &require)[0]
                .text
                .ends_with(&require)
        );
        assert_eq!(replication_requirement(None, None), "REQUIRE X509");
    }

    #[test]
    fn read_only_per_flavour() {
        let on: Vec<String> = read_only(Flavor::Mysql, true)
            .into_iter()
            .map(|s| s.text)
            .collect();
        assert_eq!(on, ["SET GLOBAL super_read_only = ON"]);
        let off: Vec<String> = read_only(Flavor::Mysql, false)
            .into_iter()
            .map(|s| s.text)
            .collect();
        assert_eq!(
            off,
            [
                "SET GLOBAL super_read_only = OFF",
                "SET GLOBAL read_only = OFF"
            ]
        );
        assert_eq!(
            read_only(Flavor::Mariadb, true)[0].text,
            "SET GLOBAL read_only = ON"
        );
    }

    #[test]
    fn seeding_and_waiting() {
        assert_eq!(
            seed_gtid_position(Flavor::Mariadb, "0-1-5")[0].text,
            "SET GLOBAL gtid_slave_pos = '0-1-5'"
        );
        assert!(seed_gtid_position(Flavor::Mysql, "u:1-5").is_empty());
        assert!(
            wait_for_position(Flavor::Mysql, "u:1-5", 2.0)
                .text
                .starts_with("SELECT WAIT_FOR_EXECUTED_GTID_SET")
        );
        assert!(
            wait_for_position(Flavor::Mariadb, "0-1-5", 2.0)
                .text
                .starts_with("SELECT MASTER_GTID_WAIT")
        );
    }

    #[test]
    fn only_a_mariadb_semi_sync_replica_truncates_on_recovery() {
        use crate::role::Recovery::*;
        assert_eq!(
            recovery_options(Flavor::Mariadb, AsReplica, true),
            ["--init-rpl-role=SLAVE"]
        );
        assert!(recovery_options(Flavor::Mariadb, AsPrimary, true).is_empty());
        assert!(recovery_options(Flavor::Mariadb, AsReplica, false).is_empty());
        assert!(recovery_options(Flavor::Mysql, AsReplica, true).is_empty());
    }

    #[test]
    fn mariadb_history_includes_the_applied_position() {
        // Issue 18: a clone promoted before its binary log saw the old
        // primary's writes reported only its own server's entry.
        assert_eq!(
            executed_history(Flavor::Mariadb, "0-2-224027", "0-1-205380"),
            "0-1-205380,0-2-224027"
        );
        assert_eq!(executed_history(Flavor::Mariadb, "", "0-1-5"), "0-1-5");
        assert_eq!(executed_history(Flavor::Mariadb, "0-1-9", ""), "0-1-9");
        assert_eq!(executed_history(Flavor::Mysql, "u:1-5", ""), "u:1-5");
    }
}
