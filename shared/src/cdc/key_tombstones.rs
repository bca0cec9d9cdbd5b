//! Tombstones of an upsert table with any key: for every deleted key, the rank of its delete
//! (order value and Kafka position, [`super::rank`]), so an older change arriving later cannot
//! resurrect the row.
//!
//! Same file and property as the accounts mirror's ([`super::tombstones`]): one Parquet file
//! named by [`TOMBSTONES_PROPERTY`], swapped in the same commit as the rows; its columns are
//! the key columns, then `seq` (the order value), `deleted_at_us` and the delete's lineage. An
//! accounts tombstone file is therefore a keyed one with the key `account_id`.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{FieldRef, Schema as ArrowSchema};
use iceberg::table::Table;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::keys::KeyCodec;
use super::rank::{Position, Rank};
use super::tombstones::{is_value_field, read_values, value_columns, value_fields};
pub use super::tombstones::{TOMBSTONES_PROPERTY, Tombstone, referenced_file};
use crate::base::error::Result;
use crate::engine::writer::writer_properties;

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
