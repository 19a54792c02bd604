//! Typed calls of the control API that take a body and answer text.

use crate::client::ControlClient;
use crate::contract::{self, SemiSync};

/// `POST /semisync`: set the primary's semi-sync settings; the answer.
pub async fn set_semi_sync(
    client: &ControlClient,
    host: &str,
    port: u16,
    settings: &SemiSync,
) -> anyhow::Result<String> {
    let body = serde_json::to_string(settings)?;
    let json = [("content-type", "application/json".to_string())];
    let (code, text) = client
        .post(host, port, contract::SEMISYNC, &json, body.into())
        .await?;
    anyhow::ensure!(code == 200, "refused ({code}): {text}");
    Ok(text)
}

/// `POST /instance/mysql/upgrade`: bring the system tables to the version
/// the server runs (MariaDB: `mariadb-upgrade`); the answer.
pub async fn upgrade_system_tables(
    client: &ControlClient,
    host: &str,
    port: u16,
) -> anyhow::Result<String> {
    let path = contract::UPGRADE_SYSTEM_TABLES;
    let (code, text) = client
        .post(host, port, path, &[], Vec::new().into())
        .await?;
    anyhow::ensure!(code == 200, "refused ({code}): {text}");
    Ok(text)
}

/// `POST /instance/sql-objects`: have the primary hold `objects`; what
/// was done for each.
pub async fn reconcile_sql_objects(
    client: &ControlClient,
    host: &str,
    port: u16,
    objects: &[contract::SqlObject],
) -> anyhow::Result<Vec<contract::SqlObjectResult>> {
    let body = serde_json::to_string(objects)?;
    let json = [("content-type", "application/json".to_string())];
    let (code, text) = client
        .post(host, port, contract::SQL_OBJECTS, &json, body.into())
        .await?;
    anyhow::ensure!(code == 200, "refused ({code}): {text}");
    Ok(serde_json::from_str(&text)?)
}
