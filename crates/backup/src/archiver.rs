//! Continuous binlog archiving: the primary's instance manager reads its
//! server's binary logs as they are written and stores them, a piece at a
//! time, cut at transaction boundaries, so the archive trails commits by
//! about one `interval`.
//!
//! A *run* begins when an instance starts archiving as primary: the server
//! switches to a new binary log file (`FLUSH BINARY LOGS`), and the run
//! starts from the newest file whose contents the archive does not already
//! hold all of — found by walking back from the newest file, comparing each
//! file's transactions with the state the previous run's head recorded. So
//! after a switchover or failover the new primary continues where the
//! archive ends: a little overlap (applied once at recovery), never a gap,
//! never an overwrite (pieces are named by their run).
//!
//! Each step lists the server's binary logs, reads the current file from
//! where the last piece ended, stores the whole transactions found as one
//! piece, then the run's head. A file is left for the next once the server
//! rotated away from it. When the store is unreachable the step fails, the
//! status says why and since when, and the next step starts from the same
//! offset: nothing is skipped, and the backlog goes out in pieces of at
//! most `PIECE_BYTES`.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cnmysql_api::Flavor;
use cnmysql_api::backup::ArchiveStatus;
use cnmysql_gtid::mariadb::{BinlogState, GtidPos};
use cnmysql_gtid::mysql::GtidSet;
use object_store::{ObjectStoreExt, PutPayload};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::watch;

use crate::archive::{self, Head, PieceIndex, Run};
use crate::binlog::{self, Tx, TxId};
use crate::destination::Destination;

/// The most binary log bytes one piece holds.
pub const PIECE_BYTES: usize = 16 * 1024 * 1024;

/// What the server says when a run begins, just after it switched to a new
/// binary log file.
#[derive(Clone, Debug)]
pub struct Begin {
    /// The new (empty) current file.
    pub file: String,
    /// MariaDB `@@gtid_binlog_pos`; MySQL `@@gtid_executed`.
    pub position: String,
    /// MariaDB `@@gtid_binlog_state`; MySQL `@@gtid_executed`.
    pub state: String,
    /// MariaDB `@@server_id`; MySQL `@@server_uuid`.
    pub server: String,
}

/// The server whose binary logs are archived.
pub trait Source: Send + Sync {
    /// Switch to a new binary log file and say where the server stands.
    fn begin(&self) -> impl Future<Output = anyhow::Result<Begin>> + Send;
    /// The binary log files the server has, oldest first.
    fn files(&self) -> impl Future<Output = anyhow::Result<Vec<String>>> + Send;
}

/// The archive's view of a history: what a run holds.
#[derive(Clone, Debug)]
enum Held {
    Mariadb(BinlogState),
    Mysql(GtidSet),
}

impl Held {
    fn parse(flavor: Flavor, s: &str) -> anyhow::Result<Held> {
        Ok(match flavor {
            Flavor::Mariadb => Held::Mariadb(s.parse()?),
            Flavor::Mysql => Held::Mysql(s.parse()?),
        })
    }

    fn holds(&self, id: &TxId) -> bool {
        match (self, id) {
            (Held::Mariadb(st), TxId::Mariadb(g)) => {
                let pos: Result<GtidPos, _> = g.to_string().parse();
                pos.is_ok_and(|p| st.contains_pos(&p))
            }
            (Held::Mysql(set), TxId::Mysql { uuid, tag, gno }) => {
                set.contains_gtid(uuid, tag, *gno)
            }
            _ => false,
        }
    }

    fn record(&mut self, id: &TxId) {
        match (self, id) {
            (Held::Mariadb(st), TxId::Mariadb(g)) => st.record(*g),
            (Held::Mysql(set), TxId::Mysql { uuid, tag, gno }) => {
                let _ = set.insert(uuid, tag, *gno);
            }
            _ => {}
        }
    }

    fn text(&self) -> String {
        match self {
            Held::Mariadb(st) => st.to_string(),
            Held::Mysql(set) => set.to_string(),
        }
    }
}

