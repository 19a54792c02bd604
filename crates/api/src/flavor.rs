//! The server family a Cluster runs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// MySQL 8 or Percona Server for MySQL 8 (GTID sets, XtraBackup).
    Mysql,
    /// MariaDB 10.11 or later (domain-server-seq GTIDs, mariadb-backup).
    #[default]
    Mariadb,
}

impl Flavor {
    pub fn as_str(self) -> &'static str {
        match self {
            Flavor::Mysql => "mysql",
            Flavor::Mariadb => "mariadb",
        }
    }
}
