//! Bootstrapping the first primary of a new Cluster from a server outside
//! the operator (`spec.bootstrap.import`), with the account of the Secret
//! `<cluster>-import-source`. The source is reached and its certificate
//! checked first, so a wrong address, account or CA fails at once with
//! nothing made. Then either MySQL's clone plugin copies the whole server
//! (`clone`), or a private server made empty here loads a consistent dump
//! of the user databases and takes the source's GTID position at the
//! snapshot (`logical`). Either way the copy gets this Cluster's accounts
//! (none of it binary-logged, so the Cluster can go on following the
//! source through `spec.replica`), the result is recorded in the data
//! directory, and the manager starts the server as usual.

use super::*;
use crate::clone_plugin::Donor;
use crate::logical_import;
use crate::private_server::PrivateServer;
use crate::source_account::SourceAccount;
use cnmysql_api::import::{ImportMethod, ImportSpec, SYSTEM_DATABASES, import_secret};
use cnmysql_core::flavor::Sql;

/// Where what an import brought is recorded, in the data directory.
pub const IMPORTED_FILE: &str = "cnmysql_imported.json";

/// What an import brought.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Imported {
    /// `host:port` of the source.
    pub source: String,
    /// `clone` or `logical`.
    pub method: String,
    /// The source's server version.
    pub source_version: String,
    /// The GTID position the copy holds.
    pub gtid: String,
    /// Bytes copied (the clone) or loaded (the dump).
    pub bytes: u64,
    pub millis: u64,
    pub completed_at: String,
    /// A logical import: the accounts its routines, views, triggers and
    /// events run as here (docs/security.md: what a source is trusted with).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub definers: Vec<String>,
}

