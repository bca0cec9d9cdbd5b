//! Schema registries: a record's value names its writer schema (see [`frame`]); the schema is
//! fetched from the registry once per warm container and kept (bounded). Two registries:
//! the AWS Glue Schema Registry (`registry = "glue"`) and a Confluent-compatible REST one
//! (`registry = "confluent"`).
//!
//! A registry that cannot be reached fails the invocation (the mapping retries; nothing was
//! written). An id the registry does not have, one registered under a subject that is not the
//! pipeline's ([`subjects`]), or a schema that cannot be used (another format, a Protobuf
//! message index it does not have) makes the record a dead letter with the reason.

pub mod confluent;
pub mod frame;
#[cfg(feature = "aws")]
pub mod glue;
pub mod subjects;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::error::{Error, Result};
use prost_reflect::{FileDescriptor, MessageDescriptor};

use crate::model::schema::protobuf::ProtoSchema;
use crate::model::schema::{Format, SourceSchema};
pub use frame::{Frame, MessageIndex, WriterId};
pub use subjects::{Field, TopicClaims};

/// What the Glue registry client calls (`glue.rs`), on the registry and its schemas.
pub const GLUE_REGISTRY_ACTIONS: &[&str] = &["glue:GetSchemaVersion"];
/// What reading a Confluent registry's credentials calls (`confluent.rs`).
pub const REGISTRY_SECRET_ACTIONS: &[&str] = &["secretsmanager:GetSecretValue"];

/// A pipeline's registry, as its file declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrySpec {
    /// `registry = "glue"`, `registry_name` (default `default-registry`); `subject`: the
    /// `registry_schema` (a schema name), if configured.
    Glue { registry_name: String, subject: Option<String> },
    /// `registry = "confluent"`, `registry_url`; basic-auth credentials from `registry_secret`
    /// (a Secrets Manager secret) or the `registry_auth` knob; `subject`: `registry_schema`.
    Confluent { url: String, secret: Option<String>, subject: Option<String> },
}

impl RegistrySpec {
    pub fn kind(&self) -> &'static str {
        match self {
            RegistrySpec::Glue { .. } => "glue",
            RegistrySpec::Confluent { .. } => "confluent",
        }
    }

    /// The writer the frame of `value` names, from its header alone (see [`frame::writer`]).
    pub fn writer_of(&self, value: &[u8]) -> std::result::Result<WriterId, String> {
        frame::writer(value, matches!(self, RegistrySpec::Glue { .. }))
    }

    /// Reads the frame this registry's serializers write.
    pub fn frame<'a>(&self, value: &'a [u8], format: Format) -> std::result::Result<Frame<'a>, String> {
        match self {
            RegistrySpec::Glue { .. } => frame::glue(value, format),
            RegistrySpec::Confluent { .. } => frame::confluent(value, format),
        }
    }

    /// [`Self::frame`], a compressed payload inflated within `budget` (the batch's).
    pub fn frame_within<'a>(
        &self,
        value: &'a [u8],
        format: Format,
        budget: &frame::InflateBudget,
    ) -> std::result::Result<Frame<'a>, String> {
        match self {
            RegistrySpec::Glue { .. } => frame::glue_within(value, format, budget),
            RegistrySpec::Confluent { .. } => frame::confluent(value, format),
        }
    }

    /// The writer and message the frame of `value` names, nothing inflated past the message
    /// index (see [`frame::glue_key`]).
    pub fn key(&self, value: &[u8], format: Format) -> std::result::Result<(WriterId, Option<MessageIndex>), String> {
        match self {
            RegistrySpec::Glue { .. } => frame::glue_key(value, format),
            RegistrySpec::Confluent { .. } => frame::confluent(value, format).map(|f| (f.writer, f.message)),
        }
    }
}

/// A schema as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredSchema {
    pub format: Format,
    pub text: String,
    /// Registry-side name of the version (Confluent id, Glue version id and number).
    pub version: String,
    /// The subjects it is registered under (Confluent), or its schema as `registry/schema`
    /// (Glue): what [`subjects`] checks.
    pub subjects: Vec<String>,
}

/// Where registered schemas come from (one per process: the Glue client's size is no cost).
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
enum Source {
    #[cfg(feature = "aws")]
    Glue(glue::GlueRegistry),
    Confluent(confluent::ConfluentRegistry),
}

/// Writer schemas cached per container: more distinct ids than this and the cache starts over.
const CACHE_LIMIT: usize = 1024;

/// One pipeline's registry client with its cache of writer schemas.
#[derive(Debug)]
pub struct Registry {
    spec: RegistrySpec,
    source: Source,
    /// Registered text by id (one fetch per id), and compiled writer schemas by id and message.
    texts: Mutex<HashMap<WriterId, Arc<RegisteredSchema>>>,
    compiled: Mutex<HashMap<(WriterId, Option<MessageIndex>), std::result::Result<Arc<SourceSchema>, String>>>,
    calls: AtomicU64,
}

