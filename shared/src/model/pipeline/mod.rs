//! Pipelines, the user's model: Kafka topics → one Iceberg table each, with the format, schema,
//! partitioning, key and dedup declared in one TOML file (`pipelines` knob), or the single
//! telemetry pipeline the knobs describe when no file is given.
//!
//! Everything here is checked at start: a bad file stops start-up with a message naming the
//! file, the pipeline, the key and what is allowed.

mod build;
pub mod file;
mod inferred;
pub mod location;
pub mod partition;
pub mod template;
pub mod upsert;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use regex::Regex;

use crate::base::error::{Error, Result};
use crate::model::config::{Config, Dedup, Source};
use crate::model::registry::RegistrySpec;
use crate::model::schema::{Format, SourceSchema};
use crate::model::tables::kafka::KafkaColumns;
use crate::model::tables::{self, TableDef};

pub use crate::model::schema::format_name;
pub use build::parse_format;
use build::{build, latest_schema, registry_spec, resolve};
pub use file::PipelineSpec;

/// The reference telemetry schemas, shipped in the repository; the knob-only pipeline uses them.
pub mod reference {
    pub const PROTO: &str = include_str!("../../../proto/vehicle_telemetry.proto");
    pub const PROTO_MESSAGE: &str = "icestream.telemetry.v1.VehicleTelemetry";
    pub const AVRO: &str = include_str!("../../../avro/VehicleTelemetry.avsc");
    pub const JSON_SCHEMA: &str = include_str!("../../../json/vehicle_telemetry.schema.json");
    pub const PARTITION_BY: &[&str] = &["hour(event_time)", "bucket(16, vehicle_id)"];
    pub const KEY: &[&str] = &["vehicle_id", "event_time"];
    pub const EVENT_TIME: &str = "event_time";
}

/// Which topics a pipeline claims.
#[derive(Debug, Clone)]
pub enum Topics {
    /// Exactly these names.
    Exact(Vec<String>),
    /// Whole topic names matching this expression.
    Pattern(Regex),
    /// Every topic: the knob-only telemetry pipeline.
    Any,
}

impl Topics {
    pub fn claims(&self, topic: &str) -> bool {
        match self {
            Topics::Exact(names) => names.iter().any(|n| n == topic),
            Topics::Pattern(re) => re.is_match(topic),
            Topics::Any => true,
        }
    }
}

/// A writer id is read only under the subjects of the pipeline's topics.
impl crate::model::registry::TopicClaims for Topics {
    fn claims(&self, topic: &str) -> bool {
        Topics::claims(self, topic)
    }

    fn describe(&self, name: &dyn Fn(&str) -> String) -> String {
        match self {
            Topics::Exact(names) => names.iter().map(|t| name(t)).collect::<Vec<_>>().join(", "),
            Topics::Pattern(re) => format!("{} of topics matching /{}/", name("<topic>"), re.as_str()),
            Topics::Any => format!("{} of any topic", name("<topic>")),
        }
    }
}

impl std::fmt::Display for Topics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Topics::Exact(names) => write!(f, "{}", names.join(", ")),
            Topics::Pattern(re) => write!(f, "topics matching /{}/", re.as_str()),
            Topics::Any => write!(f, "every topic"),
        }
    }
}

/// One resolved pipeline: what to decode, where to write it, how to dedup.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// The table's name (also the pipeline's name in messages).
    pub table: String,
    pub topics: Topics,
    pub format: Format,
    pub source: SourceSchema,
    /// The table to create when it is missing: the source's columns, then the lineage columns.
    pub def: TableDef,
    /// `<table>_dead_letter`.
    pub dead_letter: TableDef,
    /// Identifier columns (what `dedup` compares).
    pub key: Vec<String>,
    pub dedup: Dedup,
    pub event_time: Option<String>,
    pub dedup_window_minutes: i64,
    /// What a timestamp or time finer than microseconds (the columns' unit) becomes.
    pub timestamp_precision: TimestampPrecision,
    /// Values framed by a schema registry: each record names its writer schema.
    pub registry: Option<RegistrySpec>,
    /// The registry subject (Confluent) or schema name (Glue) of the pipeline's values.
    pub registry_subject: Option<String>,
    /// `mode = "upsert"`: envelope, order and changelog; `None` for append pipelines.
    pub upsert: Option<upsert::Upsert>,
    /// `kafka_columns`: the metadata columns of the pipeline's table (its dead-letter table
    /// keeps the timestamp ones).
    pub kafka_columns: KafkaColumns,
    /// `schema = "infer"`: the columns come from the values (`source` holds only the declared
    /// timestamp fields).
    pub infer: bool,
}

