//! The upsert keys of a pipeline (`mode`, `envelope`, `order_by`, `changelog`): checked at
//! start, and what they add to the tables. An upsert table keeps one live row per `key`; the
//! change that wins for a key is the one with the highest order value (`order_by`), the Kafka
//! (partition, offset) breaking ties.

use iceberg::spec::{NestedField, NestedFieldRef, PrimitiveType, Schema, Type};

use super::PipelineSpec;
use crate::model::schema::Format;
use crate::model::tables::{TableDef, lineage};

/// Column of an upsert table holding the envelope's source position when `order_by` names one.
pub use crate::model::tables::SOURCE_POSITION;

/// `<table>_changelog` of an upsert pipeline with `changelog = true`.
pub fn changelog_name(table: &str) -> String {
    format!("{table}_changelog")
}
/// Changelog column: `I`, `U` or `D`.
pub const OPERATION: &str = "operation";

/// How a record value carries its change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    /// Debezium JSON (`before`/`after`/`op`/`source`), with or without the embedded schema.
    Debezium,
    /// The AWS DMS Kafka target (`data`/`metadata`).
    Dms,
    /// A CSV line as AWS DMS writes change files: the operation (`I`, `U`, `D`), then the
    /// table's columns in schema order.
    Csv,
    /// The value is the row; a null value deletes the record key's row.
    Row,
}

impl Envelope {
    pub fn name(self) -> &'static str {
        match self {
            Envelope::Debezium => "debezium",
            Envelope::Dms => "dms",
            Envelope::Csv => "csv",
            Envelope::Row => "row",
        }
    }

    fn parse(word: &str) -> Option<Self> {
        [Envelope::Debezium, Envelope::Dms, Envelope::Csv, Envelope::Row].into_iter().find(|e| e.name() == word)
    }
}

impl std::fmt::Display for Envelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How Debezium wrote decimals (its connector setting `decimal.handling.mode`): what a JSON
/// string in a decimal column is when no embedded schema says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecimalHandling {
    /// Base64 of the big-endian two's-complement unscaled value (Debezium's default).
    #[default]
    Precise,
    /// The decimal as text (`"123.45"`).
    String,
    /// A JSON number (strings are refused).
    Double,
}

impl DecimalHandling {
    const ALLOWED: &'static str = "precise | string | double";

    pub fn name(self) -> &'static str {
        match self {
            DecimalHandling::Precise => "precise",
            DecimalHandling::String => "string",
            DecimalHandling::Double => "double",
        }
    }

    fn parse(word: &str) -> Option<Self> {
        [Self::Precise, Self::String, Self::Double].into_iter().find(|d| d.name() == word)
    }
}

/// A source-position field of an envelope, as `order_by` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceField {
    /// Debezium `source.lsn` (PostgreSQL).
    Lsn,
    /// Debezium `source.scn` (Oracle; a number or a numeric string).
    Scn,
    /// Debezium `source.file` + `source.pos` (MySQL binlog): the file's sequence number, then
    /// the position in it.
    BinlogPos,
    /// Debezium `source.ts_ms`.
    TsMs,
    /// DMS `metadata.timestamp`.
    DmsTimestamp,
}

impl SourceField {
    const DEBEZIUM: &'static str = "source.lsn | source.scn | source.pos | source.ts_ms";

    fn parse(envelope: Envelope, name: &str) -> Option<Self> {
        match (envelope, name) {
            (Envelope::Debezium, "source.lsn") => Some(Self::Lsn),
            (Envelope::Debezium, "source.scn") => Some(Self::Scn),
            (Envelope::Debezium, "source.pos") => Some(Self::BinlogPos),
            (Envelope::Debezium, "source.ts_ms") => Some(Self::TsMs),
            (Envelope::Dms, "metadata.timestamp") => Some(Self::DmsTimestamp),
            _ => None,
        }
    }
}

/// What orders the changes of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Order {
    /// A column of the row (int, long, date or timestamp).
    Column(String),
    /// A source-position field of the envelope, kept in [`SOURCE_POSITION`].
    Source(SourceField),
    /// The Kafka offset (keyed topics: a key lives in one partition).
    Kafka,
}

