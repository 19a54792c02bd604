//! A stream stored compressed: what a base backup (a `mariadb-backup
//! --stream=mbstream` or a cloned data directory) becomes in the store.
//! Compressed with zstd as it arrives and written in parts (a multipart
//! upload), so nothing is staged on disk and memory stays bounded; hashed
//! as stored so a corrupted object is caught when it is read back.

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use object_store::{ObjectStoreExt, WriteMultipart};
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::destination::Destination;

/// Parts of a multipart upload (S3 wants at least 5 MiB but the last).
pub const PART_BYTES: usize = 16 * 1024 * 1024;
/// At most this many parts in flight at once.
pub const PARTS_IN_FLIGHT: usize = 4;
/// zstd level: fast, and most of a datadir's gain.
pub const LEVEL: i32 = 3;

/// What was stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Its key in the store.
    pub key: String,
    /// Bytes of the stream as it came.
    pub raw_bytes: u64,
    /// Bytes stored (compressed).
    pub stored_bytes: u64,
    /// SHA-256 of the stored (compressed) bytes.
    pub sha256: String,
}

/// Store `body` compressed at `name` under the destination. Nothing is
/// left behind when it fails: the multipart upload is aborted.
pub async fn store<S, E>(dest: &Destination, name: &str, body: S) -> anyhow::Result<Stored>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin + Send,
    E: Into<std::io::Error>,
{
    let key = dest.key(name);
    let raw = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = {
        let raw = raw.clone();
        body.map_err(Into::into).inspect_ok(move |b| {
            raw.fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
        })
    };
    let reader = tokio_util::io::StreamReader::new(counted);
    let mut compressed = async_compression::tokio::bufread::ZstdEncoder::with_quality(
        reader,
        async_compression::Level::Precise(LEVEL),
    );
    let upload = dest.store.put_multipart(&key).await?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    let mut hasher = sha2::Sha256::new();
    let mut stored = 0u64;
    let mut buf = vec![0u8; 1024 * 1024];
    let result: anyhow::Result<()> = async {
        loop {
            let n = compressed.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            stored += n as u64;
            writer.wait_for_capacity(PARTS_IN_FLIGHT).await?;
            writer.write(&buf[..n]);
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        let _ = writer.abort().await;
        return Err(e.context(format!("storing {key} in {}", dest.path)));
    }
    writer.finish().await?;
    Ok(Stored {
        key: key.to_string(),
        raw_bytes: raw.load(std::sync::atomic::Ordering::Relaxed),
        stored_bytes: stored,
        sha256: hex::encode(hasher.finalize()),
    })
}

/// Read back what [`store`] stored, decompressed, into `sink`; refused
/// when the stored bytes do not hash to `sha256` (nothing trusted is
/// written past the point the damage could be seen: the caller discards
/// `sink` on error). The bytes written.
pub async fn fetch(
    dest: &Destination,
    stored: &Stored,
    sink: &mut (impl AsyncWrite + Unpin),
) -> anyhow::Result<u64> {
    let key = object_store::path::Path::from(stored.key.as_str());
    let hasher = std::sync::Arc::new(std::sync::Mutex::new(sha2::Sha256::new()));
    let body = {
        let hasher = hasher.clone();
        dest.store
            .get(&key)
            .await?
            .into_stream()
            .map_err(std::io::Error::other)
            .inspect_ok(move |b| hasher.lock().expect("hasher").update(b))
    };
    let reader = tokio_util::io::StreamReader::new(body);
    let mut plain = async_compression::tokio::bufread::ZstdDecoder::new(reader);
    let written = tokio::io::copy(&mut plain, sink)
        .await
        .map_err(|e| anyhow::anyhow!("{} in {} cannot be read back: {e}", stored.key, dest.path))?;
    sink.flush().await?;
    let got = hex::encode(hasher.lock().expect("hasher").clone().finalize());
    anyhow::ensure!(
        got == stored.sha256,
        "{} in {} is damaged: its bytes hash to {got}, it was stored as {}",
        stored.key,
        dest.path,
        stored.sha256
    );
    Ok(written)
}