/// A timestamp or time finer than the columns' microseconds (JSON text with nanoseconds, a
/// protobuf `Timestamp` or `TimeOfDay` with nanos, Debezium's `Nano*` values): one rule for
/// every path of a pipeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TimestampPrecision {
    /// The record is a dead letter naming the value (nothing is changed silently).
    #[default]
    Reject,
    /// Cut to the microsecond at or before it (towards the past, also before 1970).
    Truncate,
}

impl TimestampPrecision {
    /// Microseconds from whole `seconds` and `nanos` (0 to 999,999,999) past them, or why not
    /// (`what` names the value in the message).
    pub(crate) fn micros(self, seconds: i64, nanos: u32, what: &dyn std::fmt::Display) -> std::result::Result<i64, String> {
        if !nanos.is_multiple_of(1000) && self == TimestampPrecision::Reject {
            return Err(format!("{what} is finer than the column's microseconds: not truncated (timestamp_precision = \"reject\")"));
        }
        seconds
            .checked_mul(1_000_000)
            .and_then(|us| us.checked_add(i64::from(nanos / 1000)))
            .ok_or_else(|| format!("{what} is out of range"))
    }
}

impl Pipeline {
    /// `<table>_changelog` of an upsert pipeline with `changelog = true`.
    pub fn changelog(&self) -> Option<&TableDef> {
        self.upsert.as_ref().and_then(|u| u.changelog.as_ref())
    }
}

/// Every pipeline of one deployment, and where they came from.
#[derive(Debug, Clone)]
pub struct PipelineSet {
    /// The pipeline file as named by the knob; `None` for the knob-only pipeline.
    pub file: Option<String>,
    pub namespace: String,
    pub pipelines: Vec<Pipeline>,
    /// Pipelines with a table per topic (`table` with `{topic}`), as written: those with exact
    /// topics are also among `pipelines`, one per topic.
    pub templates: Vec<PipelineSpec>,
    /// The pipeline file's directory: a pattern's topics are resolved when first seen.
    base: PathBuf,
}

/// The tables one pipeline writes, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineTables {
    pub table: String,
    /// `mode = "upsert"`: the table keeps one row per key.
    pub upsert: bool,
    /// `<table>_changelog`, when the upsert pipeline keeps one.
    pub changelog: Option<String>,
}

impl PipelineTables {
    pub fn dead_letter(&self) -> String {
        tables::dead_letter_name(&self.table)
    }

    /// The table, its dead-letter table and its changelog.
    pub fn names(&self) -> impl Iterator<Item = String> + use<> {
        [Some(self.table.clone()), Some(self.dead_letter()), self.changelog.clone()].into_iter().flatten()
    }
}

impl PipelineSet {
    /// The pipelines the configuration names: the `pipelines` file (a path or `s3://` URI),
    /// or the telemetry pipeline of the `table`, `source` and `dedup` knobs.
    pub async fn from_config(config: &Config) -> Result<Self> {
        match &config.pipelines {
            None => Self::telemetry(config),
            Some(name) => {
                let local = location::fetch(name).await?;
                Self::load(&local, name, config).await
            }
        }
    }

