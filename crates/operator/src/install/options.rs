//! What a team chooses of an install, and the checks that refuse a choice
//! before anything is written (each naming its option and the fix).

use std::collections::BTreeMap;

/// The operator's namespace when none is chosen.
pub const NAMESPACE: &str = "cnmysql-system";
/// The operator image the default install names.
pub const DEFAULT_IMAGE: &str = "ghcr.io/cloudnative-mysql/cnmysql:0.1.0";

/// How much the operator asks of its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resources {
    pub cpu_request: String,
    pub memory_request: String,
    pub memory_limit: String,
    /// None: no CPU limit (the operator is not throttled while it fails
    /// over many Clusters at once).
    pub cpu_limit: Option<String>,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpu_request: "50m".into(),
            memory_request: "32Mi".into(),
            memory_limit: "256Mi".into(),
            cpu_limit: None,
        }
    }
}

/// The log filter the operator starts with (`CNMYSQL_LOG`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogLevel {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// Everything `install generate` can be asked. `Options::default()` is
/// `deploy/operator.yaml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Where the operator runs (its Deployment, ServiceAccount, Lease).
    pub namespace: String,
    /// Watch only these namespaces (empty: all of them).
    pub watch_namespaces: Vec<String>,
    pub image: String,
    /// Operator replicas: one leads, the others wait for its Lease.
    pub replicas: i32,
    pub resources: Resources,
    pub log_level: LogLevel,
    /// PodMonitor, PrometheusRule and the dashboard's ConfigMap.
    pub monitoring: bool,
    /// Extra labels on the monitoring objects (a Prometheus's
    /// `ruleSelector` / `podMonitorSelector`, e.g. `release=prometheus`).
    pub monitoring_labels: BTreeMap<String, String>,
    /// The instances' NetworkPolicy, one in each of these namespaces.
    pub network_policy_namespaces: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            namespace: NAMESPACE.into(),
            watch_namespaces: Vec::new(),
            image: DEFAULT_IMAGE.into(),
            replicas: 1,
            resources: Resources::default(),
            log_level: LogLevel::default(),
            monitoring: false,
            monitoring_labels: BTreeMap::new(),
            network_policy_namespaces: Vec::new(),
        }
    }
}

/// A namespace name as the API server takes it (an RFC 1123 label).
fn is_namespace_name(s: &str) -> bool {
    cnmysql_api::validation::is_dns_label(s)
}

fn is_cpu(s: &str) -> bool {
    let digits = s.strip_suffix('m').unwrap_or(s);
    let mut parts = digits.splitn(2, '.');
    let whole = parts.next().unwrap_or("");
    let frac = parts.next();
    !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
        && !(s.ends_with('m') && frac.is_some())
}

fn is_memory(s: &str) -> bool {
    cnmysql_api::validation::quantity_bytes(s).is_some_and(|b| b > 0)
}

/// A label key or value a Kubernetes object accepts (the plain form: an
/// optional DNS prefix and a name of letters, digits, `-`, `_`, `.`).
fn is_label_part(s: &str, key: bool) -> bool {
    let name = if key {
        s.rsplit_once('/').map(|(_, n)| n).unwrap_or(s)
    } else {
        s
    };
    let prefix_ok = !key
        || s.rsplit_once('/').is_none_or(|(p, _)| {
            !p.is_empty()
                && p.len() <= 253
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        });
    let name_ok = name.len() <= 63
        && (name.is_empty() && !key
            || !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
                && name.as_bytes()[0].is_ascii_alphanumeric()
                && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric());
    prefix_ok && name_ok
}

