//! The server's own figures, as the instance manager reads them with the
//! status variables it already polls (one `SHOW GLOBAL STATUS`, no exporter
//! beside it), and the series they become. One table says both which
//! variables the manager asks for and what each is called on `/metrics`:
//! the names are the same on MariaDB and MySQL, which share these variables.
//!
//! Series (per instance, label `instance`; counters end in `_total`):
//! `cnmysql_instance_server_connections_total`, `_aborted_connects_total`,
//! `_threads_connected`, `_threads_running`, `_max_used_connections`,
//! `_questions_total`, `_slow_queries_total`, `_commands_total`
//! (label `command`: select, insert, update, delete, commit, rollback),
//! `_received_bytes_total`, `_sent_bytes_total`, `_innodb_buffer_pool_pages`
//! (label `state`: total, free, dirty, data), `_innodb_buffer_pool_read_requests_total`,
//! `_innodb_buffer_pool_disk_reads_total`, `_row_operations_total` (label
//! `operation`: write, update, delete, read_key, read_next, read_rnd_next:
//! the `Handler_*` counters, which both flavours keep; MariaDB has no
//! `Innodb_rows_*`), `_innodb_row_lock_waits_total`,
//! `_innodb_row_lock_wait_seconds_total`, `_innodb_redo_written_bytes_total`,
//! `_binlog_bytes` (the binary logs on disk); and from the replication
//! status: `cnmysql_instance_replication_io_running`, `_sql_running`,
//! `_replication_last_error_number` (label `thread`: io, sql); and while
//! an instance clones: `cnmysql_instance_clone_copied_bytes`,
//! `_clone_expected_bytes`, `_clone_bytes_per_second`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use cnmysql_core::status::InstanceStatus;

type Labels = Vec<(String, String)>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;
type Counters = Family<Labels, Counter<f64, AtomicU64>>;

/// The key the manager stores the binary logs' total size under (not a
/// status variable: the sum of `SHOW BINARY LOGS`).
pub const BINLOG_BYTES: &str = "binlog_bytes";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// One status variable and the sample it becomes.
struct Series {
    /// As `SHOW GLOBAL STATUS` names it.
    variable: &'static str,
    /// Without the `cnmysql_` prefix (and, for a counter, the `_total`).
    metric: &'static str,
    /// The sample's own label, when several variables share a series.
    label: Option<(&'static str, &'static str)>,
    kind: Kind,
    /// Multiplies the value (milliseconds to seconds).
    scale: f64,
    help: &'static str,
}

const fn s(
    variable: &'static str,
    metric: &'static str,
    label: Option<(&'static str, &'static str)>,
    kind: Kind,
    help: &'static str,
) -> Series {
    Series {
        variable,
        metric,
        label,
        kind,
        scale: 1.0,
        help,
    }
}

use Kind::{Counter as C, Gauge as G};

