//! The write checker (shared by the end-to-end tests and the benchmarks): writes numbered rows through the rw endpoint as fast
//! as it can, remembers every acknowledged one, and afterwards proves they
//! are all on the primary and on every healthy replica.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use mysql_async::{Conn, OptsBuilder};

#[derive(Default)]
struct Log {
    acked: Vec<u64>,
    ack_times: Vec<Instant>,
    sent_times: Vec<Instant>,
    errors: u64,
    /// When each failure began and ended, and what it was (the first 200).
    failures: Vec<(Instant, Instant, String)>,
}

impl Log {
    fn failed(&mut self, began: Instant, what: String) {
        self.errors += 1;
        if self.failures.len() < 200 {
            self.failures.push((began, Instant::now(), what));
        }
    }
}

pub struct WriteChecker {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Log>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

pub struct Outcome {
    pub acked: Vec<u64>,
    pub errors: u64,
    /// Longest interval without an acknowledged write.
    pub longest_gap: Duration,
    pub ack_times: Vec<Instant>,
    /// When each acknowledged write was sent.
    pub sent_times: Vec<Instant>,
    /// The first failures: when each began and ended, and what it was.
    pub failures: Vec<(Instant, Instant, String)>,
}

impl Outcome {
    /// The longest interval without an acknowledged write: the
    /// acknowledgements on either side of it.
    pub fn longest_gap_span(&self) -> Option<(Instant, Instant)> {
        self.ack_times
            .windows(2)
            .max_by_key(|w| w[1] - w[0])
            .map(|w| (w[0], w[1]))
    }

    /// From `fault` to the end of the longest stretch without an
    /// acknowledged write after it: when writes were flowing again (a write
    /// a dying primary still acknowledged in its last milliseconds does not
    /// count as recovery).
    pub fn outage_after(&self, fault: Instant) -> Duration {
        let (mut prev, mut end, mut longest) = (fault, fault, Duration::ZERO);
        for t in self.ack_times.iter().filter(|t| **t > fault) {
            if *t - prev > longest {
                longest = *t - prev;
                end = *t;
            }
            prev = *t;
        }
        end - fault
    }

    /// The failures after `t`, one line each, times relative to it, like
    /// failures repeated one after another counted once (for a report).
    pub fn failures_after(&self, t: Instant) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut last = String::new();
        let mut repeats = 0;
        for (began, ended, what) in self.failures.iter().filter(|f| f.1 >= t) {
            if *what == last {
                repeats += 1;
                continue;
            }
            if repeats > 0 {
                out.push(format!("    (x{repeats} more)"));
                repeats = 0;
            }
            out.push(format!(
                "  {:.3}s..{:.3}s {what}",
                (*began - t).as_secs_f64(),
                (*ended - t).as_secs_f64()
            ));
            last = what.clone();
        }
        if repeats > 0 {
            out.push(format!("    (x{repeats} more)"));
        }
        out.join("\n")
    }

    /// Every recorded failure, times relative to the first write's
    /// answer: what a test prints when it expected none.
    pub fn failures_report(&self) -> String {
        let from = self.ack_times.first().copied().unwrap_or_else(Instant::now);
        let start = self.failures.first().map_or(from, |f| f.0.min(from));
        let wall = jiff::Timestamp::now()
            - jiff::SignedDuration::try_from(start.elapsed()).unwrap_or_default();
        format!(
            "{} failed writes, times from {wall} (UTC):\n{}",
            self.errors,
            self.failures_after(start)
        )
    }

    /// First acknowledgement of a write sent after `t`.
    pub fn first_ack_after(&self, t: Instant) -> Option<Instant> {
        // A write sent after `t`: an answer to an earlier write that was
        // still on its way back must not count.
        self.sent_times
            .iter()
            .zip(&self.ack_times)
            .find(|(sent, _)| **sent > t)
            .map(|(_, ack)| *ack)
    }
}

/// The application user over TCP to 127.0.0.1:`port`.
pub fn app_opts(port: u16, password: String) -> mysql_async::Opts {
    app_opts_at(([127, 0, 0, 1], port).into(), password)
}

/// The application user over TCP to `addr`.
pub fn app_opts_at(addr: std::net::SocketAddr, password: String) -> mysql_async::Opts {
    OptsBuilder::default()
        .ip_or_hostname(addr.ip().to_string())
        .tcp_port(addr.port())
        .user(Some("app"))
        .pass(Some(password))
        .prefer_socket(false)
        .into()
}

