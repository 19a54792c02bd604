//! MySQL's applier account: another cluster's history (a replica
//! cluster's source, a binlog archive) is applied with its privileges,
//! never the server's own.

use mysql_async::prelude::*;

use crate::sql;
use cnmysql_core::flavor;

/// MySQL: the applier account on this server alone (not binary-logged).
/// The server is read-only throughout: super_read_only is lifted for the
/// account statements only, read_only stays on.
pub(super) async fn make_applier(conn: &mut mysql_async::Conn) -> anyhow::Result<()> {
    conn.query_drop("SET SESSION sql_log_bin = 0").await?;
    conn.query_drop("SET GLOBAL super_read_only = OFF").await?;
    let made = sql::exec_all(conn, &flavor::applier_account()).await;
    conn.query_drop("SET GLOBAL super_read_only = ON").await?;
    conn.query_drop("SET SESSION sql_log_bin = 1").await?;
    made
}
