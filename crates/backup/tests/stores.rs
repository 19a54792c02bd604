//! Destinations against real stores: a directory (`file://`) and a real
//! S3-compatible server (SeaweedFS's `weed mini`, see
//! `cnmysql_envtest::object_store`): objects written whole and in parts,
//! read whole and by range, listed under the Cluster's prefix only,
//! deleted; wrong credentials refused without the secret in the error.

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};

use cnmysql_api::backup::{ObjectStore, S3Credentials, SecretKeyRef};
use cnmysql_backup::destination::{Destination, Secrets, open};
use cnmysql_envtest::object_store::{ACCESS_KEY_ID, S3Server, SECRET_ACCESS_KEY};

/// What a backup needs of a store, checked on `d`.
async fn exercise(d: &Destination) {
    let store = &d.store;
    // Whole.
    let small = d.key("base/20261124T000000Z/backup.json");
    store
        .put(&small, PutPayload::from_static(b"{\"gtid\":\"0-1-42\"}"))
        .await
        .unwrap();
    let got = store.get(&small).await.unwrap().bytes().await.unwrap();
    assert_eq!(got, Bytes::from_static(b"{\"gtid\":\"0-1-42\"}"));
    // In parts (as a streamed base backup is): 12 MiB in 5 MiB parts.
    let big = d.key("base/20261124T000000Z/data.mbstream.zst");
    let upload = store.put_multipart(&big).await.unwrap();
    let mut w = WriteMultipart::new_with_chunk_size(upload, 5 * 1024 * 1024);
    let block: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    for _ in 0..12 {
        w.write(&block);
    }
    w.finish().await.unwrap();
    let meta = store.head(&big).await.unwrap();
    assert_eq!(meta.size, 12 * 1024 * 1024);
    // By range.
    let part = store
        .get_range(&big, 5 * 1024 * 1024 + 10..5 * 1024 * 1024 + 20)
        .await
        .unwrap();
    let want: Vec<u8> = (10..20).map(|i| (i % 251) as u8).collect();
    assert_eq!(&part[..], &want[..]);
    // Listed under this prefix only.
    let mut names: Vec<String> = store
        .list(Some(&d.prefix))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    names.sort();
    let mut want = [big.to_string(), small.to_string()];
    want.sort();
    assert_eq!(names, want);
    // Deleted.
    store.delete(&small).await.unwrap();
    assert!(store.head(&small).await.is_err());
}

#[tokio::test]
async fn a_directory_holds_what_a_backup_writes() {
    let dir = tempfile::tempdir().unwrap();
    let spec = ObjectStore {
        destination_path: format!("file://{}/backups", dir.path().display()),
        ..Default::default()
    };
    let d = open(&spec, &Secrets::default()).unwrap();
    exercise(&d).await;
}

fn s3_spec(server: &S3Server) -> (ObjectStore, Secrets) {
    let key = |k: &str| SecretKeyRef {
        name: "store".into(),
        key: k.into(),
    };
    let spec = ObjectStore {
        destination_path: format!("s3://{}/prod/db", server.bucket),
        endpoint_url: Some(server.endpoint.clone()),
        path_style: true,
        s3_credentials: Some(S3Credentials {
            access_key_id: key("ACCESS_KEY_ID"),
            secret_access_key: key("SECRET_ACCESS_KEY"),
            session_token: None,
        }),
        ..Default::default()
    };
    let mut secrets = Secrets::default();
    secrets.insert(key("ACCESS_KEY_ID"), ACCESS_KEY_ID.into());
    secrets.insert(key("SECRET_ACCESS_KEY"), SECRET_ACCESS_KEY.into());
    (spec, secrets)
}

#[tokio::test]
async fn a_real_s3_server_holds_what_a_backup_writes_and_refuses_a_wrong_key() {
    rustls::crypto::ring::default_provider()
        .install_default()
        .ok();
    let server = S3Server::start("backups").await.unwrap();
    let (spec, secrets) = s3_spec(&server);
    let d = open(&spec, &secrets).unwrap();
    exercise(&d).await;
    // Another secret: refused, and the error does not hold it.
    let mut wrong = Secrets::default();
    let c = spec.s3_credentials.clone().unwrap();
    wrong.insert(c.access_key_id, ACCESS_KEY_ID.into());
    wrong.insert(c.secret_access_key, "not-the-secret-xyz".into());
    let d = open(&spec, &wrong).unwrap();
    let e = d
        .store
        .put(&d.key("x"), PutPayload::from_static(b"x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(!e.contains("not-the-secret-xyz"), "{e}");
    assert!(
        e.to_lowercase().contains("signature") || e.contains("403"),
        "{e}"
    );
}