#[rustfmt::skip]
const SERIES: &[Series] = &[
    s("Connections", "instance_server_connections", None, C, "Connection attempts to the server"),
    s("Aborted_connects", "instance_server_aborted_connects", None, C, "Connection attempts that failed"),
    s("Threads_connected", "instance_server_threads_connected", None, G, "Open client connections"),
    s("Threads_running", "instance_server_threads_running", None, G, "Connections running a statement"),
    s("Max_used_connections", "instance_server_max_used_connections", None, G, "Most connections open at once since the server started"),
    s("Questions", "instance_server_questions", None, C, "Statements sent by clients"),
    s("Slow_queries", "instance_server_slow_queries", None, C, "Statements slower than long_query_time"),
    s("Com_select", "instance_server_commands", Some(("command", "select")), C, "Statements run, by command"),
    s("Com_insert", "instance_server_commands", Some(("command", "insert")), C, ""),
    s("Com_update", "instance_server_commands", Some(("command", "update")), C, ""),
    s("Com_delete", "instance_server_commands", Some(("command", "delete")), C, ""),
    s("Com_commit", "instance_server_commands", Some(("command", "commit")), C, ""),
    s("Com_rollback", "instance_server_commands", Some(("command", "rollback")), C, ""),
    s("Bytes_received", "instance_server_received_bytes", None, C, "Bytes received from clients"),
    s("Bytes_sent", "instance_server_sent_bytes", None, C, "Bytes sent to clients"),
    s("Innodb_buffer_pool_pages_total", "instance_server_innodb_buffer_pool_pages", Some(("state", "total")), G, "InnoDB buffer pool pages, by state"),
    s("Innodb_buffer_pool_pages_free", "instance_server_innodb_buffer_pool_pages", Some(("state", "free")), G, ""),
    s("Innodb_buffer_pool_pages_dirty", "instance_server_innodb_buffer_pool_pages", Some(("state", "dirty")), G, ""),
    s("Innodb_buffer_pool_pages_data", "instance_server_innodb_buffer_pool_pages", Some(("state", "data")), G, ""),
    s("Innodb_buffer_pool_read_requests", "instance_server_innodb_buffer_pool_read_requests", None, C, "Logical reads from the InnoDB buffer pool"),
    s("Innodb_buffer_pool_reads", "instance_server_innodb_buffer_pool_disk_reads", None, C, "Reads the buffer pool could not serve (from disk)"),
    s("Handler_write", "instance_server_row_operations", Some(("operation", "write")), C, "Rows the storage engines were asked to handle, by operation (the Handler_* counters; internal temporary tables count too)"),
    s("Handler_update", "instance_server_row_operations", Some(("operation", "update")), C, ""),
    s("Handler_delete", "instance_server_row_operations", Some(("operation", "delete")), C, ""),
    s("Handler_read_key", "instance_server_row_operations", Some(("operation", "read_key")), C, ""),
    s("Handler_read_next", "instance_server_row_operations", Some(("operation", "read_next")), C, ""),
    s("Handler_read_rnd_next", "instance_server_row_operations", Some(("operation", "read_rnd_next")), C, ""),
    s("Innodb_row_lock_waits", "instance_server_innodb_row_lock_waits", None, C, "Row lock waits"),
    Series { scale: 0.001, ..s("Innodb_row_lock_time", "instance_server_innodb_row_lock_wait_seconds", None, C, "Time spent waiting for row locks") },
    s("Innodb_os_log_written", "instance_server_innodb_redo_written_bytes", None, C, "Bytes written to the InnoDB redo log"),
    s(BINLOG_BYTES, "instance_server_binlog_bytes", None, G, "Size of the binary logs on disk"),
];

/// The status variables the manager reads for these series.
pub fn status_variables() -> impl Iterator<Item = &'static str> {
    SERIES
        .iter()
        .map(|s| s.variable)
        .filter(|v| *v != BINLOG_BYTES)
}

/// The series registered, by name.
pub(crate) struct ServerFamilies {
    gauges: BTreeMap<&'static str, Gauges>,
    counters: BTreeMap<&'static str, Counters>,
    io_running: Gauges,
    sql_running: Gauges,
    last_errno: Gauges,
    clone_bytes: Gauges,
    clone_expected: Gauges,
    clone_rate: Gauges,
}