impl WriteChecker {
    /// The table, and the first number after the rows of earlier checkers
    /// (a number already taken would fail as a duplicate, not measure the
    /// endpoint).
    async fn prepare(
        addr: std::net::SocketAddr,
        password: &str,
    ) -> Result<(Conn, u64), mysql_async::Error> {
        let mut conn = Conn::new(app_opts_at(addr, password.to_string())).await?;
        conn.query_drop("CREATE DATABASE IF NOT EXISTS app").await?;
        conn.query_drop("CREATE TABLE IF NOT EXISTS app.w (id BIGINT PRIMARY KEY, at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6))")
            .await?;
        let first: u64 = conn
            .query_first("SELECT COALESCE(MAX(id), 0) + 1 FROM app.w")
            .await?
            .unwrap_or(1);
        Ok((conn, first))
    }

    /// Create the table and start writing through the endpoint at `port`
    /// (the `rw` Service) as the application user.
    pub async fn start(port: u16, password: String) -> WriteChecker {
        Self::start_at(([127, 0, 0, 1], port).into(), password).await
    }

    /// [`WriteChecker::start`] through the endpoint at `addr` (say, a
    /// Service's ClusterIP).
    pub async fn start_at(addr: std::net::SocketAddr, password: String) -> WriteChecker {
        // The endpoint may reach a former primary for a moment after a
        // change of primary (a Service's endpoints follow the labels a
        // moment later): try again until the table is ready.
        let deadline = Instant::now() + Duration::from_secs(30);
        let (conn, first) = loop {
            match Self::prepare(addr, &password).await {
                Ok(ready) => break ready,
                Err(e) if Instant::now() > deadline => {
                    panic!("the write checker's table through {addr}: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        drop(conn);
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Log::default()));
        let (s, l) = (stop.clone(), log.clone());
        let task = tokio::spawn(async move {
            let opts = app_opts_at(addr, password);
            let mut next = first;
            let mut conn: Option<Conn> = None;
            while !s.load(Ordering::Relaxed) {
                if conn.is_none() {
                    let began = Instant::now();
                    match tokio::time::timeout(Duration::from_secs(2), Conn::new(opts.clone()))
                        .await
                    {
                        Ok(Ok(c)) => conn = Some(c),
                        r => {
                            let what = match r {
                                Ok(Err(e)) => format!("connect: {e}"),
                                _ => "connect: timed out after 2 s".to_string(),
                            };
                            l.lock().unwrap().failed(began, what);
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            continue;
                        }
                    }
                }
                let c = conn.as_mut().unwrap();
                let sent = Instant::now();
                let r = tokio::time::timeout(
                    Duration::from_secs(5),
                    c.query_drop(format!("INSERT INTO app.w (id) VALUES ({next})")),
                )
                .await;
                match r {
                    Ok(Ok(())) => {
                        let mut g = l.lock().unwrap();
                        g.acked.push(next);
                        g.ack_times.push(Instant::now());
                        g.sent_times.push(sent);
                        next += 1;
                    }
                    r => {
                        // Unknown outcome: never reuse the number.
                        next += 1;
                        let what = match r {
                            Ok(Err(e)) => format!("insert: {e}"),
                            _ => "insert: no answer within 5 s".to_string(),
                        };
                        l.lock().unwrap().failed(sent, what);
                        conn = None;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
            }
        });
        WriteChecker {
            stop,
            log,
            task: Some(task),
        }
    }

    /// Acknowledged writes so far.
    pub fn acked(&self) -> usize {
        self.log.lock().unwrap().acked.len()
    }

    /// The numbers of the writes acknowledged so far.
    pub fn acked_ids(&self) -> Vec<u64> {
        self.log.lock().unwrap().acked.clone()
    }

    /// When each write so far was acknowledged.
    pub fn ack_times(&self) -> Vec<Instant> {
        self.log.lock().unwrap().ack_times.clone()
    }

    /// Wait until at least `n` more writes are acknowledged.
    pub async fn wait_for_more(&self, n: usize, timeout: Duration) {
        let start = self.acked();
        let deadline = Instant::now() + timeout;
        while self.acked() < start + n {
            assert!(
                Instant::now() < deadline,
                "fewer than {n} writes acknowledged within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn stop(mut self) -> Outcome {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        let g = self.log.lock().unwrap();
        let longest_gap = g
            .ack_times
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default();
        Outcome {
            acked: g.acked.clone(),
            errors: g.errors,
            longest_gap,
            ack_times: g.ack_times.clone(),
            sent_times: g.sent_times.clone(),
            failures: g.failures.clone(),
        }
    }
}