impl Registry {
    /// A client for `spec`; `auth` is the `registry_auth` knob (`user:password`) for Confluent.
    /// AWS configuration is loaded only for Glue or a Secrets Manager secret.
    pub async fn connect(spec: &RegistrySpec, auth: Option<&str>) -> Result<Self> {
        let source = match spec {
            #[cfg(feature = "aws")]
            RegistrySpec::Glue { registry_name, .. } => {
                Source::Glue(glue::GlueRegistry::new(&crate::base::aws::sdk_config().await, registry_name))
            }
            #[cfg(not(feature = "aws"))]
            RegistrySpec::Glue { .. } => return Err(Error::not_built("registry = \"glue\" (the Glue Schema Registry)", "aws")),
            RegistrySpec::Confluent { url, secret, .. } => {
                let auth = match secret {
                    #[cfg(feature = "aws")]
                    Some(secret) => Some(confluent::secret_auth(&crate::base::aws::sdk_config().await, secret).await?),
                    #[cfg(not(feature = "aws"))]
                    Some(_) => return Err(Error::not_built("registry_secret (Secrets Manager)", "aws")),
                    None => auth.map(str::to_string),
                };
                Source::Confluent(confluent::ConfluentRegistry::new(url, auth)?)
            }
        };
        Ok(Self { spec: spec.clone(), source, texts: Mutex::default(), compiled: Mutex::default(), calls: AtomicU64::new(0) })
    }

    pub fn spec(&self) -> &RegistrySpec {
        &self.spec
    }

    /// Registry calls made so far by this client (for the metrics line).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The latest registered version of `subject` (Confluent subject, Glue schema name).
    pub async fn latest(&self, subject: &str) -> Result<RegisteredSchema> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match &self.source {
            #[cfg(feature = "aws")]
            Source::Glue(g) => g.latest(subject).await,
            Source::Confluent(c) => c.latest(subject).await,
        }
    }

    /// The latest version of `subject` as a writer schema of `format` (`message`: the Protobuf
    /// message, else the file's first): its registry name, and the schema or why it is unusable.
    pub async fn latest_writer(
        &self,
        subject: &str,
        format: Format,
        message: Option<&str>,
    ) -> Result<(String, std::result::Result<SourceSchema, String>)> {
        let registered = self.latest(subject).await?;
        let source = match (format, message) {
            (Format::Protobuf, Some(name)) if registered.format == Format::Protobuf => {
                ProtoSchema::from_source_selecting(&registered.text, |file| {
                    file.parent_pool()
                        .get_message_by_name(name)
                        .ok_or_else(|| Error::Schema(format!("no message `{name}` in the registered schema")))
                })
                .map(SourceSchema::Protobuf)
                .map_err(|e| e.to_string())
            }
            _ => compile(&registered, None, format),
        };
        Ok((registered.version, source))
    }

    /// The writer schema of a frame of a record of `topics`, as the pipeline's `format` reads
    /// it: `Ok(Err(reason))` when the registry has it but it cannot be used (the record is a
    /// dead letter), `Err` when the registry cannot say (the invocation fails and is retried).
    pub async fn writer(
        &self,
        id: WriterId,
        message: Option<&MessageIndex>,
        format: Format,
        topics: &dyn TopicClaims,
    ) -> Result<std::result::Result<Arc<SourceSchema>, String>> {
        // The subject rule first, on every call: the compiled cache is by id, not by pipeline.
        let registered = match self.registered_or_reason(id, topics, Field::Value).await? {
            Ok(registered) => registered,
            Err(reason) => return Ok(Err(reason)),
        };
        let key = (id, message.cloned());
        if let Some(hit) = self.compiled.lock().map_err(poisoned)?.get(&key) {
            return Ok(hit.clone());
        }
        let compiled =
            compile(&registered, message, format).map(Arc::new).map_err(|e| format!("writer {id} ({}): {e}", registered.version));
        let mut cache = self.compiled.lock().map_err(poisoned)?;
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(key, compiled.clone());
        Ok(compiled)
    }

    /// The schema registered under `id`, read from `field` of records of `topics`; or why its
    /// records are dead letters: the registry answers it has none (not an outage; not cached:
    /// an id registered later reads then), or it is registered under no subject of the
    /// pipeline ([`subjects`]). `Err` when the registry cannot say.
    pub async fn registered_or_reason(
        &self,
        id: WriterId,
        topics: &dyn TopicClaims,
        field: Field,
    ) -> Result<std::result::Result<Arc<RegisteredSchema>, String>> {
        match self.registered(id).await {
            Err(Error::RegistryNotFound(m)) => Ok(Err(format!("the registry has no {id}: {m}"))),
            Ok(registered) if !registered.subjects.iter().any(|s| self.spec.accepts(s, topics, field)) => {
                let kind = match (&self.spec, registered.subjects.len()) {
                    (RegistrySpec::Glue { .. }, _) => "Glue schema",
                    (RegistrySpec::Confluent { .. }, 1) => "subject",
                    (RegistrySpec::Confluent { .. }, _) => "subjects",
                };
                let theirs = if registered.subjects.is_empty() { "none".to_string() } else { registered.subjects.join(", ") };
                Ok(Err(format!(
                    "{id} is registered under {kind} {theirs}, not under this pipeline's ({}): another subject's schema may not change the table",
                    self.spec.accepted(topics, field)
                )))
            }
            other => other.map(Ok),
        }
    }

    /// The schema registered under `id`, as the registry holds it (fetched once per container).
    pub async fn registered(&self, id: WriterId) -> Result<Arc<RegisteredSchema>> {
        if let Some(hit) = self.texts.lock().map_err(poisoned)?.get(&id) {
            return Ok(hit.clone());
        }
        let fetched = match (&self.source, id) {
            #[cfg(feature = "aws")]
            (Source::Glue(g), WriterId::Glue(version)) => {
                self.calls.fetch_add(1, Ordering::Relaxed);
                g.by_version_id(version).await
            }
            // The schema, then the subjects it is registered under: two calls.
            (Source::Confluent(c), WriterId::Confluent(id)) => {
                self.calls.fetch_add(2, Ordering::Relaxed);
                c.by_id(id).await
            }
            (_, other) => return Err(Error::Registry(format!("{other} does not belong to a {} registry", self.spec.kind()))),
        };
        let fetched = Arc::new(fetched.map_err(|e| match e {
            Error::Registry(m) => Error::Registry(format!("writer {id}: {m}")),
            Error::RegistryNotFound(m) => Error::RegistryNotFound(format!("writer {id}: {m}")),
            other => other,
        })?);
        let mut cache = self.texts.lock().map_err(poisoned)?;
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(id, fetched.clone());
        Ok(fetched)
    }
}