impl ServerFamilies {
    /// Register every series; the names registered (without the prefix,
    /// counters with `_total`) go to `names`.
    pub(crate) fn register(r: &mut Registry, names: &mut Vec<String>) -> ServerFamilies {
        let mut gauges = BTreeMap::new();
        let mut counters = BTreeMap::new();
        for s in SERIES.iter().filter(|s| !s.help.is_empty()) {
            match s.kind {
                Kind::Gauge => {
                    let f = Gauges::default();
                    r.register(s.metric, s.help, f.clone());
                    gauges.insert(s.metric, f);
                    names.push(s.metric.to_string());
                }
                Kind::Counter => {
                    let f = Counters::default();
                    r.register(s.metric, s.help, f.clone());
                    counters.insert(s.metric, f);
                    names.push(format!("{}_total", s.metric));
                }
            }
        }
        let mut g = |name: &'static str, help: &str| {
            let f = Gauges::default();
            r.register(name, help, f.clone());
            names.push(name.to_string());
            f
        };
        ServerFamilies {
            gauges,
            counters,
            io_running: g(
                "instance_replication_io_running",
                "The replica's receiver thread is connected to its source",
            ),
            sql_running: g(
                "instance_replication_sql_running",
                "The replica's applier thread runs",
            ),
            last_errno: g(
                "instance_replication_last_error_number",
                "The replication thread's last error number (0: none), by thread",
            ),
            clone_bytes: g(
                "instance_clone_copied_bytes",
                "Bytes a clone under way has copied from its source",
            ),
            clone_expected: g(
                "instance_clone_expected_bytes",
                "The size of the source's data directory, for a clone under way",
            ),
            clone_rate: g(
                "instance_clone_bytes_per_second",
                "How fast a clone under way copies",
            ),
        }
    }

    /// An instance's samples, labelled `l`.
    pub(crate) fn samples(&self, l: &Labels, st: &InstanceStatus) {
        for s in SERIES {
            let Some(&v) = st.server.get(s.variable) else {
                continue;
            };
            let mut labels = l.clone();
            if let Some((k, val)) = s.label {
                labels.push((k.to_string(), val.to_string()));
            }
            let v = v as f64 * s.scale;
            match s.kind {
                Kind::Gauge => {
                    self.gauges[s.metric].get_or_create(&labels).set(v);
                }
                Kind::Counter => {
                    self.counters[s.metric].get_or_create(&labels).inc_by(v);
                }
            }
        }
        if let Some(c) = &st.clone {
            self.clone_bytes.get_or_create(l).set(c.bytes as f64);
            self.clone_rate.get_or_create(l).set(c.bytes_per_second);
            if let Some(e) = c.expected_bytes {
                self.clone_expected.get_or_create(l).set(e as f64);
            }
        }
        let Some(r) = &st.replication else { return };
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        self.io_running
            .get_or_create(l)
            .set(flag(r.io_state == "Yes"));
        self.sql_running.get_or_create(l).set(flag(r.sql_running));
        for (thread, errno) in [("io", r.last_io_errno), ("sql", r.last_sql_errno)] {
            let mut labels = l.clone();
            labels.push(("thread".into(), thread.into()));
            self.last_errno.get_or_create(&labels).set(errno as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_named_once_with_its_help_on_its_first_variable() {
        let mut seen = std::collections::BTreeSet::new();
        for s in SERIES {
            let first = seen.insert(s.metric);
            assert_eq!(first, !s.help.is_empty(), "{}", s.variable);
        }
        // Every variable a series reads is asked for, once.
        let vars: Vec<_> = status_variables().collect();
        let unique: std::collections::BTreeSet<_> = vars.iter().collect();
        assert_eq!(vars.len(), unique.len());
        assert!(vars.contains(&"Threads_running"));
    }

    #[test]
    fn an_instance_becomes_its_samples() {
        let mut r = Registry::with_prefix("cnmysql");
        let mut names = Vec::new();
        let f = ServerFamilies::register(&mut r, &mut names);
        assert!(names.contains(&"instance_server_commands_total".to_string()));
        let mut st = InstanceStatus {
            server: BTreeMap::from([
                ("Com_insert".to_string(), 7),
                ("Innodb_row_lock_time".to_string(), 2500),
                (BINLOG_BYTES.to_string(), 4096),
            ]),
            ..Default::default()
        };
        st.clone = Some(cnmysql_core::status::CloneProgress {
            bytes: 10,
            expected_bytes: Some(100),
            ..Default::default()
        });
        f.samples(&vec![("instance".into(), "db-1".into())], &st);
        let mut page = String::new();
        prometheus_client::encoding::text::encode(&mut page, &r).unwrap();
        for line in [
            "cnmysql_instance_server_commands_total{instance=\"db-1\",command=\"insert\"} 7.0",
            "cnmysql_instance_server_innodb_row_lock_wait_seconds_total{instance=\"db-1\"} 2.5",
            "cnmysql_instance_server_binlog_bytes{instance=\"db-1\"} 4096.0",
            "cnmysql_instance_clone_expected_bytes{instance=\"db-1\"} 100.0",
        ] {
            assert!(page.contains(line), "{line} not in\n{page}");
        }
        // Nothing read, nothing said: no made-up zero.
        assert!(!page.contains("command=\"select\""));
    }
}
