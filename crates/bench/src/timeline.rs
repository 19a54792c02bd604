//! What the managers and the operator logged around a write gap: their
//! JSON log lines in the gap's window, times from the gap's start, so a
//! primary change's steps (read-only, acknowledgements closed, drained,
//! promoted, the status and the Service written) can be laid beside the
//! routing changes and what the writer met.

use std::time::{Duration, Instant, SystemTime};

use cnmysql_kubetest::KubeCluster;
use serde_json::Value;

/// At most this many lines from each source.
const MOST: usize = 25;

/// The log lines of the instances' Pods `pods` in `ns` and of the
/// operator from `before` ahead of `from` to `after` past `to`, one line
/// each, times relative to `from`.
pub(crate) fn around(
    k: &KubeCluster,
    ns: &str,
    pods: &[String],
    (from, to): (Instant, Instant),
) -> String {
    let now = (Instant::now(), SystemTime::now());
    let wall = |i: Instant| now.1 - now.0.duration_since(i);
    let zero = wall(from);
    let window = (
        wall(from) - Duration::from_secs(1),
        wall(to) + Duration::from_millis(500),
    );
    let mut out = String::new();
    let mut sources: Vec<(String, Vec<&str>)> = pods
        .iter()
        .map(|p| (p.clone(), vec!["-n", ns, "logs", p.as_str(), "--since=5m"]))
        .collect();
    sources.push((
        "operator".into(),
        vec![
            "-n",
            "cnmysql-system",
            "logs",
            "deploy/cnmysql-operator",
            "--since=5m",
        ],
    ));
    for (who, args) in sources {
        let Ok(text) = k.cp.kubectl(&args, None) else {
            continue;
        };
        let lines: Vec<String> = text
            .lines()
            .filter_map(|l| step(l, zero, window))
            .take(MOST)
            .collect();
        for l in lines {
            out.push_str(&format!("    {l} [{who}]\n"));
        }
    }
    out
}

/// One JSON log line as `+0.123s message (fields)`, if it falls in the
/// window.
fn step(line: &str, zero: SystemTime, (start, end): (SystemTime, SystemTime)) -> Option<String> {
    let v: Value = serde_json::from_str(line).ok()?;
    let at: jiff::Timestamp = v.get("timestamp")?.as_str()?.parse().ok()?;
    let at = SystemTime::from(at);
    if at < start || at > end {
        return None;
    }
    let rel = match at.duration_since(zero) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    };
    let message = v.get("message").and_then(Value::as_str).unwrap_or("");
    let fields: Vec<String> = v
        .as_object()?
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "timestamp" | "message" | "level" | "target"))
        .map(|(k, v)| {
            format!(
                "{k}={}",
                v.as_str().map(str::to_string).unwrap_or(v.to_string())
            )
        })
        .collect();
    Some(format!("{rel:+.3}s {message} ({})", fields.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_in_the_window_is_timed_from_the_gap() {
        let zero = SystemTime::from("2026-12-02T21:00:00Z".parse::<jiff::Timestamp>().unwrap());
        let window = (zero - Duration::from_secs(1), zero + Duration::from_secs(2));
        let line = r#"{"timestamp":"2026-12-02T21:00:00.250Z","level":"INFO","message":"promoted: writable primary","target":"cnmysql_instance","instance":"db-2"}"#;
        assert_eq!(
            step(line, zero, window).as_deref(),
            Some("+0.250s promoted: writable primary (instance=db-2)")
        );
        let early = line.replace("21:00:00.250", "20:59:58.000");
        assert_eq!(step(&early, zero, window), None);
        assert_eq!(step("mysqld: not json", zero, window), None);
    }
}
