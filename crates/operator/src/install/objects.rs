//! What every object of an install shares: its name, labels and the YAML
//! it is written as.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

pub const NAME: &str = "cnmysql-operator";
pub const HTTP_PORT: i32 = 8080;

/// One object of the manifest, as YAML.
pub type Doc = String;

pub(super) fn labels() -> BTreeMap<String, String> {
    [
        ("app.kubernetes.io/name".to_string(), NAME.to_string()),
        (
            "app.kubernetes.io/part-of".to_string(),
            "cnmysql".to_string(),
        ),
    ]
    .into()
}

pub(super) fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_string),
        labels: Some(labels()),
        ..Default::default()
    }
}

pub(super) fn yaml<T: Serialize>(api_version: &str, kind: &str, obj: &T) -> Doc {
    let mut v = serde_json::to_value(obj).expect("serialises");
    let m = v.as_object_mut().expect("an object");
    let mut out = serde_json::Map::new();
    out.insert("apiVersion".into(), api_version.into());
    out.insert("kind".into(), kind.into());
    for (k, val) in std::mem::take(m) {
        out.insert(k, val);
    }
    serde_saphyr::to_string(&serde_json::Value::Object(out)).expect("YAML")
}
