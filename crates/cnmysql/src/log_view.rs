//! How `logs` prints a line of an instance manager's log: `pretty` for a
//! person at a terminal (time, level, instance, message, fields), `json`
//! for a pipe (the line as logged, with its instance named).

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    Pretty,
    Json,
}

impl LogFormat {
    /// Pretty on a terminal, JSON when piped.
    pub(crate) fn for_stdout() -> LogFormat {
        use std::io::IsTerminal;
        if std::io::stdout().is_terminal() {
            LogFormat::Pretty
        } else {
            LogFormat::Json
        }
    }
}

/// What `logs` is asked for, the same for the plugin and `local logs`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct LogOptions {
    /// Keep printing new lines as they are written.
    #[arg(short = 'f', long)]
    pub(crate) follow: bool,
    /// Only the last N lines of each.
    #[arg(long, value_name = "N")]
    pub(crate) tail: Option<u32>,
    /// pretty (time, level, instance, message, fields) or json (the lines
    /// as logged, naming the instance) [default: pretty on a terminal, json
    /// when piped].
    #[arg(short = 'o', long, value_enum)]
    pub(crate) output: Option<LogFormat>,
}

impl LogOptions {
    /// Prints each (instance, line) on stdout as asked.
    pub(crate) fn printer(&self) -> impl Fn(&str, &str) + Send + 'static {
        let format = self.output.unwrap_or_else(LogFormat::for_stdout);
        move |instance: &str, line: &str| println!("{}", render(format, instance, line))
    }
}

/// `raw`, a line of `instance`'s log, as `format` prints it.
pub(crate) fn render(format: LogFormat, instance: &str, raw: &str) -> String {
    let parsed = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(raw).ok();
    match (format, parsed) {
        (LogFormat::Json, Some(mut m)) => {
            m.entry("instance")
                .or_insert_with(|| instance.to_string().into());
            serde_json::Value::Object(m).to_string()
        }
        (LogFormat::Json, None) => {
            serde_json::json!({"instance": instance, "message": raw}).to_string()
        }
        (LogFormat::Pretty, Some(m)) => pretty(instance, &m),
        (LogFormat::Pretty, None) => format!("{instance} | {raw}"),
    }
}

fn pretty(instance: &str, m: &serde_json::Map<String, serde_json::Value>) -> String {
    let text = |k: &str| m.get(k).and_then(|v| v.as_str()).unwrap_or_default();
    let time = text("timestamp");
    let time = time.get(11..23).unwrap_or(time);
    let skip = [
        "timestamp",
        "level",
        "message",
        "target",
        "spans",
        "instance",
    ];
    let fields: Vec<String> = m
        .iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .map(|(k, v)| match v.as_str() {
            Some(s) => format!("{k}={s}"),
            None => format!("{k}={v}"),
        })
        .collect();
    let mut line = format!("{time} {:<5} {instance} {}", text("level"), text("message"));
    if !fields.is_empty() {
        line.push_str("  ");
        line.push_str(&fields.join(" "));
    }
    line
}

/// `logs` of a local cluster, off the async runtime (following polls the
/// files until the process is stopped).
pub(crate) async fn follow_logs(
    dir: cnmysql_local::state::StateDir,
    instance: Option<String>,
    options: &LogOptions,
) -> anyhow::Result<()> {
    let (tail, follow, print) = (options.tail, options.follow, options.printer());
    tokio::task::spawn_blocking(move || {
        let tail = tail.map(|n| n as usize);
        cnmysql_local::logs::logs(&dir, instance.as_deref(), tail, follow, print)
    })
    .await?
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"timestamp":"2026-11-26T04:02:54.360123Z","level":"INFO","message":"read-only","why":"handing over","killed":0,"target":"cnmysql_instance::manager::fence","spans":[{"name":"instance"}]}"#;

    #[test]
    fn a_person_reads_time_level_instance_message_and_fields() {
        assert_eq!(
            render(LogFormat::Pretty, "db-1", LINE),
            "04:02:54.360 INFO  db-1 read-only  killed=0 why=handing over"
        );
        assert_eq!(
            render(
                LogFormat::Pretty,
                "db-2",
                "2026-11-26 4:02:54 0 [Note] InnoDB: started"
            ),
            "db-2 | 2026-11-26 4:02:54 0 [Note] InnoDB: started"
        );
    }

    #[test]
    fn a_pipe_gets_json_lines_naming_the_instance() {
        let v: serde_json::Value =
            serde_json::from_str(&render(LogFormat::Json, "db-1", LINE)).unwrap();
        assert_eq!(
            (v["instance"].as_str(), v["killed"].as_i64()),
            (Some("db-1"), Some(0))
        );
        let v: serde_json::Value =
            serde_json::from_str(&render(LogFormat::Json, "db-2", "plain text")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"instance": "db-2", "message": "plain text"})
        );
    }
}
