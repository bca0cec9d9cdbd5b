//! The one definition of each table icestream writes: schema, partition spec and properties.
//! Arrow schemas are derived from these (with `PARQUET:field_id` metadata), never written twice.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::SchemaRef as ArrowSchemaRef;
use iceberg::spec::{FormatVersion, MapType, NestedField, PrimitiveType, Schema, SortOrder, Transform, Type, UnboundPartitionSpec};

use crate::base::error::Result;

/// Everything needed to create (or check) one table.
#[derive(Debug, Clone)]
pub struct TableDef {
    pub name: String,
    pub schema: Schema,
    pub partition_spec: UnboundPartitionSpec,
    pub properties: HashMap<String, String>,
    /// The order rows are written in (upsert tables: by key); `None`: unsorted.
    pub sort_order: Option<SortOrder>,
    /// The format version declared for the table: created so, and an existing table of another
    /// version is refused. `None`: created as v2, an existing table taken as it is.
    pub format_version: Option<FormatVersion>,
}

impl TableDef {
    /// The Arrow schema of the table's rows, with field ids, as the writers need it.
    pub fn arrow_schema(&self) -> Result<ArrowSchemaRef> {
        Ok(Arc::new(iceberg::arrow::schema_to_arrow_schema(&self.schema)?))
    }
}

/// Telemetry column names, shared by decoders, dedup and tests.
pub mod telemetry {
    pub const VEHICLE_ID: &str = "vehicle_id";
    pub const EVENT_TIME: &str = "event_time";
    pub const MODEL: &str = "model";
    pub const SPEED_KMH: &str = "speed_kmh";
    pub const SOC_PCT: &str = "soc_pct";
    pub const ODOMETER_KM: &str = "odometer_km";
    pub const CHARGING: &str = "charging";
}

/// An upsert table's column for the envelope's source position, when its order comes from there.
pub const SOURCE_POSITION: &str = "source_position";

/// Columns icestream fills itself: the lineage, and an upsert table's [`SOURCE_POSITION`].
/// Never a writer schema's business.
pub fn is_written_by_icestream(name: &str) -> bool {
    lineage::is_lineage(name) || kafka::is_kafka_column(name) || name == SOURCE_POSITION
}

/// The dead-letter table of pipeline table `table`.
pub fn dead_letter_name(table: &str) -> String {
    format!("{table}_dead_letter")
}

/// Lineage column names, present in every table fed from Kafka.
pub mod lineage {
    pub const TOPIC: &str = "kafka_topic";
    pub const PARTITION: &str = "kafka_partition";
    pub const OFFSET: &str = "kafka_offset";

    /// Whether `name` is one of the lineage columns.
    pub fn is_lineage(name: &str) -> bool {
        [TOPIC, PARTITION, OFFSET].contains(&name)
    }
}

/// The Kafka metadata columns a pipeline may ask for (`kafka_columns`), beside the lineage
/// columns: one definition of their names and types. All optional: an existing table gains them
/// by evolution, and a record may have no key, no headers or no timestamp.
pub mod kafka {
    use crate::model::schema::{Field, Prim, Ty};

    pub const TIMESTAMP: &str = "kafka_timestamp";
    pub const TIMESTAMP_TYPE: &str = "kafka_timestamp_type";
    pub const KEY: &str = "kafka_key";
    pub const HEADERS: &str = "kafka_headers";

    /// The words of `kafka_columns`, in column order, with their columns.
    const WORDS: [(&str, &str); 4] = [("timestamp", TIMESTAMP), ("timestamp_type", TIMESTAMP_TYPE), ("key", KEY), ("headers", HEADERS)];

    /// What `kafka_columns` allows, for messages and help.
    pub const ALLOWED: &str = "timestamp | timestamp_type | key | headers";

    /// Whether `name` is one of the metadata columns (reserved: a source schema cannot have it).
    pub fn is_kafka_column(name: &str) -> bool {
        WORDS.iter().any(|(_, column)| *column == name)
    }

    /// Which metadata columns a table has (or is to have), in [`WORDS`] order.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct KafkaColumns([bool; 4]);

    impl KafkaColumns {
        /// The columns `kafka_columns` names, or which word is not allowed.
        pub fn parse(words: &[String]) -> Result<Self, String> {
            let mut out = [false; 4];
            for word in words {
                let i =
                    WORDS.iter().position(|(w, _)| w == word).ok_or_else(|| format!("{word:?} is not allowed: allowed are {ALLOWED}"))?;
                if std::mem::replace(&mut out[i], true) {
                    return Err(format!("{word:?} is named twice"));
                }
            }
            Ok(Self(out))
        }

