//! A local copy of a binlog archive, kept up to date a refresh at a time:
//! each refresh lists the store, reads every run's description and head
//! again (they are small, and a head moves), and fetches only the pieces
//! it has not fetched before (pieces never change once stored). Each piece
//! is checked (a damaged one is refused, named) and written at its offset
//! in a local copy of its file, sparse where a run did not start at the
//! file's beginning. Recovery reads a whole archive with one refresh; a
//! replica cluster that follows an archive refreshes as it goes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use futures::TryStreamExt;
use object_store::ObjectStoreExt;

use crate::archive::{self, Head, Object, PieceIndex, Run};
use crate::destination::Destination;
use crate::recovery_plan::RunArchive;

/// The local copy under `dir/<run>/<file>`, and what it holds.
pub struct ArchiveMirror {
    dir: PathBuf,
    /// Every piece fetched, by its key, with its run and index.
    pieces: BTreeMap<String, (String, PieceIndex)>,
}

impl ArchiveMirror {
    pub fn new(dir: &Path) -> Self {
        ArchiveMirror {
            dir: dir.to_path_buf(),
            pieces: BTreeMap::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// List the store, fetch what is new, and return every run as the
    /// store holds it now (pieces it no longer lists are forgotten).
    pub async fn refresh(&mut self, dest: &Destination) -> anyhow::Result<Vec<RunArchive>> {
        let prefix = dest.key(archive::BINLOGS);
        let objects: Vec<object_store::ObjectMeta> =
            dest.store.list(Some(&prefix)).try_collect().await?;
        let base = dest.prefix.as_ref().to_string();
        let mut runs: BTreeMap<String, RunArchive> = BTreeMap::new();
        let mut listed = BTreeSet::new();
        for o in &objects {
            let full = o.location.as_ref();
            let rel = full
                .strip_prefix(&base)
                .map(|r| r.trim_start_matches('/'))
                .unwrap_or(full);
            match archive::parse_key(rel) {
                Some(Object::Run { run }) => {
                    let r: Run = read_json(dest, &o.location).await?;
                    entry(&mut runs, run).run = r;
                }
                Some(Object::Head { run }) => {
                    let h: Head = read_json(dest, &o.location).await?;
                    entry(&mut runs, run).head = Some(h);
                }
                Some(Object::Piece {
                    run,
                    file,
                    start,
                    end,
                }) => {
                    listed.insert(full.to_string());
                    if !self.pieces.contains_key(full) {
                        let index = self
                            .fetch(dest, &o.location, &run, &file, start, end)
                            .await?;
                        self.pieces.insert(full.to_string(), (run, index));
                    }
                }
                None => {}
            }
        }
        self.pieces.retain(|k, _| listed.contains(k));
        for (run, index) in self.pieces.values() {
            match runs.get_mut(run) {
                Some(r) => r.pieces.push(index.clone()),
                None => anyhow::bail!(
                    "binlog pieces of run {run} are in {} but its run.json is not",
                    dest.path
                ),
            }
        }
        Ok(runs
            .into_values()
            .filter(|r| !r.run.run.is_empty())
            .collect())
    }

    /// Fetch one piece, check it, write it at its place; its index.
    async fn fetch(
        &self,
        dest: &Destination,
        loc: &object_store::path::Path,
        run: &str,
        file: &str,
        start: u64,
        end: u64,
    ) -> anyhow::Result<PieceIndex> {
        let bytes = dest.store.get(loc).await?.bytes().await?;
        let piece = archive::decode(loc.as_ref(), &bytes, Some((file, start, end)))
            .map_err(anyhow::Error::msg)?;
        let path = self.dir.join(run).join(file);
        std::fs::create_dir_all(path.parent().unwrap_or(&self.dir))?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        f.seek(SeekFrom::Start(start))?;
        f.write_all(&piece.bytes)?;
        Ok(piece.index)
    }

    /// Remove the local copies of files their run has rotated away from
    /// (a follower has applied them; their indexes stay, so they are not
    /// fetched again). The newest file of each run stays whole: later
    /// pieces of it need its header.
    pub fn prune_closed_files(&self, runs: &[RunArchive]) {
        for r in runs {
            let newest = r.pieces.iter().map(|p| p.file.as_str()).max();
            let closed: BTreeSet<&str> = r
                .pieces
                .iter()
                .map(|p| p.file.as_str())
                .filter(|f| Some(*f) != newest)
                .collect();
            for file in closed {
                std::fs::remove_file(self.dir.join(&r.run.run).join(file)).ok();
            }
        }
    }

    /// Forget everything and remove the local copy (the next refresh
    /// fetches the whole archive again).
    pub fn clear(&mut self) -> std::io::Result<()> {
        self.pieces.clear();
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(
    dest: &Destination,
    loc: &object_store::path::Path,
) -> anyhow::Result<T> {
    let bytes = dest.store.get(loc).await?.bytes().await?;
    serde_json::from_slice(&bytes).map_err(|e| anyhow::anyhow!("{loc} cannot be read: {e}"))
}

/// The run named `run`, made empty if it is new.
fn entry(runs: &mut BTreeMap<String, RunArchive>, run: String) -> &mut RunArchive {
    runs.entry(run).or_insert_with(|| RunArchive {
        run: Run {
            run: String::new(),
            instance: String::new(),
            flavor: cnmysql_api::Flavor::Mariadb,
            server: String::new(),
            started_at: jiff::Timestamp::UNIX_EPOCH,
            first_file: String::new(),
            start_position: String::new(),
            start_state: String::new(),
        },
        pieces: Vec::new(),
        head: None,
    })
}