impl Options {
    /// Every choice that cannot make a working install, each naming its
    /// option and what to write instead.
    pub fn check(&self) -> Result<(), Vec<String>> {
        let mut errors = Vec::new();
        let ns_rule = "lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit";
        if !is_namespace_name(&self.namespace) {
            errors.push(format!(
                "--namespace {:?}: not a namespace name ({ns_rule})",
                self.namespace
            ));
        }
        for (flag, list) in [
            ("--watch-namespaces", &self.watch_namespaces),
            ("--network-policy", &self.network_policy_namespaces),
        ] {
            for ns in list {
                if !is_namespace_name(ns) {
                    errors.push(format!("{flag} {ns:?}: not a namespace name ({ns_rule})"));
                }
            }
            let mut seen = std::collections::BTreeSet::new();
            for ns in list {
                if !seen.insert(ns) {
                    errors.push(format!("{flag}: {ns} is named twice"));
                }
            }
        }
        if self.image.trim().is_empty() || self.image.chars().any(char::is_whitespace) {
            errors.push(format!(
                "--image {:?}: an image reference without spaces, e.g. registry.example/cnmysql:0.1.0",
                self.image
            ));
        }
        if !(1..=5).contains(&self.replicas) {
            errors.push(format!(
                "--replicas {}: 1 to 5 (one leads; the others wait for its Lease)",
                self.replicas
            ));
        }
        errors.extend(self.resource_errors());
        for (k, v) in &self.monitoring_labels {
            if !is_label_part(k, true) || !is_label_part(v, false) {
                errors.push(format!(
                    "--monitoring-label {k}={v}: not a Kubernetes label (e.g. release=prometheus)"
                ));
            }
        }
        if !self.monitoring_labels.is_empty() && !self.monitoring {
            errors.push("--monitoring-label needs --monitoring".into());
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    fn resource_errors(&self) -> Vec<String> {
        let r = &self.resources;
        let mut errors = Vec::new();
        for (flag, v) in [
            ("--cpu-request", Some(&r.cpu_request)),
            ("--cpu-limit", r.cpu_limit.as_ref()),
        ] {
            if let Some(v) = v.filter(|v| !is_cpu(v)) {
                errors.push(format!("{flag} {v:?}: a CPU quantity, e.g. 100m or 1"));
            }
        }
        for (flag, v) in [
            ("--memory-request", &r.memory_request),
            ("--memory-limit", &r.memory_limit),
        ] {
            if !is_memory(v) {
                errors.push(format!("{flag} {v:?}: a memory quantity, e.g. 64Mi or 1Gi"));
            }
        }
        let bytes = |v: &str| cnmysql_api::validation::quantity_bytes(v).unwrap_or(0);
        if is_memory(&r.memory_request)
            && is_memory(&r.memory_limit)
            && bytes(&r.memory_request) > bytes(&r.memory_limit)
        {
            errors.push(format!(
                "--memory-request {} is more than --memory-limit {}: raise the limit",
                r.memory_request, r.memory_limit
            ));
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_valid() {
        assert_eq!(Options::default().check(), Ok(()));
    }

    #[test]
    fn each_bad_choice_names_its_option() {
        let o = Options {
            namespace: "Cnmysql_System".into(),
            watch_namespaces: vec!["shop".into(), "shop".into(), "-x".into()],
            image: "a b".into(),
            replicas: 0,
            resources: Resources {
                cpu_request: "1.5m".into(),
                memory_request: "1Gi".into(),
                memory_limit: "64Mi".into(),
                cpu_limit: Some("lots".into()),
            },
            monitoring_labels: [("release".into(), "a b".into())].into(),
            ..Options::default()
        };
        let errors = o.check().unwrap_err().join("\n");
        for want in [
            "--namespace \"Cnmysql_System\"",
            "--watch-namespaces: shop is named twice",
            "--watch-namespaces \"-x\"",
            "--image \"a b\"",
            "--replicas 0",
            "--cpu-request \"1.5m\"",
            "--cpu-limit \"lots\"",
            "--memory-request 1Gi is more than --memory-limit 64Mi",
            "--monitoring-label release=a b",
            "--monitoring-label needs --monitoring",
        ] {
            assert!(errors.contains(want), "missing {want:?} in\n{errors}");
        }
    }

    #[test]
    fn quantities_and_labels() {
        for ok in ["1", "100m", "0.5", "2.25"] {
            assert!(is_cpu(ok), "{ok}");
        }
        for bad in ["", "m", "1.m", ".5", "1e3", "-1", "1.5m"] {
            assert!(!is_cpu(bad), "{bad}");
        }
        assert!(is_label_part("app.kubernetes.io/name", true));
        assert!(is_label_part("release", true));
        assert!(is_label_part("", false));
        assert!(!is_label_part("", true));
        assert!(!is_label_part("Bad Key", true));
        assert!(!is_label_part("-x", false));
    }
}
