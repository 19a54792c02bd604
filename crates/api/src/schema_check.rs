//! A manifest walked against the CRD's own OpenAPI schema: unknown fields
//! (with the closest known name), wrong types, values outside an enum —
//! what `kubectl apply --validate=strict` would refuse.

use kube::CustomResourceExt;
use serde_json::Value;

use crate::cluster::Cluster;
use crate::field_error::{FieldError, err};

/// The CRD's OpenAPI v3 schema as JSON.
pub fn crd_schema() -> Value {
    let crd = Cluster::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("the derived CRD has a schema");
    serde_json::to_value(schema).expect("a schema serialises")
}

/// Fields of the Service template that belong to the operator.
const OPERATOR_OWNED_SERVICE_FIELDS: &[&str] = &["selector", "ports", "clusterIP", "clusterIPs"];

pub(crate) fn check_against_schema(
    v: &Value,
    schema: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if v.is_null() {
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        let allowed: Vec<&Value> = allowed.iter().filter(|a| !a.is_null()).collect();
        if !allowed.contains(&v) {
            let names: Vec<String> = allowed
                .iter()
                .map(|a| a.as_str().map_or(a.to_string(), str::to_string))
                .collect();
            errors.push(err(
                path,
                format!("{v} is not allowed; use one of: {}", names.join(", ")),
            ));
            return;
        }
    }
    // Bounds the API server enforces (they also keep the CEL rules' cost
    // within its budget).
    let bound = |key: &str| schema.get(key).and_then(Value::as_u64);
    if let (Some(max), Some(text)) = (bound("maxLength"), v.as_str())
        && text.chars().count() as u64 > max
    {
        errors.push(err(
            path,
            format!(
                "is {} characters long; at most {max} are allowed: shorten it",
                text.chars().count()
            ),
        ));
    }
    if let (Some(max), Some(items)) = (bound("maxItems"), v.as_array())
        && items.len() as u64 > max
    {
        errors.push(err(
            path,
            format!(
                "has {} entries; at most {max} are allowed: remove some",
                items.len()
            ),
        ));
    }
    if let (Some(max), Some(map)) = (bound("maxProperties"), v.as_object())
        && map.len() as u64 > max
    {
        errors.push(err(
            path,
            format!(
                "has {} entries; at most {max} are allowed: remove some",
                map.len()
            ),
        ));
    }
    let ty = schema.get("type").and_then(Value::as_str);
    let wrong = |want: &str, errors: &mut Vec<FieldError>| {
        errors.push(err(path, format!("must be {want}, not {v}")));
    };
    match ty {
        Some("integer") if !(v.is_i64() || v.is_u64()) => {
            wrong("a whole number", errors);
        }
        Some("number") if !v.is_number() => {
            wrong("a number", errors);
        }
        Some("boolean") if !v.is_boolean() => {
            wrong("true or false", errors);
        }
        Some("string") if !v.is_string() => {
            wrong("a string (quote it)", errors);
        }
        Some("array") => match v.as_array() {
            None => wrong("a list", errors),
            Some(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        check_against_schema(item, item_schema, &format!("{path}[{i}]"), errors);
                    }
                }
            }
        },
        Some("object") => match v.as_object() {
            None => wrong("a mapping", errors),
            Some(map) => {
                let props = schema.get("properties").and_then(Value::as_object);
                let extra = schema.get("additionalProperties");
                for (k, child) in map {
                    let child_path = format!("{path}.{k}");
                    if let Some(s) = props.and_then(|p| p.get(k)) {
                        check_against_schema(child, s, &child_path, errors);
                    } else if let Some(s) = extra.filter(|e| e.is_object()) {
                        check_against_schema(child, s, &child_path, errors);
                    } else if schema.get("x-kubernetes-preserve-unknown-fields")
                        == Some(&Value::Bool(true))
                    {
                    } else if path.ends_with("emplate.spec")
                        && OPERATOR_OWNED_SERVICE_FIELDS.contains(&k.as_str())
                    {
                        errors.push(err(
                            child_path,
                            "is managed by the operator and cannot be set in a Service template; remove it",
                        ));
                    } else {
                        let known: Vec<&String> =
                            props.map(|p| p.keys().collect()).unwrap_or_default();
                        let hint = closest(k, &known)
                            .map(|c| format!("did you mean {c}? "))
                            .unwrap_or_default();
                        errors.push(err(
                            child_path,
                            format!(
                                "unknown field; {hint}known fields here: {}",
                                known
                                    .iter()
                                    .map(|s| s.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        ));
                    }
                }
            }
        },
        _ => {}
    }
}

/// The known name nearest to a misspelt one, if it is near.
fn closest<'a>(word: &str, known: &[&'a String]) -> Option<&'a str> {
    fn distance(a: &str, b: &str) -> usize {
        let a: Vec<char> = a.to_lowercase().chars().collect();
        let b: Vec<char> = b.to_lowercase().chars().collect();
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.iter().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                let sub = prev[j] + usize::from(ca != cb);
                cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
            }
            prev = cur;
        }
        prev[b.len()]
    }
    known
        .iter()
        .map(|k| (distance(word, k), k.as_str()))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, k)| k)
}
