//! The pipeline file (TOML, the `pipelines` knob): its keys are a documented contract
//! (docs/pipelines.md). Parsing checks every key; each error names the file, the pipeline, the key
//! and what is allowed.

use serde::Deserialize;

/// The file's top level.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    namespace: Option<String>,
    #[serde(default)]
    pipeline: Vec<toml::Value>,
}

/// One `[[pipeline]]` as written.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// Iceberg table in the file's namespace.
    pub table: String,
    /// Exact topic names (one of `topics` and `topic_pattern`).
    #[serde(default)]
    pub topics: Vec<String>,
    /// A regular expression matched against whole topic names.
    pub topic_pattern: Option<String>,
    /// `avro` | `protobuf` | `json`.
    pub format: String,
    /// Schema file, relative to the pipeline file.
    pub schema: Option<String>,
    /// Protobuf message type.
    pub message: Option<String>,
    #[serde(default)]
    pub partition_by: Vec<String>,
    /// Identifier columns: what `dedup` compares.
    #[serde(default)]
    pub key: Vec<String>,
    /// `none` | `batch` | `window`.
    pub dedup: Option<String>,
    /// The timestamp column `dedup = "window"` looks back from.
    pub event_time: Option<String>,
    /// How far back `dedup = "window"` looks (default: the `dedup_window_minutes` knob).
    pub dedup_window_minutes: Option<i64>,
    /// `glue` | `confluent`: values carry their writer schema's id in a registry frame.
    pub registry: Option<String>,
    /// Glue registry name (default `default-registry`).
    pub registry_name: Option<String>,
    /// Confluent registry base URL.
    pub registry_url: Option<String>,
    /// The subject (Confluent) or schema name (Glue) whose latest version is the table's initial
    /// schema when `schema` is absent (default: `<first topic>-value` / `<first topic>`).
    pub registry_schema: Option<String>,
    /// Secrets Manager secret with the Confluent registry's credentials.
    pub registry_secret: Option<String>,
    /// Confluent: allow an `http://` `registry_url` on a host other than this one (credentials
    /// and schemas then travel in clear; for local use).
    pub registry_insecure: Option<bool>,
    /// `append` (default) | `upsert`.
    pub mode: Option<String>,
    /// Upsert: `debezium` | `dms` | `row`.
    pub envelope: Option<String>,
    /// Upsert: what orders the changes of one key (a column or a source-position field).
    pub order_by: Option<String>,
    /// Upsert: also append every change to `<table>_changelog`.
    pub changelog: Option<bool>,
    /// Debezium: `precise` (default) | `string` | `double`, as the connector's `decimal.handling.mode`.
    pub decimal_handling: Option<String>,
    /// Debezium: apply truncates (`op = "t"`) instead of dead-lettering them (default false).
    pub allow_truncate: Option<bool>,
    /// `reject` (default) | `truncate`: a timestamp or time finer than the column's microseconds.
    pub timestamp_precision: Option<String>,
    /// Kafka metadata columns beside the lineage: `timestamp`, `timestamp_type`, `key`, `headers`.
    #[serde(default)]
    pub kafka_columns: Vec<String>,
    /// JSON with a schema file: `ignore` (default) | `dead_letter`, a property the schema lacks.
    pub unknown_fields: Option<String>,
    /// The table's Iceberg format version: 2 (default) | 3.
    pub format_version: Option<i64>,
}

/// The keys a `[[pipeline]]` may have, for messages.
pub const PIPELINE_KEYS: &str = "table, topics, topic_pattern, format, schema, message, partition_by, key, dedup, event_time, \
     dedup_window_minutes, registry, registry_name, registry_url, registry_schema, registry_secret, registry_insecure, mode, envelope, order_by, changelog, decimal_handling, allow_truncate, timestamp_precision, kafka_columns, unknown_fields, format_version";

/// The parsed file: namespace and pipelines, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedFile {
    pub namespace: Option<String>,
    pub pipelines: Vec<PipelineSpec>,
}

/// Parse the text of a pipeline file named `file` (for messages).
pub fn parse(file: &str, text: &str) -> Result<ParsedFile, String> {
    let top: FileSpec = toml::from_str(text)
        .map_err(|e| format!("{file}{}: {}", line_of(text, &e), e.message().trim()).replace("unknown field", "unknown key"))?;
    if top.pipeline.is_empty() {
        return Err(format!("{file}: no [[pipeline]]: declare at least one (keys: {PIPELINE_KEYS})"));
    }
    let mut pipelines = Vec::with_capacity(top.pipeline.len());
    for (i, value) in top.pipeline.into_iter().enumerate() {
        let label = match value.get("table").and_then(toml::Value::as_str) {
            Some(t) => format!("{file}: pipeline `{t}` (#{})", i + 1),
            None => format!("{file}: pipeline #{}", i + 1),
        };
        let spec: PipelineSpec = value.try_into().map_err(|e: toml::de::Error| {
            format!("{label}: {}", e.message().trim().replace("unknown field", "unknown key").replace("missing field", "missing key"))
        })?;
        if let Some(schema) = spec.schema.as_ref().filter(|_| file.starts_with("s3://")) {
            confined_path(schema).map_err(|e| format!("{label}: key `schema`: {e}"))?;
        }
        pipelines.push(spec);
    }
    if let Some(namespace) = &top.namespace {
        plain_name(namespace).map_err(|e| format!("{file}: key `namespace`: {e}"))?;
    }
    Ok(ParsedFile { namespace: top.namespace, pipelines })
}

