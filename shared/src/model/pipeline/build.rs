//! One pipeline built from its spec: the table name checked, the schema loaded (or taken from
//! the registry, or inferred), partitioning, key, dedup and the table's columns.

use std::path::{Path, PathBuf};

use iceberg::spec::{FormatVersion, NestedField, NestedFieldRef, PrimitiveType, Schema, Type};
use regex::Regex;

use crate::base::error::{Error, Result};
use crate::model::config::{Config, Dedup};
use crate::model::evolve::add_kafka_columns;
use crate::model::infer::INFER;
use crate::model::registry::{Registry, RegistrySpec};
use crate::model::schema::{Format, SourceSchema};
use crate::model::tables::kafka::{self, KafkaColumns};
use crate::model::tables::{self, TableDef, lineage};

use super::file::PipelineSpec;
use super::{Pipeline, TimestampPrecision, Topics, inferred, partition, upsert};

const TABLE_NAME_RULE: &str = "lowercase letters, digits and _, starting with a letter, at most 100 characters";

/// Check one spec and load its schema (relative to `base`), unless `fetched` (the registry's
/// latest) stands in for an absent `schema`.
pub(super) fn resolve(
    spec: &PipelineSpec,
    base: &Path,
    config: &Config,
    registry: Option<RegistrySpec>,
    fetched: Option<SourceSchema>,
) -> std::result::Result<Pipeline, String> {
    let format = parse_format(&spec.format)
        .ok_or_else(|| format!("key `format`: {:?} is not allowed: allowed are avro | protobuf | json", spec.format))?;
    if spec.message.is_some() && format != Format::Protobuf {
        return Err(format!("key `message`: only for format = \"protobuf\", not {:?}", spec.format));
    }
    let mut declared_row = None;
    let infer = spec.schema.as_deref() == Some(INFER);
    let source = match (fetched, spec.schema.as_deref()) {
        (_, Some(INFER)) => inferred::source(spec, format, registry.is_some())?,
        (Some(source), _) => source,
        (None, Some(schema_path)) if format == Format::Protobuf && debezium_upsert(spec) => {
            // Protobuf cannot declare dates, uuids, decimals or a timestamp's unit: the row is
            // declared as Debezium's AvroConverter registers `after`.
            let text = std::fs::read_to_string(base.join(schema_path)).map_err(|e| format!("key `schema`: {schema_path}: {e}"))?;
            let (row, connect) = crate::model::schema::debezium::declared_row(&text).map_err(|e| {
                format!("key `schema`: {schema_path}: with format = \"protobuf\" and envelope = \"debezium\" the row is an Avro record (.avsc, `connect.name` semantic types allowed): {e}")
            })?;
            declared_row = Some(connect);
            row
        }
        (None, Some(schema_path)) => {
            let path: PathBuf = base.join(schema_path);
            SourceSchema::load(format, &path, spec.message.as_deref()).map_err(|e| format!("key `schema`: {e}"))?
        }
        (None, None) => {
            return Err("key `schema`: missing: the schema file of the values (.avsc | .proto or .pb/.desc | JSON Schema), \
                        or a `registry` whose latest version is the table's schema"
                .into());
        }
    };
    let mut source = source;
    match (spec.unknown_fields.as_deref(), &mut source) {
        (None | Some("ignore"), _) => {}
        (Some("dead_letter"), SourceSchema::Json(json)) if spec.schema.is_some() => json.reject_unknown = true,
        (Some("dead_letter"), _) => return Err("key `unknown_fields`: only with format = \"json\" and a `schema` file".into()),
        (Some(other), _) => return Err(format!("key `unknown_fields`: {other:?} is not allowed: allowed are ignore | dead_letter")),
    }
    let mut pipeline = build(spec, format, source, registry, config)?;
    pipeline.infer = infer;
    if let (Some(upsert), Some(declared)) = (pipeline.upsert.as_mut(), declared_row) {
        upsert.declared_row = declared;
    }
    Ok(pipeline)
}

/// Whether a spec is an upsert of Debezium envelopes.
fn debezium_upsert(spec: &PipelineSpec) -> bool {
    spec.mode.as_deref() == Some("upsert") && spec.envelope.as_deref() == Some("debezium")
}

