//! A Confluent-compatible schema registry over its REST API: `GET /schemas/ids/{id}` for a
//! frame's writer schema and `GET /schemas/ids/{id}/versions` for the subjects it is registered
//! under (the pipeline reads only its own: [`super::subjects`]), `GET
//! /subjects/{subject}/versions/latest` for a pipeline's initial schema. Basic auth (`user:password`) from a Secrets Manager secret or the `registry_auth` knob.

use std::time::Duration;

use base64::Engine;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

use super::{RegisteredSchema, parse_data_format};
use crate::base::error::{Error, Result};

/// A registry call slower than this fails the invocation (retried), not the whole timeout.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Responses larger than this are refused.
const MAX_RESPONSE: usize = 8 << 20;

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

#[derive(Clone)]
pub struct ConfluentRegistry {
    base: String,
    authorization: Option<String>,
    client: HttpsClient,
}

impl std::fmt::Debug for ConfluentRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfluentRegistry").field("base", &self.base).field("auth", &self.authorization.is_some()).finish()
    }
}

/// What the registry answers for a schema (by id or a subject's version).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SchemaResponse {
    schema: String,
    /// Absent for Avro.
    schema_type: Option<String>,
    id: Option<u32>,
    version: Option<u32>,
    #[serde(default)]
    references: Vec<serde_json::Value>,
}

/// One entry of `GET /schemas/ids/{id}/versions`.
#[derive(Deserialize)]
struct SubjectVersion {
    subject: String,
}