        /// The metadata columns among `names` (a table's or a batch's columns).
        pub fn of<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
            let mut out = [false; 4];
            for name in names {
                if let Some(i) = WORDS.iter().position(|(_, column)| *column == name) {
                    out[i] = true;
                }
            }
            Self(out)
        }

        pub fn is_empty(self) -> bool {
            !self.0.contains(&true)
        }

        pub fn has(self, column: &str) -> bool {
            WORDS.iter().zip(self.0).any(|((_, c), on)| on && *c == column)
        }

        /// The column names, in order.
        pub fn names(self) -> impl Iterator<Item = &'static str> {
            WORDS.into_iter().zip(self.0).filter(|(_, on)| *on).map(|((_, column), _)| column)
        }

        /// What a dead-letter table keeps of these: the timestamp and its type, both when
        /// either is asked for (its rows already carry the raw key and headers), so a replay
        /// fills them as ingest does.
        pub fn for_dead_letters(self) -> Self {
            let timestamp = self.0[0] || self.0[1];
            Self([timestamp, timestamp, false, false])
        }

        /// The columns as source fields (the evolution and table-schema builders take these).
        pub(crate) fn fields(self) -> Vec<Field> {
            self.names()
                .map(|name| {
                    let ty = match name {
                        TIMESTAMP => Ty::Prim(Prim::Timestamptz),
                        TIMESTAMP_TYPE => Ty::Prim(Prim::String),
                        KEY => Ty::Prim(Prim::Binary),
                        _ => Field::map(Ty::Prim(Prim::String), Field::new("value", true, Ty::Prim(Prim::Binary))),
                    };
                    Field::new(name, true, ty)
                })
                .collect()
        }
    }
}

