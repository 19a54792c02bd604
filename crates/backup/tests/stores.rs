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
    s3_spec_at(&server.endpoint, &server.bucket)
}

fn s3_spec_at(endpoint: &str, bucket: &str) -> (ObjectStore, Secrets) {
    let key = |k: &str| SecretKeyRef {
        name: "store".into(),
        key: k.into(),
    };
    let spec = ObjectStore {
        destination_path: format!("s3://{bucket}/prod/db"),
        endpoint_url: Some(endpoint.to_string()),
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

/// Azure Blob Storage through the same client library, against a real
/// server (Azurite): the account's URL as `endpointURL`, its name and key
/// from the Secret.
#[tokio::test]
async fn a_real_azure_blob_server_holds_what_a_backup_writes_and_refuses_a_wrong_key() {
    use cnmysql_api::backup::AzureCredentials;
    use cnmysql_envtest::azure_blob::{ACCOUNT, ACCOUNT_KEY, BlobServer};
    rustls::crypto::ring::default_provider()
        .install_default()
        .ok();
    let server = BlobServer::start("backups").await.unwrap();
    let key = |k: &str| SecretKeyRef {
        name: "blob".into(),
        key: k.into(),
    };
    let spec = ObjectStore {
        destination_path: format!("azure://{}/prod/db", server.container),
        endpoint_url: Some(server.endpoint.clone()),
        azure_credentials: Some(AzureCredentials {
            storage_account: key("account"),
            storage_key: key("key"),
        }),
        ..Default::default()
    };
    let mut secrets = Secrets::default();
    secrets.insert(key("account"), ACCOUNT.into());
    secrets.insert(key("key"), ACCOUNT_KEY.into());
    let d = open(&spec, &secrets).unwrap();
    exercise(&d).await;
    round_trip(&d).await;
    // Another key: refused, and the error does not hold it.
    let wrong_key = "d3Jvbmcta2V5LXRoYXQtaXMtbm90LXRoZS1hY2NvdW50cy1rZXk=";
    secrets.insert(key("key"), wrong_key.into());
    refused_without_the_secret(&open(&spec, &secrets).unwrap(), wrong_key).await;
}

/// A write with a wrong secret is refused, and the error does not hold
/// the secret.
async fn refused_without_the_secret(d: &Destination, secret: &str) -> String {
    let e = d
        .store
        .put(&d.key("x"), PutPayload::from_static(b"x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(!e.contains(secret), "{e}");
    e
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
    let e = refused_without_the_secret(&open(&spec, &wrong).unwrap(), "not-the-secret-xyz").await;
    assert!(
        e.to_lowercase().contains("signature") || e.contains("403"),
        "{e}"
    );
}

/// 24 MiB of a stream that compresses somewhat (as a data directory
/// does), in 64 KiB chunks.
fn stream_of(
    mb: usize,
) -> (
    Vec<u8>,
    impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Unpin + Send,
) {
    let data: Vec<u8> = (0..mb * 1024 * 1024)
        .map(|i| ((i / 7) % 253) as u8 ^ ((i % 4096 == 0) as u8))
        .collect();
    let chunks: Vec<Result<Bytes, std::io::Error>> = data
        .chunks(64 * 1024)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    (data, futures::stream::iter(chunks))
}

async fn round_trip(d: &Destination) {
    use cnmysql_backup::stored_stream::{fetch, store};
    let (data, body) = stream_of(24);
    let stored = store(d, "base/1/data.mbstream.zst", body).await.unwrap();
    assert_eq!(stored.raw_bytes, data.len() as u64);
    assert!(stored.stored_bytes < stored.raw_bytes / 2, "{stored:?}");
    let mut back = Vec::new();
    assert_eq!(
        fetch(d, &stored, &mut back).await.unwrap(),
        data.len() as u64
    );
    assert!(back == data, "the stream read back differs");
    // Damaged in the store: refused, naming the object.
    let key = object_store::path::Path::from(stored.key.as_str());
    let mut bytes = d
        .store
        .get(&key)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let last = bytes.len() - 100;
    bytes[last] ^= 0xff;
    d.store.put(&key, PutPayload::from(bytes)).await.unwrap();
    let e = fetch(d, &stored, &mut Vec::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(&stored.key), "{e}");
}

#[tokio::test]
async fn a_stream_is_stored_compressed_in_parts_read_back_whole_and_damage_is_caught() {
    rustls::crypto::ring::default_provider()
        .install_default()
        .ok();
    let dir = tempfile::tempdir().unwrap();
    let spec = ObjectStore {
        destination_path: format!("file://{}", dir.path().display()),
        ..Default::default()
    };
    round_trip(&open(&spec, &Secrets::default()).unwrap()).await;
    let server = S3Server::start("streams").await.unwrap();
    let (spec, secrets) = s3_spec(&server);
    round_trip(&open(&spec, &secrets).unwrap()).await;
}

/// A server image may have no certificate store at all (MySQL's, made
/// without the ca-certificates package): a store is still opened, verified
/// against Mozilla's roots compiled in. Run in a child process of this test
/// binary, where `SSL_CERT_FILE` and `SSL_CERT_DIR` name an empty store.
#[test]
fn a_store_opens_on_a_machine_without_a_certificate_store() {
    const CHILD: &str = "CNMYSQL_TEST_NO_CERTIFICATE_STORE";
    let name = "a_store_opens_on_a_machine_without_a_certificate_store";
    if std::env::var_os(CHILD).is_some() {
        rustls::crypto::ring::default_provider()
            .install_default()
            .ok();
        let (spec, secrets) = s3_spec_at("https://s3.example.invalid", "backups");
        if let Err(e) = open(&spec, &secrets) {
            panic!("not opened without a certificate store: {e}");
        }
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let file = empty.path().join("none.pem");
    std::fs::write(&file, "").unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("SSL_CERT_FILE", &file)
        .env("SSL_CERT_DIR", empty.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}