/// The registry keys of a spec, checked.
pub(super) fn registry_spec(spec: &PipelineSpec) -> std::result::Result<Option<RegistrySpec>, String> {
    let only = |key: &str, kind: &str| format!("key `{key}`: only with registry = \"{kind}\"");
    match spec.registry.as_deref() {
        None => {
            for (key, value) in [
                ("registry_name", &spec.registry_name),
                ("registry_url", &spec.registry_url),
                ("registry_schema", &spec.registry_schema),
                ("registry_secret", &spec.registry_secret),
            ] {
                if value.is_some() {
                    return Err(format!("key `{key}`: only with `registry` (glue | confluent)"));
                }
            }
            if spec.registry_insecure.is_some() {
                return Err(only("registry_insecure", "confluent"));
            }
            Ok(None)
        }
        Some("glue") => {
            if spec.registry_url.is_some() {
                return Err(only("registry_url", "confluent"));
            }
            if spec.registry_insecure.is_some() {
                return Err(only("registry_insecure", "confluent"));
            }
            if spec.registry_secret.is_some() {
                return Err(only("registry_secret", "confluent"));
            }
            let registry_name = spec.registry_name.clone().unwrap_or_else(|| "default-registry".into());
            if registry_name.is_empty() || registry_name.len() > 255 {
                return Err(format!("key `registry_name`: {registry_name:?} is not a Glue registry name (1 to 255 characters)"));
            }
            Ok(Some(RegistrySpec::Glue { registry_name, subject: spec.registry_schema.clone() }))
        }
        Some("confluent") => {
            if spec.registry_name.is_some() {
                return Err(only("registry_name", "glue"));
            }
            let url =
                spec.registry_url.clone().ok_or("key `registry_url`: required with registry = \"confluent\" (http(s)://host[:port])")?;
            crate::model::registry::confluent::check_url(&url, spec.registry_insecure == Some(true))
                .map_err(|e| format!("key `registry_url`: {e}"))?;
            Ok(Some(RegistrySpec::Confluent { url, secret: spec.registry_secret.clone(), subject: spec.registry_schema.clone() }))
        }
        Some(other) => Err(format!("key `registry`: {other:?} is not allowed: allowed are glue | confluent")),
    }
}

/// The registry subject of a pipeline's values: `registry_schema`, else the first topic's
/// (see [`RegistrySpec::value_subject`]).
fn registry_subject(spec: &PipelineSpec, registry: &RegistrySpec) -> Option<String> {
    match spec.topics.first() {
        Some(topic) => Some(registry.value_subject(topic)),
        None => registry.configured_subject().map(str::to_string),
    }
}

/// The latest registered schema of the pipeline's subject, as its writer schema.
pub(super) async fn latest_schema(spec: &PipelineSpec, registry: &RegistrySpec, config: &Config) -> Result<SourceSchema> {
    let format = parse_format(&spec.format).ok_or_else(|| Error::Config(format!("key `format`: {:?} is not allowed", spec.format)))?;
    let subject = registry_subject(spec, registry).ok_or_else(|| {
        Error::Config("key `registry_schema`: required with `topic_pattern` and no `schema` (which subject is the table's schema)".into())
    })?;
    let client = Registry::connect(registry, config.registry_auth.as_ref().map(|a| a.expose())).await?;
    if debezium_upsert(spec) && format == Format::Avro {
        // The subject holds the change envelope: the table's schema is the row it carries.
        let registered = client.latest(&subject).await?;
        return crate::model::schema::debezium::DebeziumAvro::parse(&registered.text).map(|envelope| envelope.row).map_err(|e| {
            Error::Config(format!("key `registry_schema`: {subject:?} ({}): not a Debezium Avro envelope: {e}", registered.version))
        });
    }
    if debezium_upsert(spec) && format == Format::Protobuf {
        let (version, envelope) = client.latest_writer(&subject, format, spec.message.as_deref()).await?;
        let row = match envelope {
            Ok(SourceSchema::Protobuf(envelope)) => {
                crate::model::schema::debezium_proto::DebeziumProto::parse(&envelope.message, None, &Default::default()).map(|e| e.row)
            }
            Ok(_) => Err("not a Protobuf schema".into()),
            Err(e) => Err(e),
        };
        return row
            .map_err(|e| Error::Config(format!("key `registry_schema`: {subject:?} ({version}): not a Debezium Protobuf envelope: {e}")));
    }
    let (version, source) = client.latest_writer(&subject, format, spec.message.as_deref()).await?;
    source.map_err(|e| Error::Config(format!("key `registry_schema`: {subject:?} ({version}): {e}")))
}