/// One run in progress.
struct RunState {
    run: String,
    file: String,
    offset: u64,
    checksum_len: Option<usize>,
    /// The file the server switched to when the run began: from it on,
    /// what is archived extends `held`.
    flush_file: String,
    held: Held,
    caught_up: bool,
    last: Option<Tx>,
    complete_until_us: i64,
    head_written_us: i64,
    /// A piece whose storing failed ends here: it is stored again with the
    /// same range (and so the same name and bytes), since a request that
    /// timed out may still have landed.
    retry_end: Option<u64>,
    /// The transaction open at `offset`, when the last piece ended inside
    /// one.
    open: Option<binlog::OpenTx>,
}

/// Archives one server's binary logs while it is the primary.
pub struct Archiver<S: Source> {
    pub dest: Destination,
    pub flavor: Flavor,
    pub instance: String,
    /// Where the binary log files are (the data directory).
    pub dir: PathBuf,
    pub source: S,
    pub status: Arc<Mutex<ArchiveStatus>>,
    pub interval: Duration,
}

fn now_us() -> i64 {
    jiff::Timestamp::now().as_microsecond()
}

fn rfc3339(us: i64) -> String {
    crate::recovery_plan::show_time(us)
}

impl<S: Source> Archiver<S> {
    /// Archive until `stop` turns true; then archive what is left and
    /// mark the run ended (best effort: a run without its end is fine).
    pub async fn run(&self, mut stop: watch::Receiver<bool>) {
        let mut state = loop {
            match self.start().await {
                Ok(s) => break s,
                Err(e) => self.failed(&e),
            }
            if sleep_or_stop(self.interval, &mut stop).await {
                return;
            }
        };
        tracing::info!(
            run = state.run,
            file = state.file,
            "binlog archiving started"
        );
        loop {
            let busy = match self.step(&mut state).await {
                Ok(busy) => {
                    self.succeeded(&state);
                    busy
                }
                Err(e) => {
                    self.failed(&e);
                    false
                }
            };
            if *stop.borrow() {
                break;
            }
            if !busy && sleep_or_stop(self.interval, &mut stop).await {
                break;
            }
        }
        let last = tokio::time::timeout(Duration::from_secs(5), async {
            while self.step(&mut state).await? {}
            self.write_head(&mut state, true).await
        })
        .await;
        match last {
            Ok(Ok(())) => tracing::info!(run = state.run, "binlog archiving ended"),
            Ok(Err(e)) => {
                tracing::warn!(run = state.run, error = %e, "binlog archiving ended without its last piece")
            }
            Err(_) => tracing::warn!(
                run = state.run,
                "binlog archiving ended without its last piece (timed out)"
            ),
        }
    }

    fn failed(&self, e: &anyhow::Error) {
        let mut st = self.status.lock().unwrap();
        let msg = format!("{e:#}");
        if st.error != msg {
            tracing::warn!(error = msg, "binlog archiving failed; retrying");
        }
        if st.failing_since.is_empty() {
            st.failing_since = jiff::Timestamp::now().to_string();
        }
        st.error = msg;
        if let Ok(t) = st.complete_until.parse::<jiff::Timestamp>() {
            st.lag_seconds = Some((now_us() - t.as_microsecond()) as f64 / 1e6);
        }
    }

    fn succeeded(&self, state: &RunState) {
        let mut st = self.status.lock().unwrap();
        if !st.error.is_empty() {
            tracing::info!(run = state.run, "binlog archiving recovered");
        }
        st.error.clear();
        st.failing_since.clear();
        st.run = state.run.clone();
        st.file = state.file.clone();
        st.offset = state.offset;
        if let Some(t) = &state.last {
            st.last_transaction = t.id.to_string();
            st.last_commit_time = rfc3339(t.commit_us);
        }
        // What the archive holds, once the run reached the file the
        // server switched to when it began (before that, what this run
        // stored extends the previous run's reach, not the server's).
        st.held = if state.caught_up {
            state.held.text()
        } else {
            String::new()
        };
        if state.complete_until_us > 0 {
            st.complete_until = rfc3339(state.complete_until_us);
            st.lag_seconds = Some((now_us() - state.complete_until_us).max(0) as f64 / 1e6);
        }
    }