/// A resolved upsert pipeline.
#[derive(Debug, Clone)]
pub struct Upsert {
    pub envelope: Envelope,
    pub order: Order,
    /// Debezium: what a JSON string in a decimal column is without an embedded schema.
    pub decimal_handling: DecimalHandling,
    /// Debezium truncates (`op = "t"`) empty the table as of their source position; without
    /// this they are dead letters.
    pub allow_truncate: bool,
    /// `<table>_changelog`, when `changelog = true`.
    pub changelog: Option<TableDef>,
    /// Debezium Protobuf: the Connect schemas of the declared row's fields by name (its
    /// `schema`, an Avro row record), which name what the converter's scalars stand for.
    pub declared_row: serde_json::Map<String, serde_json::Value>,
}

impl Upsert {
    /// The table column that holds each row's order value.
    pub fn order_column(&self) -> &str {
        match &self.order {
            Order::Column(c) => c,
            Order::Source(_) => SOURCE_POSITION,
            Order::Kafka => lineage::OFFSET,
        }
    }
}

/// Check the upsert keys of `spec` against the row schema `columns` (without lineage).
/// `Ok(None)`: an append pipeline; the changelog is left to the caller.
/// `registry`: whether the values come through a schema registry.
pub fn check(spec: &PipelineSpec, format: Format, registry: bool, columns: &Schema) -> Result<Option<Upsert>, String> {
    let upsert = match spec.mode.as_deref().unwrap_or("append") {
        "append" => false,
        "upsert" => true,
        other => return Err(format!("key `mode`: {other:?} is not allowed: allowed are append | upsert")),
    };
    if !upsert {
        let keys = [
            ("envelope", spec.envelope.is_some()),
            ("order_by", spec.order_by.is_some()),
            ("changelog", spec.changelog.is_some()),
            ("decimal_handling", spec.decimal_handling.is_some()),
            ("allow_truncate", spec.allow_truncate.is_some()),
        ];
        for (name, set) in keys {
            if set {
                return Err(format!("key `{name}`: only with mode = \"upsert\""));
            }
        }
        return Ok(None);
    }
    if spec.key.is_empty() {
        return Err("key `key`: mode = \"upsert\" needs the key columns (e.g. key = [\"id\"])".into());
    }
    if spec.dedup.as_deref().is_some_and(|d| d != "none") {
        return Err("key `dedup`: not with mode = \"upsert\" (an upsert keeps the latest change per key itself)".into());
    }
    let word = spec.envelope.as_deref().ok_or("key `envelope`: required with mode = \"upsert\": allowed are debezium | dms | csv | row")?;
    let envelope =
        Envelope::parse(word).ok_or_else(|| format!("key `envelope`: {word:?} is not allowed: allowed are debezium | dms | csv | row"))?;
    match (envelope, format, registry) {
        (Envelope::Debezium, Format::Avro | Format::Protobuf, true)
        | (Envelope::Debezium | Envelope::Dms | Envelope::Csv, Format::Json, false)
        | (Envelope::Row, _, _) => {}
        (Envelope::Csv, _, _) => {
            return Err("key `envelope`: csv lines are read into the columns of a JSON Schema (format = \"json\", no registry)".into());
        }
        (_, _, true) => {
            return Err(format!(
                "key `registry`: with mode = \"upsert\" a registry frames rows (envelope = \"row\") or Debezium Avro and Protobuf envelopes (envelope = \"debezium\", format = \"avro\" | \"protobuf\"), not {envelope} {} values",
                crate::model::pipeline::format_name(format)
            ));
        }
        _ => {
            return Err(format!(
                "key `envelope`: {envelope} is read from JSON values (format = \"json\"), or, for debezium, from Avro or Protobuf through a schema registry (format = \"avro\" | \"protobuf\" with `registry`)"
            ));
        }
    }
    let order = match spec.order_by.as_deref() {
        None if envelope == Envelope::Row => Order::Kafka,
        None => {
            let allowed = match envelope {
                Envelope::Debezium => format!(", or {}", SourceField::DEBEZIUM),
                Envelope::Dms => ", or metadata.timestamp".to_string(),
                _ => String::new(),
            };
            return Err(format!("key `order_by`: required with envelope = \"{envelope}\": a column{allowed}"));
        }
        Some(name) => match SourceField::parse(envelope, name) {
            Some(field) => Order::Source(field),
            None if name.contains('.') => {
                let allowed = match envelope {
                    Envelope::Debezium => SourceField::DEBEZIUM,
                    Envelope::Dms => "metadata.timestamp",
                    Envelope::Csv => "none (a CSV line carries only the row)",
                    Envelope::Row => "none (row orders by a column or the Kafka offset)",
                };
                return Err(format!(
                    "key `order_by`: {name:?} is not a source-position field of {envelope}: allowed are {allowed}, or a column"
                ));
            }
            None if envelope == Envelope::Row => {
                // A null value (the delete) carries no column to order it by.
                return Err("key `order_by`: envelope = \"row\" orders by the Kafka offset (a null-value delete has no column to order by); leave order_by out".into());
            }
            None => {
                let field = columns
                    .as_struct()
                    .field_by_name(name)
                    .ok_or_else(|| format!("key `order_by`: no top-level column {name:?} in the schema"))?;
                if !matches!(
                    *field.field_type,
                    Type::Primitive(
                        PrimitiveType::Int
                            | PrimitiveType::Long
                            | PrimitiveType::Date
                            | PrimitiveType::Timestamp
                            | PrimitiveType::Timestamptz
                    )
                ) {
                    return Err(format!(
                        "key `order_by`: column {name:?} is {}: allowed are int, long, date, timestamp columns",
                        field.field_type
                    ));
                }
                Order::Column(name.to_string())
            }
        },
    };
    if columns.as_struct().field_by_name(SOURCE_POSITION).is_some() {
        return Err(format!(
            "key `schema`: column {SOURCE_POSITION:?} is reserved for the envelope's source position in upsert tables; rename it"
        ));
    }
    let decimal_handling = match spec.decimal_handling.as_deref() {
        None => DecimalHandling::default(),
        Some(_) if envelope != Envelope::Debezium => {
            return Err(format!("key `decimal_handling`: only with envelope = \"debezium\" (not {envelope})"));
        }
        Some(word) => DecimalHandling::parse(word)
            .ok_or_else(|| format!("key `decimal_handling`: {word:?} is not allowed: allowed are {}", DecimalHandling::ALLOWED))?,
    };
    let allow_truncate = spec.allow_truncate.unwrap_or(false);
    if allow_truncate && (envelope != Envelope::Debezium || !matches!(order, Order::Source(_))) {
        // A truncate carries no row: only a source position places it among the keys' changes.
        return Err(format!(
            "key `allow_truncate`: only with envelope = \"debezium\" and order_by = a source-position field ({}), not {envelope} ordered by {}",
            SourceField::DEBEZIUM,
            spec.order_by.as_deref().unwrap_or("the Kafka offset")
        ));
    }
    Ok(Some(Upsert { envelope, order, decimal_handling, allow_truncate, changelog: None, declared_row: serde_json::Map::new() }))
}