/// What this instance's data was imported from, when it was.
pub fn imported(data_dir: &std::path::Path) -> Option<Imported> {
    let text = std::fs::read_to_string(data_dir.join(IMPORTED_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

impl<C: ClusterState> Manager<C> {
    pub(super) async fn import_primary(&self, spec: &ImportSpec) -> anyhow::Result<()> {
        let cfg = &self.cfg;
        let src = &spec.source;
        let name = src
            .tls_server_name
            .clone()
            .unwrap_or_else(|| src.host.clone());
        let account =
            SourceAccount::load(cfg, &import_secret(&cfg.cluster), "spec.bootstrap.import")?;
        let address = src.address();
        self.set_phase(
            InstancePhase::Initializing,
            format!("import: reaching {address}"),
        );
        let mut conn = account
            .connect(&src.host, src.port, &name)
            .await
            .map_err(|e| anyhow::anyhow!("import refused, nothing was made: cannot reach {address} as {} over TLS (checked for the name {name}): {e:#}", account.user))?;
        let version: String = conn
            .query_first("SELECT VERSION()")
            .await?
            .unwrap_or_default();
        let databases = if spec.databases.is_empty() {
            user_databases(&mut conn).await?
        } else {
            spec.databases.clone()
        };
        conn.disconnect().await.ok();
        let began = Instant::now();
        let method = spec.method(cfg.flavor());
        let mut definers = Vec::new();
        let (gtid, bytes) = match method {
            ImportMethod::Clone => self.import_by_clone(&account, src, &address).await?,
            ImportMethod::Backup => {
                let donor = Donor {
                    name: name.clone(),
                    host: src.host.clone(),
                    port: spec.donor_port(),
                    user: account.user.clone(),
                    password: account.password.clone(),
                    ca: account.ca.clone(),
                    client: account.client.clone(),
                    token: account.donor_token.clone(),
                };
                self.import_by_backup(&donor, &version).await?
            }
            ImportMethod::Logical => {
                let from = logical_import::Source {
                    host: &src.host,
                    port: src.port,
                    name: &name,
                    account: &account,
                };
                let (gtid, loaded) = self.import_logical(&from, &databases).await?;
                definers = loaded.definers;
                (gtid, loaded.bytes)
            }
        };
        let record = Imported {
            source: address.clone(),
            method: format!("{method:?}").to_lowercase(),
            source_version: version,
            gtid,
            bytes,
            millis: began.elapsed().as_millis() as u64,
            completed_at: jiff::Timestamp::now().to_string(),
            definers,
        };
        tracing::info!(
            source = record.source,
            method = record.method,
            source_version = record.source_version,
            gtid = record.gtid,
            bytes = record.bytes,
            millis = record.millis,
            "imported"
        );
        let how = format!(
            "imported from {address} ({}) at {}",
            record.method, record.gtid
        );
        bootstrap::record_and_mark(cfg, IMPORTED_FILE, &record, &how)
    }

    /// The whole server through the clone plugin; its GTID set and the
    /// bytes copied.
    async fn import_by_clone(
        &self,
        account: &SourceAccount,
        src: &cnmysql_api::replica::ReplicaSource,
        address: &str,
    ) -> anyhow::Result<(String, u64)> {
        self.set_phase(InstancePhase::Cloning, format!("import: cloning {address}"));
        let donor = Donor {
            name: address.to_string(),
            host: src.host.clone(),
            port: src.port,
            user: account.user.clone(),
            password: account.password.clone(),
            ca: account.ca.clone(),
            client: account.client.clone(),
            token: None,
        };
        crate::clone_plugin::clone_from(&self.cfg, &donor, &self.progress).await?;
        let bytes = self.progress_bytes();
        // The copy holds the source's accounts: this Cluster's are set on
        // a private server.
        let server = self.private_server().await?;
        let gtid = self.finish_private(server, Ok(())).await?;
        Ok((gtid, bytes))
    }

    /// The whole server as `mariadb-backup` copies it, streamed by `cnmysql
    /// donor` at the source's host; its GTID set and the bytes copied.
    async fn import_by_backup(
        &self,
        donor: &Donor,
        source_version: &str,
    ) -> anyhow::Result<(String, u64)> {
        let at = format!("{}:{}", donor.host, donor.port);
        let here = self.cfg.programs.server_version().unwrap_or_default();
        if let Some(why) =
            cnmysql_core::upgrade::version::physical_copy_refusal(source_version, &here)
        {
            anyhow::bail!("import refused, nothing was made: {why}; use method: logical");
        }
        self.set_phase(
            InstancePhase::Cloning,
            format!("import: copying {at} with mariadb-backup"),
        );
        let Some(token) = &donor.token else {
            anyhow::bail!(
                "import refused, nothing was made: method backup needs the donor's token under the key {} of the Secret {} (the one `cnmysql donor --token-file` was given)",
                cnmysql_api::replica::DONOR_TOKEN_KEY,
                cnmysql_api::import::import_secret(&self.cfg.cluster)
            );
        };
        let ca = std::fs::read_to_string(&donor.ca)?;
        let client_id = match &donor.client {
            Some((cert, key)) => Some(cnmysql_tls::Identity {
                cert_pem: std::fs::read_to_string(cert)?,
                key_pem: std::fs::read_to_string(key)?,
            }),
            None => None,
        };
        let tls = cnmysql_tls::client_config_trusting(&ca, client_id.as_ref())?;
        let auth = crate::donor::basic_authorization(&donor.user, &donor.password);
        let client = cnmysql_control::client::ControlClient::new(tls)
            .with_connect_timeout(Duration::from_secs(10))
            .expecting(&donor.name);
        let path = cnmysql_control::contract::BACKUP;
        let headers = [
            ("authorization", auth),
            (crate::donor::TOKEN_HEADER, token.clone()),
        ];
        let resp = client
            .send(&donor.host, donor.port, "GET", path, &headers, None)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "import refused, nothing was made: cannot reach the donor at {at} over TLS \
                     (checked for the name {}; is `cnmysql donor` running on the source's host?): {e:#}",
                    donor.name
                )
            })?;
        let copied = crate::clone::receive_backup(&self.cfg, &at, resp, &self.progress).await?;
        let bytes = self.progress_bytes();
        // The copy holds the source's accounts, and a binary log that starts
        // empty: this Cluster's accounts and the history it holds are set on
        // a private server.
        let mut server = self.private_server().await?;
        let f = self.cfg.flavor();
        let adopt = flavor::adopt_history(f, &copied.binlog_state, &copied.position);
        let done = sql::exec_all(&mut server.conn, &adopt).await;
        let gtid = self.finish_private(server, done).await?;
        Ok((gtid, bytes))
    }

    /// `databases` through a dump loaded into a new server; its GTID set
    /// and what was loaded.
    async fn import_logical(
        &self,
        from: &logical_import::Source<'_>,
        databases: &[String],
    ) -> anyhow::Result<(String, logical_import::Loaded)> {
        let cfg = self.cfg.clone();
        self.set_phase(
            InstancePhase::Initializing,
            format!(
                "import: loading {} database(s) from {}:{}",
                databases.len(),
                from.host,
                from.port
            ),
        );
        tokio::task::spawn_blocking(move || bootstrap::prepare_empty_datadir(&cfg)).await??;
        let f = self.cfg.flavor();
        let loaded = if databases.is_empty() {
            logical_import::Loaded::default()
        } else {
            self.load_restricted(from, databases).await?
        };
        // The position the dump states becomes the history.
        let mut server = self.private_server().await?;
        let history = match f {
            Flavor::Mariadb => flavor::adopt_history(f, &loaded.gtid, &loaded.gtid),
            Flavor::Mysql if loaded.gtid.is_empty() => Vec::new(),
            Flavor::Mysql => vec![
                Sql::new("RESET BINARY LOGS AND GTIDS"),
                Sql::new(format!(
                    "SET GLOBAL gtid_purged = {}",
                    flavor::quote(&loaded.gtid)
                )),
            ],
        };
        let done = sql::exec_all(&mut server.conn, &history).await;
        let gtid = self.finish_private(server, done).await?;
        Ok((gtid, loaded))
    }

    /// Load the dump into the empty data directory on a private server
    /// that checks grants and keeps no binary log, as the loader account,
    /// which may touch only `databases`.
    async fn load_restricted(
        &self,
        from: &logical_import::Source<'_>,
        databases: &[String],
    ) -> anyhow::Result<logical_import::Loaded> {
        let cfg = &self.cfg;
        let mut args: Vec<String> = super::replay::server_args(cfg)
            .into_iter()
            .filter(|a| a != "--skip-grant-tables")
            .collect();
        args.push("--skip-log-bin".into());
        let mut server = PrivateServer::start(cfg, args, &cfg.socket()).await?;
        let password = cnmysql_tls::random_password();
        let loaded = async {
            let conn = &mut server.conn;
            sql::exec_all(conn, &flavor::read_only(cfg.flavor(), false)).await?;
            sql::exec_all(
                conn,
                &logical_import::loader_account(cfg.flavor(), databases, &password),
            )
            .await?;
            let mut loaded = logical_import::load(
                cfg,
                from,
                databases,
                &cfg.socket(),
                &password,
                &self.progress,
            )
            .await?;
            loaded.definers = logical_import::definers(conn, databases).await?;
            if !loaded.definers.is_empty() {
                tracing::warn!(
                    definers = ?loaded.definers,
                    "import: the source's routines, views, triggers and events run as these accounts here"
                );
            }
            let drop_loader = Sql::new(format!(
                "DROP USER {}@'localhost'",
                flavor::quote(logical_import::LOADER_USER)
            ));
            sql::exec_all(conn, &[drop_loader]).await?;
            anyhow::Ok(loaded)
        }
        .await;
        match loaded {
            Ok(l) => server.stop().await.map(|()| l),
            Err(e) => {
                let words = server.kill().await;
                anyhow::bail!("import failed: {e:#}; server: {words}")
            }
        }
    }

    /// Bytes the last copy moved, as its progress says.
    fn progress_bytes(&self) -> u64 {
        self.progress
            .lock()
            .unwrap()
            .as_ref()
            .map(|p| p.bytes)
            .unwrap_or(0)
    }

    /// A private server on the data directory (no network, no grant
    /// checks).
    async fn private_server(&self) -> anyhow::Result<PrivateServer> {
        let cfg = &self.cfg;
        PrivateServer::start(cfg, super::replay::server_args(cfg), &cfg.socket()).await
    }

    /// After `done` (what was run on `server`): give the copy this
    /// Cluster's accounts and no replication state, and stop it; the GTID
    /// set it holds.
    async fn finish_private(
        &self,
        mut server: PrivateServer,
        done: anyhow::Result<()>,
    ) -> anyhow::Result<String> {
        let cfg = &self.cfg;
        let result = async {
            done?;
            let conn = &mut server.conn;
            sql::exec_all(conn, &[flavor::reset_replica(cfg.flavor())]).await?;
            conn.query_drop("FLUSH LOCAL PRIVILEGES").await?;
            bootstrap::set_accounts(conn, cfg).await?;
            let held: String = conn
                .query_first(match cfg.flavor() {
                    Flavor::Mariadb => "SELECT @@gtid_binlog_pos",
                    Flavor::Mysql => "SELECT @@gtid_executed",
                })
                .await?
                .unwrap_or_default();
            Ok::<_, anyhow::Error>(held.replace('\n', ""))
        }
        .await;
        match result {
            Ok(held) => server.stop().await.map(|()| held),
            Err(e) => {
                let words = server.kill().await;
                anyhow::bail!("import failed: {e:#}; server: {words}")
            }
        }
    }
}

/// The source's databases but its own system ones. A name the dump could
/// take for something else (an option, a path) refuses the import, naming
/// it: the source chose it, and a list in the spec can leave it out.
async fn user_databases(conn: &mut mysql_async::Conn) -> anyhow::Result<Vec<String>> {
    let all: Vec<String> = conn.query("SHOW DATABASES").await?;
    let user: Vec<String> = all
        .into_iter()
        .filter(|d| !SYSTEM_DATABASES.contains(&d.to_ascii_lowercase().as_str()))
        .collect();
    for d in &user {
        if let Some(why) = cnmysql_api::import::database_problem(d) {
            anyhow::bail!(
                "import refused, nothing was made: the source's database {why}; name the databases to copy in spec.bootstrap.import.databases"
            );
        }
    }
    Ok(user)
}