    /// The pipeline file at `path` (`shown` names it in messages, e.g. its s3:// URI). A
    /// pipeline with a registry and no `schema` takes the latest registered version.
    pub async fn load(path: &Path, shown: &str, config: &Config) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Config(format!("pipeline file {shown}: {e}")))?;
        let parsed = file::parse(shown, &text).map_err(Error::Config)?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut pipelines = Vec::with_capacity(parsed.pipelines.len());
        let mut templates = Vec::new();
        for (i, spec) in parsed.pipelines.iter().enumerate() {
            let label = format!("{shown}: pipeline `{}` (#{})", spec.table, i + 1);
            if !template::is_template(&spec.table) {
                pipelines.push(load_one(spec, &label, &base, config).await?);
                continue;
            }
            pipelines.extend(template::load(spec, &label, &base, config).await?);
            templates.push(spec.clone());
        }
        let namespace = parsed.namespace.unwrap_or_else(|| config.namespace.clone());
        let set = Self { file: Some(shown.to_string()), namespace, pipelines, templates, base };
        set.check_claims()?;
        set.check_pattern_claims()?;
        Ok(set)
    }

    /// Every table the pipeline file (or the knob-only pipeline) writes: each pipeline's table,
    /// its dead-letter table and changelog; second, the table templates of patterns
    /// (`raw_{topic}`), whose tables are known only by listing the namespace for names they
    /// match ([`template::covers`]). Names only: no schema is read.
    pub async fn table_names(config: &Config) -> Result<(String, Vec<String>, Vec<String>)> {
        let (namespace, pipelines, templates) = Self::pipeline_tables(config).await?;
        Ok((namespace, pipelines.iter().flat_map(PipelineTables::names).collect(), templates))
    }

    /// The tables of each pipeline (a template's, one per exact topic), by name, read from the
    /// pipeline file alone (maintenance needs no schema, nor a schema registry), and the
    /// templates of patterns.
    pub async fn pipeline_tables(config: &Config) -> Result<(String, Vec<PipelineTables>, Vec<String>)> {
        let Some(name) = &config.pipelines else {
            return Ok((
                config.namespace.clone(),
                vec![PipelineTables { table: config.table.clone(), upsert: false, changelog: None }],
                vec![],
            ));
        };
        let local = location::fetch(name).await?;
        let text = std::fs::read_to_string(&local).map_err(|e| Error::Config(format!("pipeline file {name}: {e}")))?;
        let parsed = file::parse(name, &text).map_err(Error::Config)?;
        let pipelines = parsed
            .pipelines
            .iter()
            .flat_map(|p| match template::is_template(&p.table) {
                true => p.topics.iter().map(|topic| template::instance(p, topic)).collect(),
                false => vec![p.clone()],
            })
            .map(|p| {
                let upsert = p.mode.as_deref() == Some("upsert");
                PipelineTables {
                    changelog: (upsert && p.changelog == Some(true)).then(|| upsert::changelog_name(&p.table)),
                    table: p.table,
                    upsert,
                }
            })
            .collect();
        let templates = parsed
            .pipelines
            .iter()
            .filter(|p| template::is_template(&p.table) && p.topic_pattern.is_some())
            .map(|p| p.table.clone())
            .collect();
        Ok((parsed.namespace.unwrap_or_else(|| config.namespace.clone()), pipelines, templates))
    }

    /// The tables of each loaded pipeline, by name.
    pub fn tables_by_pipeline(&self) -> Vec<PipelineTables> {
        self.pipelines
            .iter()
            .map(|p| PipelineTables {
                table: p.table.clone(),
                upsert: p.upsert.is_some(),
                changelog: p.upsert.as_ref().and_then(|u| u.changelog.as_ref()).map(|c| c.name.clone()),
            })
            .collect()
    }

    /// The knob-only telemetry pipeline: the shipped schema of `source`, every topic.
    pub fn telemetry(config: &Config) -> Result<Self> {
        let (format, text, message) = match config.source {
            Source::Proto => (Format::Protobuf, reference::PROTO, Some(reference::PROTO_MESSAGE)),
            Source::Avro => (Format::Avro, reference::AVRO, None),
            Source::Json => (Format::Json, reference::JSON_SCHEMA, None),
        };
        let source = SourceSchema::from_text(format, text, message)?;
        let spec = PipelineSpec {
            table: config.table.clone(),
            topics: vec![],
            topic_pattern: Some(".*".into()),
            format: format_name(format).to_string(),
            schema: None,
            message: message.map(str::to_string),
            partition_by: reference::PARTITION_BY.iter().map(|s| s.to_string()).collect(),
            key: reference::KEY.iter().map(|s| s.to_string()).collect(),
            dedup: Some(config.dedup.to_string()),
            event_time: Some(reference::EVENT_TIME.to_string()),
            dedup_window_minutes: None,
            registry: None,
            registry_name: None,
            registry_url: None,
            registry_schema: None,
            registry_secret: None,
            registry_insecure: None,
            mode: None,
            envelope: None,
            order_by: None,
            changelog: None,
            decimal_handling: None,
            allow_truncate: None,
            timestamp_precision: None,
            kafka_columns: vec![],
            unknown_fields: None,
            format_version: config.format_version.map(i64::from),
        };
        let mut pipeline = build(&spec, format, source, None, config).map_err(|e| Error::Config(format!("telemetry pipeline: {e}")))?;
        pipeline.topics = Topics::Any;
        Ok(Self { file: None, namespace: config.namespace.clone(), pipelines: vec![pipeline], templates: vec![], base: PathBuf::new() })
    }

    /// The pipeline that claims `topic`; a topic no pipeline claims (or two patterns claim) is
    /// an error naming the topic and the file, so the mapping retries and alarms.
    pub fn route(&self, topic: &str) -> Result<usize> {
        let mut claims = self.pipelines.iter().enumerate().filter(|(_, p)| p.topics.claims(topic));
        let file = self.file.as_deref().unwrap_or("the knobs");
        match (claims.next(), claims.next()) {
            (Some((i, p)), None) => match self.pattern_templates(topic).next() {
                // Only a pipeline's own pattern can meet a template's: exact topics are refused at start.
                Some((_, spec)) => Err(Error::Routing(format!(
                    "topic {topic:?} is claimed by two pipelines in {file}: `{}` ({}) and `{}` (topics matching /{}/)",
                    p.table,
                    p.topics,
                    spec.table,
                    spec.topic_pattern.as_deref().unwrap_or_default()
                ))),
                None => Ok(i),
            },
            (None, _) => Err(Error::Routing(format!(
                "topic {topic:?} is claimed by no pipeline in {file} (tables: {})",
                self.pipelines.iter().map(|p| p.table.as_str()).collect::<Vec<_>>().join(", ")
            ))),
            (Some((_, a)), Some((_, b))) => Err(Error::Routing(format!(
                "topic {topic:?} is claimed by two pipelines in {file}: `{}` ({}) and `{}` ({})",
                a.table, a.topics, b.table, b.topics
            ))),
        }
    }

    /// Every table the pipelines write, dead-letter tables included.
    pub fn tables(&self) -> Vec<String> {
        self.pipelines
            .iter()
            .flat_map(|p| [Some(&p.def), Some(&p.dead_letter), p.changelog()].into_iter().flatten().map(|d| d.name.clone()))
            .collect()
    }

    /// No two pipelines share a table or an exact topic, and no exact topic of one matches
    /// another's pattern (two patterns can only be told apart per topic, by [`Self::route`]).
    fn check_claims(&self) -> Result<()> {
        let file = self.file.as_deref().unwrap_or("the knobs");
        let mut tables: BTreeMap<&str, &str> = BTreeMap::new();
        for p in &self.pipelines {
            for name in [Some(&p.def), Some(&p.dead_letter), p.changelog()].into_iter().flatten().map(|d| d.name.as_str()) {
                if let Some(other) = tables.insert(name, &p.table) {
                    return Err(Error::Config(format!("{file}: pipelines `{other}` and `{}` both write table `{name}`", p.table)));
                }
            }
        }
        for (i, p) in self.pipelines.iter().enumerate() {
            let Topics::Exact(names) = &p.topics else { continue };
            for topic in names {
                for (j, q) in self.pipelines.iter().enumerate() {
                    if i != j && q.topics.claims(topic) {
                        return Err(Error::Config(format!(
                            "{file}: topic {topic:?} is claimed by two pipelines: `{}` and `{}` ({}); a topic feeds one table",
                            p.table, q.table, q.topics
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// One spec checked and resolved (`label` names it in messages): a pipeline with a registry
/// and no `schema` takes the latest registered version of its subject.
async fn load_one(spec: &PipelineSpec, label: &str, base: &Path, config: &Config) -> Result<Pipeline> {
    let labelled = |e: String| Error::Config(format!("{label}: {e}"));
    let registry = registry_spec(spec).map_err(labelled)?;
    let source = match (&spec.schema, &registry) {
        (None, Some(registry)) => Some(latest_schema(spec, registry, config).await.map_err(|e| match e {
            Error::Registry(m) => {
                Error::Registry(format!("{label}: key `schema` absent, so the table's schema is the registry's latest: {m}"))
            }
            other => labelled(other.to_string()),
        })?),
        _ => None,
    };
    resolve(spec, base, config, registry, source).map_err(labelled)
}

#[cfg(test)]
mod tests;
