//! Tombstones of an upsert table with any key: for every deleted key, the rank of its delete
//! (order value and Kafka position, [`super::rank`]), so an older change arriving later cannot
//! resurrect the row.
//!
//! They live in one small Parquet file under the table's `metadata/` directory, named by the
//! table property [`TOMBSTONES_PROPERTY`] and swapped in the same commit as the rows, so rows
//! and tombstones always change together and readers of the table (PyIceberg, DuckDB, Spark)
//! never see a deleted key. Its columns are the key columns, then `seq` (the order value),
//! `deleted_at_us` and the delete's lineage (files of the retired accounts mirror, keyed by
//! `account_id`, read the same way). A new file is written only when a commit changes the set;
//! the one it replaces becomes an orphan that orphan removal deletes after its margin.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, FieldRef, Schema as ArrowSchema};
use iceberg::table::Table;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::keys::KeyCodec;
use super::rank::{Position, Rank};
use crate::base::error::Result;
use crate::engine::columns::Columns;
use crate::engine::writer::writer_properties;
use crate::model::tables::lineage;

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

/// The tombstone file a table's properties name, if any.
pub fn referenced_file(properties: &std::collections::HashMap<String, String>) -> Option<&str> {
    properties.get(TOMBSTONES_PROPERTY).map(String::as_str).filter(|p| !p.is_empty())
}

const SEQ_COLUMN: &str = "seq";
const DELETED_AT_COLUMN: &str = "deleted_at_us";

/// The columns of a tombstone file after its key columns: order value, when applied, and the
/// delete's position (lineage names; nullable, absent from older files).
fn value_fields() -> Vec<Field> {
    vec![
        Field::new(SEQ_COLUMN, DataType::Int64, false),
        Field::new(DELETED_AT_COLUMN, DataType::Int64, false),
        Field::new(lineage::TOPIC, DataType::Utf8, true),
        Field::new(lineage::PARTITION, DataType::Int32, true),
        Field::new(lineage::OFFSET, DataType::Int64, true),
    ]
}

/// Whether `name` is one of [`value_fields`] (not a key column).
fn is_value_field(name: &str) -> bool {
    [SEQ_COLUMN, DELETED_AT_COLUMN, lineage::TOPIC, lineage::PARTITION, lineage::OFFSET].contains(&name)
}

