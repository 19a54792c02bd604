//! What a running copy tells: its progress (bytes, rate, time left) for the
//! status and the log, and the last lines a copying tool printed, to
//! explain a failure. Shared by every kind of copy (mariadb-backup streams,
//! the clone plugin, tar, a private server).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cnmysql_core::status::CloneProgress;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The last lines a program wrote on its standard error.
pub(crate) type Tail = Arc<Mutex<VecDeque<String>>>;

/// Keep the last lines a tool printed, to explain a failure.
pub(crate) fn tail_lines(
    stderr: tokio::process::ChildStderr,
    what: &'static str,
) -> Arc<Mutex<VecDeque<String>>> {
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let t = tail.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(target: "backup", tool = what, "{line}");
            let mut t = t.lock().unwrap();
            if t.len() == 20 {
                t.pop_front();
            }
            t.push_back(line);
        }
    });
    tail
}

pub(crate) fn tail_text(t: &Arc<Mutex<VecDeque<String>>>) -> String {
    t.lock()
        .unwrap()
        .iter()
        .rev()
        .take(4)
        .rev()
        .cloned()
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Shared, readable progress of a running clone.
pub type ProgressCell = Arc<Mutex<Option<CloneProgress>>>;

/// Record where a clone from `source` that began at `started` stands.
/// Log a copy's throughput: `what` (the message) after `bytes` from
/// `started`.
pub(crate) fn log_throughput(source: &str, bytes: u64, started: Instant, what: &str) {
    let secs = started.elapsed().as_secs_f64();
    tracing::info!(
        source,
        bytes,
        seconds = secs,
        mb_per_s = bytes as f64 / 1e6 / secs.max(1e-9),
        "{what}"
    );
}

/// Log a clone's progress as its status reports it.
pub(crate) fn log_progress(source: &str, progress: &ProgressCell) {
    let p = progress.lock().unwrap().clone().unwrap_or_default();
    tracing::info!(
        source,
        bytes = p.bytes,
        expected_bytes = p.expected_bytes,
        mb_per_s = format!("{:.1}", p.bytes_per_second / 1e6),
        eta_seconds = p.eta_seconds.map(|e| format!("{e:.0}")),
        "clone progress"
    );
}

/// Record where a clone from `source` that began at `started` stands.
pub(crate) fn report(
    progress: &ProgressCell,
    source: &str,
    started: Instant,
    stage: &str,
    bytes: u64,
    expected: Option<u64>,
) {
    let secs = started.elapsed().as_secs_f64();
    let rate = bytes as f64 / secs.max(1e-3);
    let eta = expected
        .filter(|_| rate > 0.0)
        .map(|e| (e.saturating_sub(bytes)) as f64 / rate);
    *progress.lock().unwrap() = Some(CloneProgress {
        source: source.to_string(),
        bytes,
        bytes_per_second: rate,
        expected_bytes: expected,
        eta_seconds: eta,
        elapsed_seconds: secs,
        stage: stage.to_string(),
    });
}