    /// Begin a run: switch the server to a new file, find where the
    /// archive ends in its binary logs, record the run.
    async fn start(&self) -> anyhow::Result<RunState> {
        let begin = self.source.begin().await?;
        let files = self.source.files().await?;
        let archived = self.archived_state().await?;
        let first = self.first_file(&files, archived.as_ref()).await?;
        let started = jiff::Timestamp::now();
        let run = archive::run_name(started, &self.instance);
        let desc = Run {
            run: run.clone(),
            instance: self.instance.clone(),
            flavor: self.flavor,
            server: begin.server.clone(),
            started_at: started,
            first_file: first.clone(),
            start_position: begin.position.clone(),
            start_state: if self.flavor == Flavor::Mariadb {
                begin.state.clone()
            } else {
                String::new()
            },
        };
        self.put(&archive::run_key(&run), serde_json::to_vec_pretty(&desc)?)
            .await?;
        {
            let mut st = self.status.lock().unwrap();
            *st = ArchiveStatus {
                run: run.clone(),
                file: first.clone(),
                ..Default::default()
            };
        }
        Ok(RunState {
            run,
            file: first,
            offset: 0,
            checksum_len: None,
            flush_file: begin.file,
            held: Held::parse(self.flavor, &begin.state)?,
            caught_up: false,
            last: None,
            complete_until_us: 0,
            head_written_us: 0,
            retry_end: None,
            open: None,
        })
    }

    /// The history the latest run's head says is archived.
    async fn archived_state(&self) -> anyhow::Result<Option<Held>> {
        let prefix = self.dest.key(archive::BINLOGS);
        let listed = self.dest.store.list_with_delimiter(Some(&prefix)).await?;
        let mut runs: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        runs.sort();
        let Some(latest) = runs.last() else {
            return Ok(None);
        };
        let key = self.dest.key(&archive::head_key(latest));
        let head: Head = match self.dest.store.get(&key).await {
            Ok(r) => serde_json::from_slice(&r.bytes().await?)?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if head.state.is_empty() {
            return Ok(None);
        }
        Ok(Some(Held::parse(self.flavor, &head.state)?))
    }

    /// The file a run starts from: walking back from the newest, the first
    /// whose first transaction the archive holds (or that holds none) —
    /// skipped whole when the archive also holds its last transaction.
    /// With nothing archived, or nothing found, the oldest file.
    async fn first_file(
        &self,
        files: &[String],
        archived: Option<&Held>,
    ) -> anyhow::Result<String> {
        let oldest = files
            .first()
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("the server lists no binary log files"))?;
        let Some(held) = archived else {
            return Ok(oldest);
        };
        for (i, f) in files.iter().enumerate().rev() {
            let path = self.dir.join(f);
            let flavor = self.flavor;
            let ends = tokio::task::spawn_blocking(move || {
                let mut file =
                    std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                binlog::ends(flavor, &mut file, PIECE_BYTES)
                    .map_err(|e| format!("{}: {e}", path.display()))
            })
            .await?
            .map_err(anyhow::Error::msg)?;
            let (Some(first), Some(last)) = ends else {
                continue;
            };
            if held.holds(&last.id) {
                return Ok(files.get(i + 1).cloned().unwrap_or_else(|| f.clone()));
            }
            if held.holds(&first.id) {
                return Ok(f.clone());
            }
        }
        Ok(oldest)
    }

    async fn put(&self, name: &str, bytes: Vec<u8>) -> anyhow::Result<()> {
        let key = self.dest.key(name);
        self.dest
            .store
            .put(&key, PutPayload::from(bytes))
            .await
            .map_err(|e| anyhow::anyhow!("storing {key} in {}: {e}", self.dest.path))?;
        Ok(())
    }