/// Table properties of the reference recipe, plus the ones iceberg-rust needs set explicitly.
pub fn reference_properties(compression: &str, target_file_size: usize) -> HashMap<String, String> {
    [
        ("write.format.default", "parquet".to_string()),
        ("write.parquet.compression-codec", compression.to_string()),
        ("write.target-file-size-bytes", target_file_size.to_string()),
        ("write.metadata.previous-versions-max", "100".to_string()),
        ("write.metadata.delete-after-commit.enabled", "true".to_string()),
        // Our commit module retries with its own validation; keep the library's blind
        // retry short if any code path ever goes through `Transaction::commit`.
        ("commit.retry.num-retries", "0".to_string()),
        ("commit.retry.total-timeout-ms", "60000".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// `vehicle_telemetry`: one row per reading, partitioned by hours(event_time), bucket(16, vehicle_id).
pub fn vehicle_telemetry(name: &str, compression: &str, target_file_size: usize) -> Result<TableDef> {
    use lineage::*;
    use telemetry::*;
    let schema = Schema::builder()
        .with_schema_id(0)
        .with_identifier_field_ids([1, 2])
        .with_fields([
            NestedField::required(1, VEHICLE_ID, Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(2, EVENT_TIME, Type::Primitive(PrimitiveType::Timestamptz)).into(),
            NestedField::required(3, MODEL, Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(4, SPEED_KMH, Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::required(5, SOC_PCT, Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::required(6, ODOMETER_KM, Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(7, CHARGING, Type::Primitive(PrimitiveType::Boolean)).into(),
            NestedField::required(8, TOPIC, Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(9, PARTITION, Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::required(10, OFFSET, Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()?;
    let partition_spec = UnboundPartitionSpec::builder()
        .with_spec_id(0)
        .add_partition_field(2, "event_time_hour", Transform::Hour)?
        .add_partition_field(1, "vehicle_id_bucket", Transform::Bucket(16))?
        .build();
    Ok(TableDef {
        name: name.to_string(),
        schema,
        partition_spec,
        properties: reference_properties(compression, target_file_size),
        sort_order: None,
        format_version: None,
    })
}

/// Dead-letter column names.
pub mod dead_letter {
    pub const RAW_KEY: &str = "raw_key";
    pub const RAW_VALUE: &str = "raw_value";
    pub const ERROR: &str = "error";
    pub const SOURCE: &str = "source";
    pub const REJECTED_AT: &str = "rejected_at";
    pub const HEADERS: &str = "headers";
}

/// `<table>_dead_letter`: records that did not decode, with their raw bytes and headers (a
/// header name repeated keeps its last value), partitioned by day.
pub fn dead_letter_table(name: &str, compression: &str) -> Result<TableDef> {
    use dead_letter::*;
    use lineage::*;
    let schema = Schema::builder()
        .with_schema_id(0)
        .with_fields([
            NestedField::required(1, TOPIC, Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(2, PARTITION, Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::required(3, OFFSET, Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(4, RAW_KEY, Type::Primitive(PrimitiveType::Binary)).into(),
            NestedField::optional(5, RAW_VALUE, Type::Primitive(PrimitiveType::Binary)).into(),
            NestedField::required(6, ERROR, Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(7, SOURCE, Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(8, REJECTED_AT, Type::Primitive(PrimitiveType::Timestamptz)).into(),
            NestedField::optional(
                9,
                HEADERS,
                Type::Map(MapType::new(
                    NestedField::map_key_element(10, Type::Primitive(PrimitiveType::String)).into(),
                    NestedField::map_value_element(11, Type::Primitive(PrimitiveType::Binary), false).into(),
                )),
            )
            .into(),
        ])
        .build()?;
    let partition_spec = UnboundPartitionSpec::builder().with_spec_id(0).add_partition_field(8, "rejected_at_day", Transform::Day)?.build();
    Ok(TableDef {
        name: name.to_string(),
        schema,
        partition_spec,
        properties: reference_properties(compression, 32 * 1024 * 1024),
        sort_order: None,
        format_version: None,
    })
}

/// Iceberg's table property that asks for a Parquet bloom filter on one column.
pub const BLOOM_FILTER_PROPERTY_PREFIX: &str = "write.parquet.bloom-filter-enabled.column.";

/// Iceberg's table property that caps the rows of one Parquet page.
pub const PAGE_ROW_LIMIT_PROPERTY: &str = "write.parquet.page-row-limit";

/// Iceberg's table property that caps a Parquet column chunk's dictionary (past it, the
/// column's values are written plain).
pub const DICTIONARY_SIZE_PROPERTY: &str = "write.parquet.dict-size-bytes";

/// Rows per page in upsert tables: small pages, so a touched key costs one small read of its
/// key and order columns (and the page index stays a small fraction of the file).
pub const UPSERT_PAGE_ROWS: usize = 256;

/// Iceberg's table property that caps a Parquet row group's (estimated encoded) size.
pub const ROW_GROUP_SIZE_PROPERTY: &str = "write.parquet.row-group-size-bytes";

/// Row group size in upsert tables: a batch reads the page index of the row groups its keys
/// fall in, so row groups of about a megabyte keep that read small as files grow.
pub const UPSERT_ROW_GROUP_BYTES: usize = 1 << 20;

/// Dictionary bytes per column chunk in upsert tables: a key column's dictionary is read with
/// any page of it, so a column of many distinct keys is written plain instead.
pub const UPSERT_DICTIONARY_BYTES: usize = 2 * 1024;

/// Properties of a table kept by guarded apply: merge-on-read (readers such as Spark and Trino
/// told the same thing we do), bloom filters on the key columns, small pages and row groups,
/// so a batch reads only the row groups and pages that may hold its keys.
pub fn add_upsert_properties(properties: &mut HashMap<String, String>, key: &[&str]) {
    for mode in ["write.delete.mode", "write.update.mode", "write.merge.mode"] {
        properties.insert(mode.to_string(), "merge-on-read".to_string());
    }
    properties.insert(PAGE_ROW_LIMIT_PROPERTY.to_string(), UPSERT_PAGE_ROWS.to_string());
    properties.insert(DICTIONARY_SIZE_PROPERTY.to_string(), UPSERT_DICTIONARY_BYTES.to_string());
    properties.insert(ROW_GROUP_SIZE_PROPERTY.to_string(), UPSERT_ROW_GROUP_BYTES.to_string());
    for column in key {
        properties.insert(format!("{BLOOM_FILTER_PROPERTY_PREFIX}{column}"), "true".to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telemetry_partition_spec_binds_and_arrow_schema_has_field_ids() {
        let def = vehicle_telemetry("vehicle_telemetry", "zstd", 1 << 20).unwrap();
        let spec = def.partition_spec.clone().bind(def.schema.clone()).unwrap();
        let names: Vec<_> = spec.fields().iter().map(|f| f.name.clone()).collect();
        assert_eq!(names, ["event_time_hour", "vehicle_id_bucket"]);
        let arrow = def.arrow_schema().unwrap();
        assert_eq!(arrow.fields().len(), 10);
        assert!(arrow.field(0).metadata().contains_key("PARQUET:field_id"));
        assert!(!arrow.field(0).is_nullable(), "required columns are non-nullable in Arrow");
    }

    #[test]
    fn dead_letter_binds() {
        let def = dead_letter_table("t_dead_letter", "zstd").unwrap();
        def.partition_spec.clone().bind(def.schema.clone()).unwrap();
    }
}
