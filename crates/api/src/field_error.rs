//! What is wrong with a manifest, field by field: each error names the
//! field (a dotted path) and the fix.

use std::fmt;

/// One problem with a manifest: the field (a dotted path) and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// All the problems found in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidCluster(pub Vec<FieldError>);

impl fmt::Display for InvalidCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "the Cluster manifest is invalid:")?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

pub(crate) fn err(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}