    /// One step; true when there is more to do at once.
    async fn step(&self, state: &mut RunState) -> anyhow::Result<bool> {
        let t0 = now_us();
        let files = self.source.files().await?;
        let later = files.iter().any(|f| f.as_str() > state.file.as_str());
        let start = state.offset;
        let mut limit = state
            .retry_end
            .map(|e| e.saturating_sub(start))
            .unwrap_or(PIECE_BYTES as u64);
        // Read from where the last piece ended; when not even one event
        // fits (a statement larger than a piece), read more.
        let (data, scanned, full) = loop {
            let mut file = tokio::fs::File::open(self.dir.join(&state.file)).await?;
            file.seek(std::io::SeekFrom::Start(start)).await?;
            let mut data = Vec::new();
            (&mut file).take(limit).read_to_end(&mut data).await?;
            let full = data.len() as u64 == limit;
            let scanned = binlog::scan_from(
                self.flavor,
                &data,
                start,
                state.checksum_len,
                state.open.clone(),
            )
            .map_err(|e| anyhow::anyhow!("{}: {e}", state.file))?;
            if full && state.retry_end.is_none() && scanned.event_boundary == start {
                limit *= 2;
                continue;
            }
            break (data, scanned, full);
        };
        let read_end = start + data.len() as u64;
        let at_end = state.retry_end.is_none() && !full;
        // Where this piece ends: at the last whole transaction, or, when one
        // transaction is larger than a piece, at the last whole event inside
        // it (its start and identity carried to the next read).
        let cut = match state.retry_end {
            Some(e) => e,
            None if at_end || scanned.boundary > start => scanned.boundary,
            None => scanned.event_boundary,
        };
        let open_after = if cut == scanned.boundary {
            None
        } else {
            scanned.open.clone()
        };
        let mut stored = false;
        if cut > start {
            let bytes = &data[..(cut - start) as usize];
            let index = PieceIndex {
                file: state.file.clone(),
                start,
                end: cut,
                sha256: archive::sha256(bytes),
                header_end: scanned.header_end,
                txs: scanned.txs.clone(),
                rotated_to: scanned.rotated_to.clone(),
                stopped: scanned.stopped,
            };
            let key = archive::piece_key(&state.run, &state.file, start, cut);
            if let Err(e) = self.put(&key, archive::encode(&index, bytes)).await {
                state.retry_end = Some(cut);
                return Err(e);
            }
            state.retry_end = None;
            if state.file.as_str() >= state.flush_file.as_str() {
                for t in &scanned.txs {
                    state.held.record(&t.id);
                }
            }
            state.offset = cut;
            state.open = open_after;
            state.checksum_len = scanned.checksum_len;
            if let Some(t) = scanned.txs.last() {
                state.last = Some(t.clone());
            }
            let mut st = self.status.lock().unwrap();
            st.pieces += 1;
            st.bytes += bytes.len() as u64;
            st.last_archived_time = jiff::Timestamp::now().to_string();
            stored = true;
        }
        if state.file.as_str() >= state.flush_file.as_str() {
            state.caught_up = true;
        }
        if at_end && (scanned.closed() || later) {
            // The server writes elsewhere now: on to the next file.
            let next = scanned
                .rotated_to
                .clone()
                .filter(|n| files.contains(n))
                .or_else(|| {
                    files
                        .iter()
                        .find(|f| f.as_str() > state.file.as_str())
                        .cloned()
                });
            if let Some(next) = next {
                if scanned.boundary < read_end && !scanned.closed() {
                    // A transaction the server never finished (it crashed
                    // mid-write); it was never committed.
                    tracing::warn!(
                        file = state.file,
                        from = scanned.boundary,
                        "binary log ends with an unfinished transaction; it is not archived"
                    );
                }
                state.file = next;
                state.offset = 0;
                state.open = None;
                state.checksum_len = None;
                self.write_head(state, false).await?;
                return Ok(true);
            }
        }
        if at_end && !later {
            state.complete_until_us = t0;
        }
        // The head: after a piece, and at least every second while idle,
        // so the archive's reach (`completeUntil`) keeps up with the clock.
        if stored || t0 - state.head_written_us >= 1_000_000 {
            self.write_head(state, false).await?;
        }
        Ok(!at_end)
    }

    async fn write_head(&self, state: &mut RunState, ended: bool) -> anyhow::Result<()> {
        let head = Head {
            file: state.file.clone(),
            offset: state.offset,
            last: state.last.as_ref().map(|t| t.id.clone()),
            last_commit_us: state.last.as_ref().map(|t| t.commit_us).unwrap_or(0),
            complete_until_us: state.complete_until_us,
            ended,
            state: if state.caught_up {
                state.held.text()
            } else {
                String::new()
            },
        };
        self.put(
            &archive::head_key(&state.run),
            serde_json::to_vec_pretty(&head)?,
        )
        .await?;
        state.head_written_us = now_us();
        Ok(())
    }
}

async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    if *stop.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        r = stop.changed() => r.is_err() || *stop.borrow(),
    }
}
