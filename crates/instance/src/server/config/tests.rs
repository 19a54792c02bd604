use super::*;
use cnmysql_api::DataDurability;

pub fn sample(dir: &Path) -> InstanceConfig {
    InstanceConfig {
        namespace: "prod".into(),
        cluster: "db".into(),
        instance: "db-2".into(),
        ordinal: 2,
        spec: serde_json::from_value(serde_json::json!({
            "instances": 3,
            "mysql": {"parameters": {"max-connections": "500"}}
        }))
        .unwrap(),
        data_dir: dir.join("data"),
        binlog_dir: None,
        run_dir: dir.join("run"),
        template_dir: None,
        tls: TlsPaths::in_dir(&dir.join("tls"), "db-2"),
        secrets: SecretFiles {
            admin_password: dir.join("s/admin"),
            replication_password: dir.join("s/repl"),
            app_password: dir.join("s/app"),
            backup_dir: None,
        },
        programs: Programs {
            mysqld: "/usr/sbin/mariadbd".into(),
            install_db: "/usr/bin/mariadb-install-db".into(),
            backup: Some("/usr/bin/mariadb-backup".into()),
            stream_extract: Some("/usr/bin/mbstream".into()),
            upgrade: None,
            binlog: None,
            client: None,
            dump: None,
            image: None,
        },
        mysql_bind: "127.0.0.1".into(),
        mysql_port: 3307,
        control_bind: "127.0.0.1".into(),
        control_port: 8001,
        peers: BTreeMap::new(),
        shutdown_timeout_secs: 30,
        exit_with_parent: false,
        shared_volumes: false,
        probe_port: None,
    }
}

#[test]
fn owned_settings_win_and_user_settings_apply() {
    let c = sample(Path::new("/x"));
    let cnf = render_mycnf(&c);
    assert!(cnf.contains("server_id = 2\n"));
    assert!(cnf.contains("gtid_strict_mode = ON\n"));
    assert!(cnf.contains("read_only = ON\n"));
    assert!(cnf.contains("max_connections = 500\n"), "{cnf}");
    assert!(cnf.contains("log_slave_updates = ON\n"));
    assert!(cnf.contains("ssl_cert = /x/tls/db-2.crt\n"));
    assert!(cnf.contains("rpl_semi_sync_master_wait_point = AFTER_SYNC\n"));
    assert!(cnf.contains("rpl_semi_sync_slave_kill_conn_timeout = 1\n"));
    assert!(cnf.contains("bind_address = 127.0.0.1\n"));
    assert!(cnf.contains("port = 3307\n"));
    let tmp = format!("tmpdir = {}\n", c.run_dir.join("tmp").display());
    assert!(cnf.contains(&tmp), "each server has its own tmpdir: {cnf}");
}

#[test]
fn binary_logs_go_where_their_directory_is() {
    let mut c = sample(Path::new("/x"));
    let cnf = render_mycnf(&c);
    assert!(cnf.contains("log_bin = mysql-bin\n"), "{cnf}");
    assert_eq!(c.binlog_dir(), c.data_dir);
    c.binlog_dir = Some("/logs/binlog".into());
    let cnf = render_mycnf(&c);
    assert!(cnf.contains("log_bin = /logs/binlog/mysql-bin\n"), "{cnf}");
    assert!(
        cnf.contains("log_bin_index = /logs/binlog/mysql-bin.index\n"),
        "{cnf}"
    );
}

#[test]
fn mysqld_reads_no_file_a_statement_names_on_either_flavour() {
    let mut c = sample(Path::new("/x"));
    let cnf = render_mycnf(&c);
    let dir = c.secure_files_dir().display().to_string();
    assert!(
        cnf.contains(&format!("secure_file_priv = {dir}\n")),
        "{cnf}"
    );
    // Not even when a Cluster's parameters ask.
    c.spec
        .mysql
        .parameters
        .insert("secure-file-priv".into(), "".into());
    assert!(render_mycnf(&c).contains(&format!("secure_file_priv = {dir}\n")));
    c.spec.mysql.flavor = Flavor::Mysql;
    assert!(render_mycnf(&c).contains("secure_file_priv = NULL\n"));
}

#[test]
fn mysql_flavour_holds_super_read_only() {
    let mut c = sample(Path::new("/x"));
    c.spec.mysql.flavor = Flavor::Mysql;
    let cnf = render_mycnf(&c);
    assert!(cnf.contains("super_read_only = ON\n"));
    assert!(cnf.contains("gtid_mode = ON\n"));
    assert!(!cnf.contains("gtid_strict_mode"));
    // MySQL 9 names: no MariaDB-only or removed settings.
    assert!(
        cnf.contains("plugin_load_add = mysql_clone.so;semisync_source.so;semisync_replica.so\n")
    );
    assert!(cnf.contains("rpl_semi_sync_source_wait_point = AFTER_SYNC\n"));
    assert!(cnf.contains("secure_file_priv = NULL\n"));
    assert!(cnf.contains("replica_net_timeout = 10\n"));
    for gone in [
        "slave_net_timeout",
        "innodb_log_file_size",
        "rpl_semi_sync_master",
        "binlog_format",
    ] {
        assert!(!cnf.contains(gone), "{gone} in {cnf}");
    }
}

#[test]
fn the_server_itself_never_falls_back() {
    // `required` never falls back; with `preferred` the primary's
    // manager does, holding the lease (core semisync::fall_back).
    let mut c = sample(Path::new("/x"));
    c.spec.mysql.semi_sync.enabled = true;
    c.spec.mysql.semi_sync.timeout_millis = 1000;
    let never = cnmysql_core::semisync::NEVER_FALL_BACK_MS;
    assert!(render_mycnf(&c).contains(&format!("rpl_semi_sync_master_timeout = {never}\n")));
    assert!(render_mycnf(&c).contains("rpl_semi_sync_master_wait_no_slave = ON\n"));
    c.spec.mysql.semi_sync.data_durability = DataDurability::Required;
    assert!(render_mycnf(&c).contains(&format!("rpl_semi_sync_master_timeout = {never}\n")));
}