/// A schema file of an `s3://` pipeline file is named relative to it (the file's directory is
/// what is fetched with it), never an absolute path into the function's own file system. `..`
/// stays allowed: the shipped files share a schema directory beside theirs. A local file (the
/// CLI, a laptop) may name schemas anywhere its user can read.
fn confined_path(path: &str) -> Result<(), String> {
    use std::path::Component;
    match std::path::Path::new(path).components().find(|c| matches!(c, Component::RootDir | Component::Prefix(_))) {
        None if !path.is_empty() => Ok(()),
        _ => Err(format!("{path:?} must be a path relative to the pipeline file's directory")),
    }
}

/// A namespace that is one name (local warehouses make it a directory): no path separator,
/// no `.`-only segment, no control character.
fn plain_name(name: &str) -> Result<(), String> {
    let bad = name.is_empty()
        || name.contains(['/', '\\'])
        || name.chars().any(char::is_control)
        || name.split('.').any(|segment| segment.is_empty());
    if bad {
        return Err(format!("{name:?} is not a namespace name (no `/`, `\\`, empty or `..` segment, or control character)"));
    }
    Ok(())
}

/// ` (line L, column C)` where a TOML error is, when it says.
fn line_of(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else { return String::new() };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!(" (line {line}, column {column})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_paths_are_relative_and_the_namespace_is_one_name() {
        let pipeline = |schema: &str| format!("[[pipeline]]\ntable = \"t\"\ntopics = [\"a\"]\nformat = \"avro\"\nschema = \"{schema}\"\n");
        assert!(parse("s3://b/p.toml", &pipeline("schemas/t.avsc")).is_ok());
        let e = parse("s3://b/p.toml", &pipeline("/etc/passwd")).unwrap_err();
        assert!(e.contains("key `schema`") && e.contains("relative to the pipeline file"), "{e}");
        assert!(parse("/home/me/p.toml", &pipeline("/home/me/schemas/t.avsc")).is_ok(), "a local file names schemas anywhere");
        for namespace in ["../x", "a/b", "..", "a..b", ""] {
            let e = parse("p.toml", &format!("namespace = \"{namespace}\"\n{}", pipeline("t.avsc"))).unwrap_err();
            assert!(e.contains("key `namespace`"), "{namespace}: {e}");
        }
        assert!(parse("p.toml", &format!("namespace = \"shop_eu\"\n{}", pipeline("t.avsc"))).is_ok());
    }

    #[test]
    fn reads_the_documented_keys() {
        let f = parse(
            "p.toml",
            r#"
            namespace = "shop"
            [[pipeline]]
            table = "orders"
            topics = ["shop.orders"]
            format = "avro"
            schema = "schemas/order.avsc"
            partition_by = ["day(created_at)", "bucket(16, customer_id)"]
            key = ["order_id"]
            dedup = "none"
            event_time = "created_at"
            "#,
        )
        .unwrap();
        assert_eq!(f.namespace.as_deref(), Some("shop"));
        assert_eq!(f.pipelines[0].table, "orders");
        assert_eq!(f.pipelines[0].partition_by.len(), 2);
    }

    #[test]
    fn unknown_and_missing_keys_name_the_pipeline_and_the_key() {
        let e = parse("p.toml", "[[pipeline]]\ntable = \"orders\"\ntopic = [\"x\"]\nformat = \"avro\"\n").unwrap_err();
        assert!(e.contains("pipeline `orders` (#1)") && e.contains("unknown key `topic`") && e.contains("topics"), "{e}");
        let e = parse("p.toml", "[[pipeline]]\ntopics = [\"x\"]\nformat = \"avro\"\n").unwrap_err();
        assert!(e.contains("pipeline #1") && e.contains("missing key `table`"), "{e}");
        let e = parse("p.toml", "namespce = \"x\"\n").unwrap_err();
        assert!(e.contains("unknown key `namespce`"), "{e}");
        let e = parse("p.toml", "namespace = \"x\"\n").unwrap_err();
        assert!(e.contains("no [[pipeline]]"), "{e}");
        let e = parse("p.toml", "[[pipeline]]\ntable = 3\n").unwrap_err();
        assert!(e.contains("pipeline #1") && e.contains("invalid type"), "{e}");
        let e = parse("p.toml", "[[pipeline\n").unwrap_err();
        assert!(e.starts_with("p.toml (line 1, column "), "{e}");
        // An unterminated string says where (issue 46: no line number before).
        let e = parse("p.toml", "namespace = \"shop\"\n[[pipeline]]\ntable = \"orders\ntopics = [\"x\"]\n").unwrap_err();
        assert!(e.starts_with("p.toml (line 3, column "), "{e}");
    }
}
