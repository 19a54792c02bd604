//! A replica cluster that follows its source's binlog archive
//! (`spec.replica.source.objectStore`) instead of a server: its designated
//! primary turns each batch of new archive pieces into relay log files of
//! a channel of its own (`archive`), which its applier replays as it
//! replays any source's events (in parallel where the source's commit
//! order allows). Between batches the channel is removed with its relay
//! logs and made again over the next files. Here: the statements, and
//! when a promotion may open writes. Pure.

use cnmysql_api::Flavor;

use crate::flavor::{REPLAY_SERVER_ID, REPLAY_WORKERS, Sql, quote};
use crate::replica_cluster::Promotion;
use crate::status::history_reaches;

/// The channel (MariaDB: the named connection).
pub const CHANNEL: &str = "archive";
/// Its relay log files' base name in the data directory: the server's
/// `relay_log` (`relay-bin`) and the channel's name.
pub const RELAY_BASE: &str = "relay-bin-archive";

/// The errors a server gives for a channel that does not exist.
pub const NO_CHANNEL_ERRORS: [u16; 2] = [1617, 3074];

/// The channel's replica status row (an error when there is none).
pub fn status(f: Flavor) -> Sql {
    Sql::new(match f {
        Flavor::Mariadb => format!("SHOW SLAVE '{CHANNEL}' STATUS"),
        Flavor::Mysql => format!("SHOW REPLICA STATUS FOR CHANNEL '{CHANNEL}'"),
    })
}

/// Stop the channel and remove it with its relay logs.
pub fn remove(f: Flavor) -> Vec<Sql> {
    match f {
        Flavor::Mariadb => vec![
            Sql::new(format!("STOP SLAVE '{CHANNEL}'")),
            Sql::new(format!("RESET SLAVE '{CHANNEL}' ALL")),
        ],
        Flavor::Mysql => vec![
            Sql::new(format!("STOP REPLICA FOR CHANNEL '{CHANNEL}'")),
            Sql::new(format!("RESET REPLICA ALL FOR CHANNEL '{CHANNEL}'")),
        ],
    }
}

/// Make the channel over relay log files already written (`first_file`
/// first) and start its applier. The applier runs under a server id no
/// instance has: it skips the events of its own server id, and the
/// archive holds the source cluster's.
pub fn apply(f: Flavor, first_file: &str) -> Vec<Sql> {
    let file = quote(first_file);
    let (workers, change, start) = match f {
        // MariaDB's parallel applier can leave a physical copy taken
        // meanwhile (a replica cloning from this instance) recording a
        // position before rows it holds: its applier runs serially here,
        // as a replica's does.
        Flavor::Mariadb => (
            None,
            format!(
                "CHANGE MASTER '{CHANNEL}' TO MASTER_HOST='archive.invalid', MASTER_USE_GTID=no, \
                 RELAY_LOG_FILE={file}, RELAY_LOG_POS=4"
            ),
            format!("START SLAVE '{CHANNEL}' SQL_THREAD"),
        ),
        Flavor::Mysql => (
            Some("replica_parallel_workers"),
            format!(
                "CHANGE REPLICATION SOURCE TO SOURCE_HOST='archive.invalid', \
                 SOURCE_AUTO_POSITION=0, RELAY_LOG_FILE={file}, RELAY_LOG_POS=4, \
                 PRIVILEGE_CHECKS_USER = '{}'@'localhost' FOR CHANNEL '{CHANNEL}'",
                crate::flavor::APPLIER_USER
            ),
            format!("START REPLICA SQL_THREAD FOR CHANNEL '{CHANNEL}'"),
        ),
    };
    let mut out = vec![Sql::new(format!(
        "SET GLOBAL server_id = {REPLAY_SERVER_ID}"
    ))];
    out.extend(workers.map(|w| Sql::new(format!("SET GLOBAL {w} = {REPLAY_WORKERS}"))));
    out.extend([Sql::new(change), Sql::new(start)]);
    out
}

/// The instance's own server id back, once a batch is applied.
pub fn own_server_id(server_id: u32) -> Sql {
    Sql::new(format!("SET GLOBAL server_id = {server_id}"))
}

/// Where a follower of the archive stands, as its manager tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Following {
    /// A batch is being applied.
    pub applying: bool,
    /// A read of the archive made after the promotion was asked for found
    /// nothing left to apply.
    pub read_to_end: bool,
}

/// The next step of a promotion (`enabled: false`) of a cluster that
/// follows an archive: with a token, keep reading until it is applied;
/// without one (the source is lost), apply everything the archive holds.
/// Then the channel may go and writes open.
pub fn promotion(f: Flavor, executed: &str, token: Option<&str>, at: Following) -> Promotion {
    let token = token.filter(|t| !t.trim().is_empty());
    if let Some(t) = token
        && !history_reaches(f, executed, t)
    {
        return Promotion::AwaitToken(format!(
            "waiting for the promotion token {t} to arrive in the binlog archive (applied so far: {executed})"
        ));
    }
    if at.applying {
        return Promotion::Applying("applying the last batch read from the binlog archive".into());
    }
    if token.is_none() && !at.read_to_end {
        return Promotion::Applying(
            "reading the rest of the binlog archive before opening writes".into(),
        );
    }
    Promotion::Ready
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Following = Following {
        applying: false,
        read_to_end: false,
    };

    #[test]
    fn a_promotion_with_a_token_waits_for_it_then_for_the_batch() {
        let f = Flavor::Mariadb;
        assert!(matches!(
            promotion(f, "0-1-10", Some("0-1-12"), IDLE),
            Promotion::AwaitToken(_)
        ));
        let busy = Following {
            applying: true,
            ..IDLE
        };
        assert!(matches!(
            promotion(f, "0-1-12", Some("0-1-12"), busy),
            Promotion::Applying(_)
        ));
        assert_eq!(
            promotion(f, "0-1-12", Some("0-1-12"), IDLE),
            Promotion::Ready
        );
    }

    #[test]
    fn a_promotion_without_a_token_applies_the_whole_archive_first() {
        let f = Flavor::Mysql;
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let at = format!("{u}:1-5");
        assert!(matches!(
            promotion(f, &at, None, IDLE),
            Promotion::Applying(_)
        ));
        let done = Following {
            applying: false,
            read_to_end: true,
        };
        assert_eq!(promotion(f, &at, None, done), Promotion::Ready);
    }

    #[test]
    fn the_channel_is_named_in_every_statement() {
        for f in [Flavor::Mariadb, Flavor::Mysql] {
            for s in remove(f)
                .iter()
                .chain(&apply(f, "relay-bin-archive.000001")[2..])
            {
                assert!(s.text.contains("'archive'"), "{}", s.text);
            }
        }
        assert!(
            apply(Flavor::Mysql, "x")[2]
                .text
                .contains("RELAY_LOG_FILE='x'")
        );
    }
}
