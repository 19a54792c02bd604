//! The Events the topology step asks a platform to record (`kubectl
//! describe`, `cnmysql local events`).

/// An event for `kubectl describe` / `cnmysql local events`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub instance: Option<String>,
    pub message: String,
}

impl Event {
    pub fn new(
        warning: bool,
        reason: &'static str,
        instance: Option<&str>,
        message: String,
    ) -> Event {
        Event {
            warning,
            reason,
            instance: instance.map(str::to_string),
            message,
        }
    }
}