/// A pipeline from a checked spec and its loaded schema.
pub(super) fn build(
    spec: &PipelineSpec,
    format: Format,
    source: SourceSchema,
    registry: Option<RegistrySpec>,
    config: &Config,
) -> std::result::Result<Pipeline, String> {
    let name_ok = spec.table.len() <= 100
        && spec.table.starts_with(|c: char| c.is_ascii_lowercase())
        && spec.table.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !name_ok {
        return Err(format!("key `table`: {:?} is not a table name: {TABLE_NAME_RULE}", spec.table));
    }
    let topics = match (&spec.topics[..], &spec.topic_pattern) {
        ([], None) => return Err("keys `topics` / `topic_pattern`: one of the two is required".into()),
        ([_, ..], Some(_)) => return Err("keys `topics` and `topic_pattern`: give one of the two, not both".into()),
        (names, None) => {
            if let Some(bad) =
                names.iter().find(|t| t.is_empty() || t.len() > 249 || !t.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)))
            {
                return Err(format!("key `topics`: {bad:?} is not a Kafka topic name (letters, digits, . _ -, 1 to 249 characters)"));
            }
            Topics::Exact(names.to_vec())
        }
        ([], Some(pattern)) => Topics::Pattern(
            Regex::new(&format!("^(?:{pattern})$"))
                .map_err(|e| format!("key `topic_pattern`: {pattern:?} is not a regular expression: {e}"))?,
        ),
    };
    let timestamp_precision = match spec.timestamp_precision.as_deref().unwrap_or("reject") {
        "reject" => TimestampPrecision::Reject,
        "truncate" => TimestampPrecision::Truncate,
        other => return Err(format!("key `timestamp_precision`: {other:?} is not allowed: allowed are reject | truncate")),
    };
    let format_version = match spec.format_version {
        None => None,
        Some(2) => Some(FormatVersion::V2),
        Some(3) => Some(FormatVersion::V3),
        Some(other) => return Err(format!("key `format_version`: {other} is not allowed: allowed are 2 | 3")),
    };
    let dedup = match spec.dedup.as_deref().unwrap_or("none") {
        "none" => Dedup::None,
        "batch" => Dedup::Batch,
        "window" => Dedup::Window,
        other => return Err(format!("key `dedup`: {other:?} is not allowed: allowed are none | batch | window")),
    };
    let source_schema = source.to_iceberg().map_err(|e| format!("key `schema`: {e}"))?;
    let columns = source_schema.as_struct();
    for name in &spec.key {
        let field = columns.field_by_name(name).ok_or_else(|| format!("key `key`: no top-level column {name:?} in the schema"))?;
        if !field.field_type.is_primitive() || matches!(*field.field_type, Type::Primitive(PrimitiveType::Float | PrimitiveType::Double)) {
            return Err(format!(
                "key `key`: column {name:?} is {}: a key column must be a primitive other than float/double",
                field.field_type
            ));
        }
    }
    if dedup != Dedup::None && spec.key.is_empty() {
        return Err(format!("key `dedup`: {:?} compares rows by `key`, which is empty", spec.dedup.as_deref().unwrap_or_default()));
    }
    if let Some(t) = &spec.event_time {
        let field = columns.field_by_name(t).ok_or_else(|| format!("key `event_time`: no top-level column {t:?} in the schema"))?;
        if !matches!(*field.field_type, Type::Primitive(PrimitiveType::Timestamp | PrimitiveType::Timestamptz)) {
            return Err(format!("key `event_time`: column {t:?} is {}, not a timestamp", field.field_type));
        }
    }
    if dedup == Dedup::Window && spec.event_time.is_none() {
        return Err("key `event_time`: required with dedup = \"window\" (the column the window looks back from)".into());
    }
    let window = spec.dedup_window_minutes.unwrap_or(config.dedup_window_minutes);
    if !(1..=10_080).contains(&window) {
        return Err(format!("key `dedup_window_minutes`: {window} is not allowed: a whole number from 1 to 10080"));
    }
    let kafka_columns = KafkaColumns::parse(&spec.kafka_columns).map_err(|e| format!("key `kafka_columns`: {e}"))?;
    if !kafka_columns.is_empty() && spec.mode.as_deref() == Some("upsert") {
        return Err("key `kafka_columns`: only with mode = \"append\" (an upsert table's row is its key's newest change)".into());
    }
    let upsert = upsert::check(spec, format, registry.is_some(), &source_schema)?;
    let mut schema = table_schema(&source_schema, &spec.key, kafka_columns).map_err(|e| format!("key `schema`: {e}"))?;
    if let Some(upsert) = &upsert {
        schema = upsert::table_schema(schema, &upsert.order).map_err(|e| format!("key `schema`: {e}"))?;
    }
    let partition_spec = partition::spec(&spec.partition_by, &schema).map_err(|e| format!("key `partition_by`: {e}"))?;
    // The changelog is append-only: the reference properties; the table kept by guarded apply
    // adds the upsert ones (small row groups and pages, key bloom filters, merge-on-read).
    let changelog_properties = tables::reference_properties(&config.compression, config.target_file_size_bytes);
    let mut properties = changelog_properties.clone();
    if upsert.is_some() {
        tables::add_upsert_properties(&mut properties, &spec.key.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let upsert = match upsert {
        None => None,
        Some(mut resolved) => {
            if spec.changelog == Some(true) {
                let changelog =
                    upsert::changelog_schema(&schema, &spec.key, resolved.order_column()).map_err(|e| format!("key `changelog`: {e}"))?;
                let partition_spec = partition::spec(&spec.partition_by, &changelog).map_err(|e| format!("key `partition_by`: {e}"))?;
                let name = upsert::changelog_name(&spec.table);
                resolved.changelog = Some(TableDef {
                    name,
                    schema: changelog,
                    partition_spec,
                    properties: changelog_properties,
                    sort_order: None,
                    format_version: None,
                });
            }
            Some(resolved)
        }
    };
    let sort_order = match &upsert {
        Some(_) => Some(crate::model::sort_order::by_key(&schema, &spec.key).map_err(|e| format!("key `key`: {e}"))?),
        None => None,
    };
    let def = TableDef { name: spec.table.clone(), schema, partition_spec, properties, sort_order, format_version };
    let mut dead_letter =
        tables::dead_letter_table(&tables::dead_letter_name(&spec.table), &config.compression).map_err(|e| e.to_string())?;
    dead_letter.schema = with_kafka_columns(&dead_letter.schema, kafka_columns.for_dead_letters()).map_err(|e| e.to_string())?;
    Ok(Pipeline {
        table: spec.table.clone(),
        topics,
        format,
        source,
        def,
        dead_letter,
        key: spec.key.clone(),
        dedup,
        event_time: spec.event_time.clone(),
        dedup_window_minutes: window,
        timestamp_precision,
        registry_subject: registry.as_ref().and_then(|r| registry_subject(spec, r)),
        registry,
        upsert,
        kafka_columns,
        infer: false,
    })
}

/// `format` as the pipeline file spells it.
pub fn parse_format(word: &str) -> Option<Format> {
    match word {
        "avro" => Some(Format::Avro),
        "protobuf" => Some(Format::Protobuf),
        "json" => Some(Format::Json),
        _ => None,
    }
}

/// The table schema for a source schema: its columns (key columns required, as Iceberg
/// identifier fields must be), then the lineage columns with the next field ids, then the
/// Kafka metadata columns asked for.
fn table_schema(source: &Schema, key: &[String], kafka_columns: KafkaColumns) -> Result<Schema> {
    let mut fields: Vec<NestedFieldRef> = source
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            if key.contains(&f.name) && !f.required {
                let mut required = (**f).clone();
                required.required = true;
                required.into()
            } else {
                f.clone()
            }
        })
        .collect();
    if let Some(name) =
        source.as_struct().fields().iter().map(|f| f.name.as_str()).find(|n| lineage::is_lineage(n) || kafka::is_kafka_column(n))
    {
        return Err(Error::Config(format!("column {name:?} is reserved for Kafka lineage and metadata columns; rename it in the schema")));
    }
    let next = source.highest_field_id() + 1;
    fields.push(NestedField::required(next, lineage::TOPIC, Type::Primitive(PrimitiveType::String)).into());
    fields.push(NestedField::required(next + 1, lineage::PARTITION, Type::Primitive(PrimitiveType::Int)).into());
    fields.push(NestedField::required(next + 2, lineage::OFFSET, Type::Primitive(PrimitiveType::Long)).into());
    let key_ids: Vec<i32> = key.iter().filter_map(|k| source.as_struct().field_by_name(k).map(|f| f.id)).collect();
    let schema = Schema::builder().with_schema_id(0).with_identifier_field_ids(key_ids).with_fields(fields).build()?;
    with_kafka_columns(&schema, kafka_columns)
}

/// A new table's schema with the metadata columns `kafka` at its end (still its first schema).
fn with_kafka_columns(schema: &Schema, kafka: KafkaColumns) -> Result<Schema> {
    let mut last = schema.highest_field_id();
    let Some(with_columns) = add_kafka_columns(schema, kafka, &mut last).map_err(Error::Config)? else { return Ok(schema.clone()) };
    let fields = with_columns.as_struct().fields().to_vec();
    Ok(Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_identifier_field_ids(schema.identifier_field_ids())
        .with_fields(fields)
        .build()?)
}