/// The upsert table's schema from the append one: the order column required, and
/// [`SOURCE_POSITION`] added when the order comes from the envelope.
pub fn table_schema(schema: Schema, order: &Order) -> crate::base::error::Result<Schema> {
    let mut fields: Vec<NestedFieldRef> = schema.as_struct().fields().to_vec();
    if let Order::Column(name) = order {
        for f in fields.iter_mut().filter(|f| &f.name == name && !f.required) {
            let mut required = (**f).clone();
            required.required = true;
            *f = required.into();
        }
    }
    if matches!(order, Order::Source(_)) {
        fields.push(NestedField::required(schema.highest_field_id() + 1, SOURCE_POSITION, Type::Primitive(PrimitiveType::Long)).into());
    }
    let ids: Vec<i32> = schema.identifier_field_ids().collect();
    Ok(Schema::builder().with_schema_id(0).with_identifier_field_ids(ids).with_fields(fields).build()?)
}

/// `<table>_changelog`: `operation`, then the table's columns (only key, order and lineage
/// required: a delete carries no other value).
pub fn changelog_schema(table: &Schema, key: &[String], order_column: &str) -> crate::base::error::Result<Schema> {
    let keep_required = |name: &str| {
        key.iter().any(|k| k == name) || name == order_column || [lineage::TOPIC, lineage::PARTITION, lineage::OFFSET].contains(&name)
    };
    let mut fields: Vec<NestedFieldRef> =
        vec![NestedField::required(table.highest_field_id() + 1, OPERATION, Type::Primitive(PrimitiveType::String)).into()];
    for f in table.as_struct().fields() {
        let mut field = (**f).clone();
        field.required = f.required && keep_required(&f.name);
        fields.push(field.into());
    }
    Ok(Schema::builder().with_schema_id(0).with_fields(fields).build()?)
}
