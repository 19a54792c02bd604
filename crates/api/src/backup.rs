//! Where a Cluster's backups and binlog archive go: an object store (S3 or
//! an S3-compatible server, Google Cloud Storage, Azure Blob) or, on the
//! local platform, a directory. Shaped like CloudNativePG's
//! `barmanObjectStore`; credentials come from Secrets (locally, from files
//! named the same way) and never appear in the status, events or logs.
//!
//! Not yet part of the Cluster's spec: the backup and recovery that use it
//! are being built (issue 23).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An object store destination.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStore {
    /// `s3://bucket/prefix`, `gs://bucket/prefix`,
    /// `azure://container/prefix` (the account from `azureCredentials`) or
    /// `file:///directory`.
    pub destination_path: String,
    /// The S3 endpoint of an S3-compatible server (`https://…`); the
    /// provider's default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    /// The S3 region (`us-east-1` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Address buckets in the path (`https://host/bucket/key`), as most
    /// S3-compatible servers want, rather than as a host name.
    #[serde(default)]
    pub path_style: bool,
    /// A CA bundle (PEM) the endpoint's certificate is checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_ca: Option<SecretKeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_credentials: Option<S3Credentials>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub google_credentials: Option<GoogleCredentials>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure_credentials: Option<AzureCredentials>,
}

/// A key of a Secret in the Cluster's namespace (locally: the file
/// `<secrets dir>/<name>/<key>`).
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Credentials {
    pub access_key_id: SecretKeyRef,
    pub secret_access_key: SecretKeyRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token: Option<SecretKeyRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GoogleCredentials {
    /// A service account key (JSON).
    pub application_credentials: SecretKeyRef,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureCredentials {
    pub storage_account: SecretKeyRef,
    pub storage_key: SecretKeyRef,
}