/// The [`value_fields`] columns of `tombstones`.
fn value_columns<'a>(tombstones: impl Iterator<Item = &'a Tombstone> + Clone) -> Vec<ArrayRef> {
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
fn read_values(batch: &RecordBatch, source: &str) -> Result<Vec<Tombstone>> {
    let columns = Columns::new(batch, source);
    let (seqs, at) = (columns.i64(SEQ_COLUMN)?, columns.i64(DELETED_AT_COLUMN)?);
    let present = [lineage::TOPIC, lineage::PARTITION, lineage::OFFSET].iter().all(|n| batch.schema().column_with_name(n).is_some());
    let positions = match present {
        true => Some((
            arrow_cast::cast(columns.array(lineage::TOPIC)?, &DataType::Utf8)?,
            columns.i64_nullable(lineage::PARTITION)?,
            columns.i64_nullable(lineage::OFFSET)?,
        )),
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

/// Table property (upsert tables and their changelogs): the source position of the newest
/// truncate applied (Debezium `op = "t"` with `allow_truncate`). It stands for a tombstone of
/// every key at that position: a change ranked before it is stale, and a rebuild drops it.
pub const TRUNCATED_AT_PROPERTY: &str = "icestream.cdc.truncated-at";

/// Table property beside [`TRUNCATED_AT_PROPERTY`]: the truncate's Kafka record,
/// `<partition>:<offset>:<topic>`, which ranks it among changes of the same order value.
pub const TRUNCATED_BY_PROPERTY: &str = "icestream.cdc.truncated-by";

/// The newest truncate's rank, if the table had one (its position unknown when only the older
/// property is set).
pub fn truncated_at(properties: &std::collections::HashMap<String, String>) -> Option<Rank> {
    let order = properties.get(TRUNCATED_AT_PROPERTY)?.parse().ok()?;
    let position = properties.get(TRUNCATED_BY_PROPERTY).and_then(|v| {
        let mut parts = v.splitn(3, ':');
        let (partition, offset, topic) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?, parts.next()?);
        Some(Position { offset, partition, topic: topic.to_string() })
    });
    Some(Rank { order, position })
}

/// The property updates recording a truncate ranked `rank`, if it is newer than the table's.
pub fn truncate_update(properties: &std::collections::HashMap<String, String>, rank: Option<&Rank>) -> Vec<(String, String)> {
    match rank {
        Some(rank) if truncated_at(properties).as_ref() < Some(rank) => truncate_properties(rank),
        _ => Vec::new(),
    }
}

/// The properties that record a truncate ranked `rank`.
pub fn truncate_properties(rank: &Rank) -> Vec<(String, String)> {
    let mut out = vec![(TRUNCATED_AT_PROPERTY.to_string(), rank.order.to_string())];
    if let Some(p) = &rank.position {
        out.push((TRUNCATED_BY_PROPERTY.to_string(), format!("{}:{}:{}", p.partition, p.offset, p.topic)));
    }
    out
}

/// Every tombstone of a table, by encoded key.
pub struct KeyTombstones {
    codec: KeyCodec,
    pub map: BTreeMap<Vec<u8>, Tombstone>,
}

impl KeyTombstones {
    /// The tombstones of `table` as of its loaded metadata, keys encoded by `codec`.
    pub async fn load(table: &Table, codec: KeyCodec) -> Result<Self> {
        let mut out = Self { codec, map: BTreeMap::new() };
        let Some(path) = referenced_file(table.metadata().properties()) else { return Ok(out) };
        for batch in read(table, path).await? {
            out.add(&batch, path)?;
        }
        Ok(out)
    }

    /// The tombstones of `table` with the key the file itself declares (maintenance, which
    /// knows no pipeline). `None` without a tombstone file.
    pub async fn load_any(table: &Table) -> Result<Option<Self>> {
        let Some(path) = referenced_file(table.metadata().properties()) else { return Ok(None) };
        let batches = read(table, path).await?;
        let Some(first) = batches.first() else { return Ok(None) };
        let fields: Vec<FieldRef> = first.schema().fields().iter().filter(|f| !is_value_field(f.name())).cloned().collect();
        let mut out = Self { codec: KeyCodec::of_fields(fields)?, map: BTreeMap::new() };
        for batch in &batches {
            out.add(batch, path)?;
        }
        Ok(Some(out))
    }

    fn add(&mut self, batch: &RecordBatch, path: &str) -> Result<()> {
        let source = format!("tombstone file {path}");
        let keys = self.codec.rows(batch, &source, None)?;
        for (i, tombstone) in read_values(batch, &source)?.into_iter().enumerate() {
            self.map.insert(keys.row(i).data().to_vec(), tombstone);
        }
        Ok(())
    }

    /// The key encoding of [`Self::map`]'s keys (`decode` gives the key columns back).
    pub fn codec(&self) -> &KeyCodec {
        &self.codec
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Drop tombstones applied before `cutoff_us`; returns how many.
    pub fn purge_before(&mut self, cutoff_us: i64) -> usize {
        let before = self.map.len();
        self.map.retain(|_, t| t.deleted_at_us >= cutoff_us);
        before - self.map.len()
    }

    /// Write the set as a new file under the table's metadata directory and return the
    /// property update that points the table at it (or at nothing, when empty).
    pub async fn store(&self, table: &Table, compression: &str) -> Result<(String, String)> {
        if self.map.is_empty() {
            return Ok((TOMBSTONES_PROPERTY.to_string(), String::new()));
        }
        let mut fields = self.codec.plain_fields();
        fields.extend(value_fields());
        let schema = Arc::new(ArrowSchema::new(fields));
        let mut columns: Vec<ArrayRef> = self.codec.decode(self.map.keys().map(Vec::as_slice))?;
        columns.extend(value_columns(self.map.values()));
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        let mut buffer = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut buffer, schema, Some(writer_properties(compression, &[&batch])?))?;
        writer.write(&batch)?;
        writer.close()?;
        let path = format!("{}/metadata/tombstones-{}.parquet", table.metadata().location(), uuid::Uuid::new_v4());
        table.file_io().new_output(&path)?.write(buffer.into()).await?;
        Ok((TOMBSTONES_PROPERTY.to_string(), path))
    }
}

async fn read(table: &Table, path: &str) -> Result<Vec<RecordBatch>> {
    let bytes = table.file_io().new_input(path)?.read().await?;
    Ok(ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()?.collect::<std::result::Result<Vec<_>, _>>()?)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn a_truncate_keeps_its_record_and_only_a_newer_one_replaces_it() {
        let at = |order, offset| Rank::new(order, Position { offset, partition: 2, topic: "db.shop:orders".into() });
        let props: HashMap<String, String> = truncate_properties(&at(77, 9)).into_iter().collect();
        assert_eq!(props[TRUNCATED_BY_PROPERTY], "2:9:db.shop:orders");
        assert_eq!(truncated_at(&props), Some(at(77, 9)));
        assert!(truncate_update(&props, Some(&at(77, 9))).is_empty() && truncate_update(&props, Some(&at(77, 8))).is_empty());
        assert_eq!(truncate_update(&props, Some(&at(77, 10))).len(), 2, "the same source position, a later record");
        // A table that kept only the position: ranked below every record of that position.
        let old = HashMap::from([(TRUNCATED_AT_PROPERTY.to_string(), "77".to_string())]);
        assert_eq!(truncated_at(&old), Some(Rank { order: 77, position: None }));
        assert!(!truncate_update(&old, Some(&at(77, 0))).is_empty());
    }
}