/// Whether a registry URL may be used: `https://`, or `http://` on this host (loopback: the
/// credentials and schemas never leave it) or with `insecure` (`registry_insecure = true`); no
/// credentials in it (they would be logged with every error: `registry_secret` or the
/// `registry_auth` knob carry them). The error never repeats a credential.
pub fn check_url(url: &str, insecure: bool) -> std::result::Result<(), String> {
    let shown = redact(url);
    let (scheme, rest) = url.split_once("://").ok_or_else(|| format!("{shown:?} is not an http:// or https:// URL"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(format!("{shown:?} carries credentials: refused (use `registry_secret` or the `registry_auth` knob)"));
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
    };
    if host.is_empty() {
        return Err(format!("{shown:?} names no host"));
    }
    match scheme {
        "https" => Ok(()),
        "http" if insecure || ["localhost", "127.0.0.1", "::1"].contains(&host) || host.starts_with("127.") => Ok(()),
        "http" => Err(format!(
            "{shown:?} is plain http to another host: credentials and schemas would travel in clear (use https://, or `registry_insecure = true` for local use)"
        )),
        _ => Err(format!("{shown:?} is not an http:// or https:// URL")),
    }
}

/// `url` without the credentials it may carry (`user:password@` becomes `***@`).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

impl ConfluentRegistry {
    /// `url`: `http(s)://host[:port][/path]`; `auth`: `user:password`.
    pub fn new(url: &str, auth: Option<String>) -> Result<Self> {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| Error::Registry(format!("no TLS root certificates for {url}: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let authorization = auth.map(|a| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(a)));
        Ok(Self { base: url.trim_end_matches('/').to_string(), authorization, client })
    }

    pub async fn by_id(&self, id: u32) -> Result<RegisteredSchema> {
        let response = self.get(&format!("/schemas/ids/{id}")).await?;
        let mut registered = to_registered(response, &format!("schema id {id}"), Some(id))?;
        // Soft-deleted versions included: records written before a delete stay readable.
        let versions: Vec<SubjectVersion> = self.get(&format!("/schemas/ids/{id}/versions?deleted=true")).await.map_err(|e| match e {
            // The id exists (just read): a 404 here is a registry without the route (before
            // Confluent 5.5), which cannot tie the id to a subject. Not the record's fault.
            Error::RegistryNotFound(m) => Error::Registry(format!(
                "schema id {id}: the registry does not list its subjects ({m}); needed to check it belongs to the pipeline's subject"
            )),
            other => other,
        })?;
        registered.subjects = versions.into_iter().map(|v| v.subject).collect();
        Ok(registered)
    }

    pub async fn latest(&self, subject: &str) -> Result<RegisteredSchema> {
        let encoded: String = subject
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b"-._".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        let response = self.get(&format!("/subjects/{encoded}/versions/latest")).await?;
        let mut registered = to_registered(response, &format!("subject {subject:?}"), None)?;
        registered.subjects = vec![subject.to_string()];
        Ok(registered)
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T> {
        let url = format!("{}{path}", self.base);
        let unreachable = |e: String| Error::Registry(format!("GET {url}: {e}"));
        let mut request = hyper::Request::get(&url).header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
        if let Some(auth) = &self.authorization {
            request = request.header("Authorization", auth);
        }
        let request = request.body(Empty::new()).map_err(|e| unreachable(e.to_string()))?;
        let response = tokio::time::timeout(CALL_TIMEOUT, self.client.request(request))
            .await
            .map_err(|_| unreachable(format!("no answer within {CALL_TIMEOUT:?}")))?
            .map_err(|e| unreachable(e.to_string()))?;
        let status = response.status();
        // Read up to the bound, not whole and then measured: a registry (or what answers in its
        // place) cannot make the function hold more.
        let body = tokio::time::timeout(CALL_TIMEOUT, http_body_util::Limited::new(response.into_body(), MAX_RESPONSE).collect())
            .await
            .map_err(|_| unreachable(format!("body not read within {CALL_TIMEOUT:?}")))?
            .map_err(|e| match e.downcast_ref::<http_body_util::LengthLimitError>() {
                Some(_) => unreachable(format!("response of more than {MAX_RESPONSE} bytes")),
                None => unreachable(e.to_string()),
            })?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body[..body.len().min(300)]).to_string();
            if status == hyper::StatusCode::NOT_FOUND {
                return Err(Error::RegistryNotFound(format!("GET {url}: HTTP {status}: {text}")));
            }
            return Err(unreachable(format!("HTTP {status}: {text}")));
        }
        serde_json::from_slice(&body).map_err(|e| unreachable(format!("not the expected response: {e}")))
    }
}

fn to_registered(response: SchemaResponse, what: &str, id: Option<u32>) -> Result<RegisteredSchema> {
    let type_name = response.schema_type.as_deref().unwrap_or("AVRO");
    let format = parse_data_format(type_name)
        .ok_or_else(|| Error::Registry(format!("{what}: schema type {type_name:?} (expected AVRO, PROTOBUF or JSON)")))?;
    // The well-known Protobuf types (and Confluent's built-in decimal, meta and google.type
    // files) are compiled in; other referenced subjects are not fetched (the writer schema
    // would be incomplete).
    for reference in &response.references {
        let name = reference.get("name").and_then(|n| n.as_str()).unwrap_or("?");
        if !crate::model::schema::protobuf::is_known_import(name) {
            return Err(Error::Registry(format!("{what}: references another schema ({name}), which is not supported")));
        }
    }
    let id = response.id.or(id).map(|i| i.to_string()).unwrap_or_default();
    let version = response.version.map(|v| format!(" v{v}")).unwrap_or_default();
    Ok(RegisteredSchema { format, text: response.schema, version: format!("Confluent id {id}{version}"), subjects: Vec::new() })
}

/// `user:password` from a Secrets Manager secret: JSON `{"username": …, "password": …}` or the
/// plain `user:password` string.
#[cfg(feature = "aws")]
pub async fn secret_auth(sdk: &aws_config::SdkConfig, secret: &str) -> Result<String> {
    let client = aws_sdk_secretsmanager::Client::new(sdk);
    let out = client.get_secret_value().secret_id(secret).send().await.map_err(|e| {
        Error::Registry(format!("registry credentials: {}", crate::base::aws::error("secretsmanager:GetSecretValue", secret, e)))
    })?;
    let text = out.secret_string().ok_or_else(|| Error::Registry(format!("secret {secret} has no string value")))?;
    #[derive(Deserialize)]
    struct Credentials {
        username: String,
        password: String,
    }
    match serde_json::from_str::<Credentials>(text) {
        Ok(c) => Ok(format!("{}:{}", c.username, c.password)),
        Err(_) if text.contains(':') && !text.trim_start().starts_with('{') => Ok(text.trim().to_string()),
        Err(_) => Err(Error::Registry(format!("secret {secret}: expected {{\"username\", \"password\"}} JSON or user:password"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_urls_are_https_local_http_or_explicitly_insecure_and_carry_no_credentials() {
        assert!(check_url("https://sr.example.com", false).is_ok());
        for local in ["http://127.0.0.1:8081", "http://localhost:8081/x", "http://[::1]:8081"] {
            assert!(check_url(local, false).is_ok(), "{local}");
        }
        let err = check_url("http://sr.example.com:8081", false).unwrap_err();
        assert!(err.contains("registry_insecure"), "{err}");
        assert!(check_url("http://sr.example.com:8081", true).is_ok());
        let err = check_url("https://user:s3cret@sr.example.com", false).unwrap_err();
        assert!(err.contains("credentials") && !err.contains("s3cret"), "{err}");
        assert!(check_url("ftp://sr.example.com", true).is_err());
        assert_eq!(redact("https://u:p@h:1/x?a@b"), "https://***@h:1/x?a@b");
    }

    /// A body past the bound is refused while it streams: an endless one fails at once, not
    /// after the call's timeout.
    #[tokio::test]
    async fn an_endless_response_is_cut_at_the_bound() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let _ = socket.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").await;
            let chunk = format!("{:x}\r\n{}\r\n", 1 << 16, "x".repeat(1 << 16));
            while socket.write_all(chunk.as_bytes()).await.is_ok() {}
        });
        let registry = ConfluentRegistry::new(&format!("http://127.0.0.1:{port}"), None).unwrap();
        let started = std::time::Instant::now();
        let err = registry.by_id(1).await.unwrap_err().to_string();
        assert!(err.contains("more than"), "{err}");
        assert!(started.elapsed() < CALL_TIMEOUT, "{:?}", started.elapsed());
    }
}
