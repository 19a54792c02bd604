//! A MariaDB base backup streamed into a real S3 server and back (issue
//! 23, the storage half): the primary's `mariadb-backup --stream=mbstream`
//! served by its manager (`GET /backup`, as a new replica's clone takes
//! it) is stored compressed in parts in SeaweedFS, read back, unpacked
//! with `mbstream` and prepared with `mariadb-backup --prepare`; it holds
//! the GTID position it is consistent with, at least the last row
//! written before it began, and that position is read from the stream as
//! it passes (`cnmysql_backup::mbstream`), the same as unpacked. And on
//! both flavours: a backup taken from a replica past an unreachable
//! instance, with its progress reported.

mod common;

use std::path::PathBuf;

use cnmysql_api::backup::{ObjectStore, S3Credentials, SecretKeyRef};
use cnmysql_backup::destination::{Secrets, open};
use cnmysql_backup::stored_stream::{fetch, store};
use cnmysql_control::client::ControlClient;
use cnmysql_envtest::object_store::{ACCESS_KEY_ID, S3Server, SECRET_ACCESS_KEY};
use common::*;
use futures::TryStreamExt;
use http_body_util::BodyExt;
use mysql_async::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_base_backup_goes_to_s3_compressed_and_comes_back_preparable() {
    if flavor() != Flavor::Mariadb {
        eprintln!("MariaDB's mbstream only: the MySQL flavour copies with the clone plugin");
        return;
    }
    rustls::crypto::ring::default_provider()
        .install_default()
        .ok();
    let c = LocalCluster::start("bkp", &manifest("bkp", 1));
    let primary = c.current_primary();
    {
        let mut a = c.admin(&primary).await;
        a.query_drop("CREATE DATABASE IF NOT EXISTS shop")
            .await
            .unwrap();
        a.query_drop("CREATE TABLE shop.orders (id INT PRIMARY KEY, note VARCHAR(200))")
            .await
            .unwrap();
        for i in 0..200 {
            a.exec_drop("INSERT INTO shop.orders VALUES (?, REPEAT('x', 150))", (i,))
                .await
                .unwrap();
        }
    }
    let before: String = c
        .admin(&primary)
        .await
        .query_first("SELECT @@gtid_binlog_pos")
        .await
        .unwrap()
        .unwrap();

    // The stream, as the operator would take it.
    let dir = cnmysql_local::state::StateDir::new(PathBuf::from(c.state_arg()));
    let client = ControlClient::new(dir.operator_material().unwrap().client_config().unwrap())
        .expecting(&primary);
    let resp = client
        .send(
            "127.0.0.1",
            c.control_port(&primary),
            "GET",
            "/backup",
            &[],
            None,
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Read as it passes: what the backup is consistent with.
    let scanner = std::sync::Arc::new(std::sync::Mutex::new(
        cnmysql_backup::mbstream::Scanner::new(),
    ));
    let body = {
        let scanner = scanner.clone();
        resp.into_body()
            .into_data_stream()
            .map_err(std::io::Error::other)
            .inspect_ok(move |b| scanner.lock().unwrap().feed(b))
    };

    let server = S3Server::start("backups").await.unwrap();
    let key = |k: &str| SecretKeyRef {
        name: "store".into(),
        key: k.into(),
    };
    let spec = ObjectStore {
        destination_path: "s3://backups/prod/bkp".into(),
        endpoint_url: Some(server.endpoint.clone()),
        path_style: true,
        s3_credentials: Some(S3Credentials {
            access_key_id: key("id"),
            secret_access_key: key("secret"),
            session_token: None,
        }),
        ..Default::default()
    };
    let mut secrets = Secrets::default();
    secrets.insert(key("id"), ACCESS_KEY_ID.into());
    secrets.insert(key("secret"), SECRET_ACCESS_KEY.into());
    let d = open(&spec, &secrets).unwrap();
    let stored = store(&d, "base/first/data.mbstream.zst", Box::pin(body))
        .await
        .unwrap();
    eprintln!(
        "stored {} raw bytes as {} ({:.1}x)",
        stored.raw_bytes,
        stored.stored_bytes,
        stored.raw_bytes as f64 / stored.stored_bytes as f64
    );
    assert!(stored.stored_bytes < stored.raw_bytes);

    // Back: unpacked and prepared as a recovery would.
    let out = tempfile::tempdir().unwrap();
    let stream_file = out.path().join("data.mbstream");
    let mut f = tokio::fs::File::create(&stream_file).await.unwrap();
    let n = fetch(&d, &stored, &mut f).await.unwrap();
    assert_eq!(n, stored.raw_bytes);
    drop(f);
    let target = out.path().join("data");
    std::fs::create_dir_all(&target).unwrap();
    let st = std::process::Command::new("mbstream")
        .args(["-x", "-C"])
        .arg(&target)
        .stdin(std::fs::File::open(&stream_file).unwrap())
        .status()
        .unwrap();
    assert!(st.success(), "mbstream -x");
    let prep = std::process::Command::new("mariadb-backup")
        .args(["--prepare", "--target-dir"])
        .arg(&target)
        .output()
        .unwrap();
    assert!(
        prep.status.success(),
        "prepare: {}",
        String::from_utf8_lossy(&prep.stderr)
    );
    assert!(target.join("shop/orders.ibd").exists());
    let gtid = cnmysql_instance::clone::backup_gtid(&target).unwrap();
    assert_eq!(
        scanner.lock().unwrap().gtid().as_deref(),
        Ok(gtid.as_str()),
        "the GTID read from the passing stream is the unpacked backup's"
    );
    eprintln!("consistent with {gtid} (the primary was at {before} before it began)");
    let seq = |g: &str| -> u64 { g.rsplit('-').next().unwrap().parse().unwrap() };
    assert!(seq(&gtid) >= seq(&before), "{gtid} < {before}");
    c.destroy();
}

/// The replica a backup is taken from, as both platforms take it: an
/// instance that cannot be reached gives way to the next in the order
/// `cnmysql_core::backup_source` gives, and progress is reported while the
/// copy streams (bytes read of the instance's data size).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_skips_an_unreachable_instance_and_reports_progress() {
    rustls::crypto::ring::default_provider()
        .install_default()
        .ok();
    let c = LocalCluster::start("bkq", &manifest("bkq", 2));
    let primary = c.current_primary();
    let replica = if primary == "bkq-1" { "bkq-2" } else { "bkq-1" };
    let dir = cnmysql_local::state::StateDir::new(PathBuf::from(c.state_arg()));
    let client = ControlClient::new(dir.operator_material().unwrap().client_config().unwrap());
    let store = tempfile::tempdir().unwrap();
    let spec = ObjectStore {
        destination_path: format!("file://{}", store.path().display()),
        ..Default::default()
    };
    let d = open(&spec, &Secrets::default()).unwrap();
    let control = |name: &str| c.control_port(name);
    let sources = [
        cnmysql_control::base_backup::Source {
            instance: "bkq-9".into(),
            host: "127.0.0.1".into(),
            port: cnmysql_envtest::free_port(),
            why: "first choice".into(),
        },
        cnmysql_control::base_backup::Source {
            instance: replica.into(),
            host: "127.0.0.1".into(),
            port: control(replica),
            why: "second choice".into(),
        },
    ];
    let reports = std::sync::Mutex::new(Vec::new());
    let taken = cnmysql_control::base_backup::take(
        &client,
        match flavor() {
            Flavor::Mariadb => cnmysql_api::Flavor::Mariadb,
            Flavor::Mysql => cnmysql_api::Flavor::Mysql,
        },
        &sources,
        "b1",
        &d,
        std::time::Duration::from_millis(20),
        |p| {
            reports.lock().unwrap().push(p);
            std::future::ready(())
        },
    )
    .await;
    let m = &taken.manifest.record;
    assert_eq!(m.phase, "completed", "{m:?}");
    assert_eq!(m.instance, replica);
    assert!(
        taken.message.contains("bkq-9 cannot be reached")
            && taken
                .message
                .contains(&format!("taken on {replica}: second choice")),
        "{}",
        taken.message
    );
    let reports = reports.into_inner().unwrap();
    let last = reports
        .last()
        .expect("progress was reported while it streamed");
    assert_eq!(last.source, replica);
    assert!(
        last.bytes > 0 && last.bytes <= m.raw_bytes,
        "{last:?} of {m:?}"
    );
    let expected = last
        .expected_bytes
        .expect("the instance says its data size");
    assert!(expected > 0, "{last:?}");
    assert!(
        last.describe()
            .starts_with(&format!("backup from {replica}: "))
    );
    c.destroy();
}
