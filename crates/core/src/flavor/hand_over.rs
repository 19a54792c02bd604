//! The statements of a MySQL hand-over whose final point does not depend
//! on timing (`semisync::acks_closed`): close the old primary's
//! acknowledgements, read where its binary log ends, and wait on the
//! target until it applied up to there.

use cnmysql_api::Flavor;

use super::{Sql, quote};

/// Close a handing-over primary's acknowledgements
/// (`semisync::ACKS_CLOSED_COUNT`); MariaDB has no way to.
pub fn close_acks(flavor: Flavor) -> Option<Sql> {
    (flavor == Flavor::Mysql).then(|| {
        Sql::new(format!(
            "SET GLOBAL rpl_semi_sync_source_wait_for_replica_count = {}",
            crate::semisync::ACKS_CLOSED_COUNT
        ))
    })
}

/// Where the binary log ends now (file, position): what a replica's
/// receiver may be sent up to.
pub fn binlog_end(flavor: Flavor) -> Sql {
    Sql::new(match flavor {
        Flavor::Mariadb => "SHOW MASTER STATUS",
        Flavor::Mysql => "SHOW BINARY LOG STATUS",
    })
}

/// Wait until the replica has received and applied its source's binary
/// log up to `at` (seconds; -1 = timeout, NULL = not replicating).
pub fn wait_for_source_point(
    flavor: Flavor,
    at: &crate::status::BinlogPoint,
    timeout_secs: f64,
) -> Sql {
    let f = match flavor {
        Flavor::Mariadb => "MASTER_POS_WAIT",
        Flavor::Mysql => "SOURCE_POS_WAIT",
    };
    Sql::new(format!(
        "SELECT {f}({}, {}, {timeout_secs})",
        quote(&at.file),
        at.position
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_flavour_sends_what_a_hand_over_needs() {
        assert_eq!(
            close_acks(Flavor::Mysql).unwrap().text,
            "SET GLOBAL rpl_semi_sync_source_wait_for_replica_count = 65535"
        );
        assert!(
            close_acks(Flavor::Mariadb).is_none(),
            "MariaDB has no count"
        );
        assert_eq!(binlog_end(Flavor::Mysql).text, "SHOW BINARY LOG STATUS");
        assert_eq!(binlog_end(Flavor::Mariadb).text, "SHOW MASTER STATUS");
        let at = crate::status::BinlogPoint {
            file: "mysql-bin.000001".into(),
            position: 26_563,
        };
        assert_eq!(
            wait_for_source_point(Flavor::Mysql, &at, 0.2).text,
            "SELECT SOURCE_POS_WAIT('mysql-bin.000001', 26563, 0.2)"
        );
    }
}
