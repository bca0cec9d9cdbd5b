//! Tombstones of the mirror: for every deleted account, the `seq` of its delete and its Kafka
//! position (the tie-breaker, [`super::rank`]), so an older insert or update arriving later
//! cannot resurrect the row.
//!
//! They live in one small Parquet file under the mirror's `metadata/` directory, named by the
//! table property [`TOMBSTONES_PROPERTY`]. The property is set in the same metadata swap as
//! the mirror's rows, so rows and tombstones always change together, and readers of the
//! table (PyIceberg, DuckDB, Spark) never see a deleted account. A new file is written only
//! when a commit changes the set; the one it replaces becomes an orphan that orphan removal
//! deletes after its margin.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use iceberg::table::Table;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::rank::{Position, Rank};
use crate::engine::columns::Columns;
use crate::base::error::Result;
use crate::model::tables::lineage;
use crate::engine::writer::writer_properties;

/// Table property holding the path of the current tombstone file ("" = none).
pub const TOMBSTONES_PROPERTY: &str = "icestream.cdc.tombstones";

/// One deleted key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    /// Order value (`seq`) of the delete.
    pub seq: i64,
    /// The delete's Kafka record, which breaks ties with changes of the same order value
    /// (`None` in files written before it was kept).
    pub position: Option<Position>,
    /// When icestream applied the delete (epoch µs): retention counts from here.
    pub deleted_at_us: i64,
}

impl Tombstone {
    /// The tombstone of the delete ranked `rank`, applied at `deleted_at_us`.
    pub fn of(rank: &Rank, deleted_at_us: i64) -> Self {
        Self { seq: rank.order, position: rank.position.clone(), deleted_at_us }
    }

    pub fn rank(&self) -> Rank {
        Rank { order: self.seq, position: self.position.clone() }
    }
}

/// Every tombstone of a mirror, by account id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tombstones(pub BTreeMap<i64, Tombstone>);

/// The tombstone file a table's properties name, if any.
pub fn referenced_file(properties: &std::collections::HashMap<String, String>) -> Option<&str> {
    properties.get(TOMBSTONES_PROPERTY).map(String::as_str).filter(|p| !p.is_empty())
}

const ID_COLUMN: &str = "account_id";
const SEQ_COLUMN: &str = "seq";
const DELETED_AT_COLUMN: &str = "deleted_at_us";

/// The columns of a tombstone file after its key columns: order value, when applied, and the
/// delete's position (lineage names; nullable, absent from older files).
pub(crate) fn value_fields() -> Vec<Field> {
    vec![
        Field::new(SEQ_COLUMN, DataType::Int64, false),
        Field::new(DELETED_AT_COLUMN, DataType::Int64, false),
        Field::new(lineage::TOPIC, DataType::Utf8, true),
        Field::new(lineage::PARTITION, DataType::Int32, true),
        Field::new(lineage::OFFSET, DataType::Int64, true),
    ]
}

/// Whether `name` is one of [`value_fields`] (not a key column).
pub(crate) fn is_value_field(name: &str) -> bool {
    [SEQ_COLUMN, DELETED_AT_COLUMN, lineage::TOPIC, lineage::PARTITION, lineage::OFFSET].contains(&name)
}

/// The [`value_fields`] columns of `tombstones`.
pub(crate) fn value_columns<'a>(tombstones: impl Iterator<Item = &'a Tombstone> + Clone) -> Vec<ArrayRef> {
    let position = |t: &'a Tombstone| t.position.as_ref();
    vec![
        Arc::new(tombstones.clone().map(|t| t.seq).collect::<Int64Array>()),
        Arc::new(tombstones.clone().map(|t| t.deleted_at_us).collect::<Int64Array>()),
        Arc::new(tombstones.clone().map(|t| position(t).map(|p| p.topic.as_str())).collect::<StringArray>()),
        Arc::new(tombstones.clone().map(|t| position(t).map(|p| p.partition)).collect::<Int32Array>()),
        Arc::new(tombstones.map(|t| position(t).map(|p| p.offset)).collect::<Int64Array>()),
    ]
}

/// The tombstones (without their keys) of one batch of a tombstone file, in row order.
pub(crate) fn read_values(batch: &RecordBatch, source: &str) -> Result<Vec<Tombstone>> {
    let columns = Columns::new(batch, source);
    let (seqs, at) = (columns.i64(SEQ_COLUMN)?, columns.i64(DELETED_AT_COLUMN)?);
    let present = [lineage::TOPIC, lineage::PARTITION, lineage::OFFSET].iter().all(|n| batch.schema().column_with_name(n).is_some());
    let positions = match present {
        true => Some((arrow_cast::cast(columns.array(lineage::TOPIC)?, &DataType::Utf8)?, columns.i64_nullable(lineage::PARTITION)?, columns.i64_nullable(lineage::OFFSET)?)),
        false => None,
    };
    Ok((0..batch.num_rows())
        .map(|i| {
            let position = positions.as_ref().and_then(|(topics, partitions, offsets)| {
                let topics = topics.as_string::<i32>();
                let valid = topics.is_valid(i) && partitions.is_valid(i) && offsets.is_valid(i);
                let partition = i32::try_from(partitions.value(i)).ok().filter(|_| valid)?;
                Some(Position { offset: offsets.value(i), partition, topic: topics.value(i).to_string() })
            });
            Tombstone { seq: seqs.value(i), position, deleted_at_us: at.value(i) }
        })
        .collect())
}

fn schema() -> Arc<ArrowSchema> {
    let mut fields = vec![Field::new(ID_COLUMN, DataType::Int64, false)];
    fields.extend(value_fields());
    Arc::new(ArrowSchema::new(fields))
}

impl Tombstones {
    /// The tombstones of `table` as of its loaded metadata.
    pub async fn load(table: &Table) -> Result<Self> {
        let Some(path) = referenced_file(table.metadata().properties()) else { return Ok(Self::default()) };
        let bytes = table.file_io().new_input(path)?.read().await?;
        let mut out = BTreeMap::new();
        for batch in ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()? {
            let batch = batch?;
            let source = format!("tombstone file {path}");
            let ids = Columns::new(&batch, &source).i64(ID_COLUMN)?;
            for (i, tombstone) in read_values(&batch, &source)?.into_iter().enumerate() {
                out.insert(ids.value(i), tombstone);
            }
        }
        Ok(Self(out))
    }

    pub fn get(&self, account_id: i64) -> Option<&Tombstone> {
        self.0.get(&account_id)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Write the set as a new file under the table's metadata directory and return the
    /// property update that points the table at it (or at nothing, when empty).
    pub async fn store(&self, table: &Table, compression: &str) -> Result<(String, String)> {
        if self.0.is_empty() {
            return Ok((TOMBSTONES_PROPERTY.to_string(), String::new()));
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(self.0.keys().copied().collect::<Int64Array>())];
        columns.extend(value_columns(self.0.values()));
        let batch = RecordBatch::try_new(schema(), columns)?;
        let mut buffer = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut buffer, schema(), Some(writer_properties(compression, &[&batch])?))?;
        writer.write(&batch)?;
        writer.close()?;
        let path = format!("{}/metadata/tombstones-{}.parquet", table.metadata().location(), uuid::Uuid::new_v4());
        table.file_io().new_output(&path)?.write(buffer.into()).await?;
        Ok((TOMBSTONES_PROPERTY.to_string(), path))
    }
}
