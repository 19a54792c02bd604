//! The primary's side of declared databases, users and grants: read what
//! the server holds, plan each object (`cnmysql_core::sql_objects`) and
//! run its statements. Databases and users first; then what the server
//! holds is read again, so that a grant finds the user made just before.

use std::collections::BTreeSet;

use crate::sql;
use cnmysql_control::contract::{SqlObject, SqlObjectResult};
use cnmysql_core::sql_objects::{Observed, ObservedUser, ledger, plan};

use super::*;

/// Make this primary hold `objects`; what was done for each. Refused
/// unless this instance is the writable primary. It reads the role and the
/// connection from the link and keeps no state of its own.
pub(super) async fn reconcile(
    link: &super::link::Link,
    mut objects: Vec<SqlObject>,
) -> anyhow::Result<Vec<SqlObjectResult>> {
    if link.role() != Some(Desired::Primary) {
        anyhow::bail!("{} is not the primary", link.cfg.instance);
    }
    let pool = link
        .pool()
        .ok_or_else(|| anyhow::anyhow!("the server is not running"))?;
    let mut conn = pool.get_conn().await?;
    let read_only: i64 = conn.query_first("SELECT @@read_only").await?.unwrap_or(1);
    anyhow::ensure!(read_only == 0, "{} is not writable yet", link.cfg.instance);
    objects.sort_by_key(|o| o.declared.order());
    let mut observed = observe(&mut conn).await?;
    let mut read_after_users = false;
    let mut ledger_there = !observed.ledger_missing;
    let mut out = Vec::new();
    for o in objects {
        if o.declared.order() >= 2 && !read_after_users {
            observed = observe(&mut conn).await?;
            read_after_users = true;
        }
        let r = carry_out(&mut conn, &o, &observed, &mut ledger_there).await;
        if !r.applied.is_empty() || r.error.is_some() || r.note.is_some() {
            tracing::info!(
                object = %r.key,
                statements = ?r.applied,
                error = r.error.as_deref().unwrap_or(""),
                note = r.note.as_deref().unwrap_or(""),
                "declared object reconciled"
            );
        }
        out.push(r);
    }
    Ok(out)
}

/// Plan one object (the core refuses what no declaration may do, whoever
/// asked) and run its statements; a failed one runs the plan's undo.
async fn carry_out(
    conn: &mut mysql_async::Conn,
    o: &SqlObject,
    observed: &Observed,
    ledger_there: &mut bool,
) -> SqlObjectResult {
    let mut r = SqlObjectResult {
        key: o.key.clone(),
        ..Default::default()
    };
    let planned = match plan(&o.declared, observed) {
        Ok(p) => p,
        Err(why) => {
            if why.starts_with("refused") {
                tracing::warn!(object = %o.key, reason = %why, "declared object refused");
            }
            r.error = Some(why);
            return r;
        }
    };
    if !planned.run.is_empty() && !*ledger_there {
        if let Err(e) = sql::exec_all(conn, &ledger::setup()).await {
            r.error = Some(format!("cannot make the ledger {}: {e}", ledger::table()));
            return r;
        }
        // A cluster made before the install's grants to everyone were
        // taken away at bootstrap loses them here (binary-logged).
        if let Err(e) = crate::bootstrap::revoke_grants_to_everyone(conn).await {
            tracing::warn!(error = %e, "grants to everyone could not be read");
        }
        *ledger_there = true;
    }
    r.note = planned.note;
    for s in &planned.run {
        if let Err(e) = conn.query_drop(&s.text).await {
            r.error = Some(format!("{}: {e}", s.shown()));
            if let Err(u) = sql::exec_all(conn, &planned.undo).await {
                tracing::warn!(object = %o.key, error = %u, "undoing a failed declaration failed");
            }
            break;
        }
        r.applied.push(s.shown().to_string());
    }
    r
}

/// A row of `mysql.user`: user, host, ssl_type, issuer, subject and the
/// four limits.
type UserRow = (String, String, String, String, String, u64, u64, u64, u64);

/// What the server holds of databases, users and privileges.
async fn observe(conn: &mut mysql_async::Conn) -> anyhow::Result<Observed> {
    let mut o = Observed::default();
    let dbs: Vec<(String, String, String)> = conn
        .query(
            "SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME \
             FROM information_schema.SCHEMATA",
        )
        .await?;
    for (name, cs, coll) in dbs {
        o.databases.insert(name, (cs, coll));
    }
    let users: Vec<UserRow> = conn
        .query(
            "SELECT User, Host, CAST(ssl_type AS CHAR), CAST(x509_issuer AS CHAR), \
             CAST(x509_subject AS CHAR), max_questions, max_updates, max_connections, \
             max_user_connections FROM mysql.user",
        )
        .await?;
    for (user, host, ssl_type, issuer, subject, q, u, c, uc) in users {
        let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        o.users.insert(
            (user, host),
            ObservedUser {
                ssl_type,
                issuer,
                subject,
                limits: [clamp(q), clamp(u), clamp(c), clamp(uc)],
            },
        );
    }
    let privileges: Vec<(String, String, String, String, String)> = conn
        .query(
            "SELECT GRANTEE, TABLE_SCHEMA, '*', PRIVILEGE_TYPE, IS_GRANTABLE \
             FROM information_schema.SCHEMA_PRIVILEGES \
             UNION ALL SELECT GRANTEE, TABLE_SCHEMA, TABLE_NAME, PRIVILEGE_TYPE, IS_GRANTABLE \
             FROM information_schema.TABLE_PRIVILEGES \
             UNION ALL SELECT GRANTEE, '*', '*', PRIVILEGE_TYPE, IS_GRANTABLE \
             FROM information_schema.USER_PRIVILEGES",
        )
        .await?;
    o.made = match conn
        .query::<(String, String, String), _>(ledger::read_query())
        .await
    {
        Ok(rows) => ledger::made_of(rows),
        // ER_NO_SUCH_TABLE / ER_BAD_DB_ERROR: no declaration made anything yet.
        Err(mysql_async::Error::Server(e)) if e.code == 1146 || e.code == 1049 => {
            o.ledger_missing = true;
            Default::default()
        }
        Err(e) => return Err(e.into()),
    };
    for (grantee, db, table, privilege, grantable) in privileges {
        let Some((user, host)) = split_grantee(&grantee) else {
            continue;
        };
        let e = o
            .privileges
            .entry((user, host, db, table))
            .or_insert_with(|| (BTreeSet::new(), false));
        e.0.insert(privilege);
        e.1 |= grantable == "YES";
    }
    Ok(o)
}

/// `'user'@'host'` as information_schema writes a grantee.
fn split_grantee(g: &str) -> Option<(String, String)> {
    let (u, h) = g.rsplit_once('@')?;
    let unquote = |s: &str| {
        s.strip_prefix('\'')
            .and_then(|s| s.strip_suffix('\''))
            .map(|s| s.replace("''", "'"))
    };
    Some((unquote(u)?, unquote(h)?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_grantee_is_split_into_user_and_host() {
        assert_eq!(
            super::split_grantee("'shop''s'@'10.0.%'"),
            Some(("shop's".into(), "10.0.%".into()))
        );
        assert_eq!(super::split_grantee("nonsense"), None);
    }
}