fn poisoned<T>(_: T) -> Error {
    Error::Invariant("the schema cache lock was poisoned".into())
}

/// A registered schema as the writer schema of `format` records.
pub fn compile(registered: &RegisteredSchema, message: Option<&MessageIndex>, format: Format) -> std::result::Result<SourceSchema, String> {
    if registered.format != format {
        return Err(format!(
            "the registered schema is {}, the pipeline reads {}",
            crate::model::schema::format_name(registered.format),
            crate::model::schema::format_name(format)
        ));
    }
    let schema = match format {
        Format::Protobuf => {
            ProtoSchema::from_source_selecting(&registered.text, |file| select_message(file, message)).map(SourceSchema::Protobuf)
        }
        _ => SourceSchema::from_text(format, &registered.text, None),
    };
    schema.map_err(|e| e.to_string())
}

/// The message a frame's index names in a registered `.proto` file.
fn select_message(file: &FileDescriptor, index: Option<&MessageIndex>) -> Result<MessageDescriptor> {
    let missing = |what: String| Error::Schema(format!("the schema has no message at {what}"));
    match index.unwrap_or(&MessageIndex::Path(vec![0])) {
        MessageIndex::Path(path) => {
            let (first, rest) = path.split_first().ok_or_else(|| missing("an empty index path".into()))?;
            let at = |i: &i32| usize::try_from(*i).ok();
            let mut message = at(first).and_then(|i| file.messages().nth(i)).ok_or_else(|| missing(format!("index path {path:?}")))?;
            for i in rest {
                message = at(i).and_then(|i| message.child_messages().nth(i)).ok_or_else(|| missing(format!("index path {path:?}")))?;
            }
            Ok(message)
        }
        MessageIndex::Sorted(index) => {
            let mut all = Vec::new();
            let mut level: Vec<MessageDescriptor> = file.messages().collect();
            while !level.is_empty() {
                let next = level.iter().flat_map(|m| m.child_messages()).collect();
                all.append(&mut level);
                level = next;
            }
            all.sort_by(|a, b| a.full_name().cmp(b.full_name()));
            all.into_iter().nth(*index as usize).ok_or_else(|| missing(format!("sorted index {index}")))
        }
    }
}

/// A registry's name for a data format.
pub fn parse_data_format(name: &str) -> Option<Format> {
    match name.to_ascii_uppercase().as_str() {
        "AVRO" => Some(Format::Avro),
        "PROTOBUF" => Some(Format::Protobuf),
        "JSON" => Some(Format::Json),
        _ => None,
    }
}
