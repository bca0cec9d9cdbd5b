//! Tombstones of an upsert table with any key: for every deleted key, the order value of its
//! delete, so an older change arriving later cannot resurrect the row.
//!
//! Same file and property as the accounts mirror's ([`super::tombstones`]): one Parquet file
//! named by [`TOMBSTONES_PROPERTY`], swapped in the same commit as the rows; its columns are
//! the key columns, then `seq` (the order value) and `deleted_at_us`. An accounts tombstone
//! file is therefore a keyed one with the key `account_id`.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, FieldRef, Schema as ArrowSchema};
use iceberg::table::Table;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::keys::KeyCodec;
pub use super::tombstones::{TOMBSTONES_PROPERTY, Tombstone, referenced_file};
use crate::columns::Columns;
use crate::error::Result;
use crate::writer::writer_properties;

/// Table property (upsert tables and their changelogs): the source position of the newest
/// truncate applied (Debezium `op = "t"` with `allow_truncate`). It stands for a tombstone of
/// every key at that position: a change ordered before it is stale, and a rebuild drops it.
pub const TRUNCATED_AT_PROPERTY: &str = "icestream.cdc.truncated-at";

/// The newest truncate's position, if the table had one.
pub fn truncated_at(properties: &std::collections::HashMap<String, String>) -> Option<i64> {
    properties.get(TRUNCATED_AT_PROPERTY).and_then(|v| v.parse().ok())
}

/// The property update recording a truncate at `position`, if it is newer than the table's.
pub fn truncate_update(properties: &std::collections::HashMap<String, String>, position: Option<i64>) -> Option<(String, String)> {
    let position = position?;
    (truncated_at(properties) < Some(position)).then(|| (TRUNCATED_AT_PROPERTY.to_string(), position.to_string()))
}

const SEQ_COLUMN: &str = "seq";
const DELETED_AT_COLUMN: &str = "deleted_at_us";

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
        let fields: Vec<FieldRef> =
            first.schema().fields().iter().filter(|f| ![SEQ_COLUMN, DELETED_AT_COLUMN].contains(&f.name().as_str())).cloned().collect();
        let mut out = Self { codec: KeyCodec::of_fields(fields)?, map: BTreeMap::new() };
        for batch in &batches {
            out.add(batch, path)?;
        }
        Ok(Some(out))
    }

    fn add(&mut self, batch: &RecordBatch, path: &str) -> Result<()> {
        let source = format!("tombstone file {path}");
        let keys = self.codec.rows(batch, &source, None)?;
        let columns = Columns::new(batch, &source);
        let (seqs, at) = (columns.i64(SEQ_COLUMN)?, columns.i64(DELETED_AT_COLUMN)?);
        for i in 0..batch.num_rows() {
            self.map.insert(keys.row(i).data().to_vec(), Tombstone { seq: seqs.value(i), deleted_at_us: at.value(i) });
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
        fields.push(Field::new(SEQ_COLUMN, DataType::Int64, false));
        fields.push(Field::new(DELETED_AT_COLUMN, DataType::Int64, false));
        let schema = Arc::new(ArrowSchema::new(fields));
        let mut columns: Vec<ArrayRef> = self.codec.decode(self.map.keys().map(Vec::as_slice))?;
        columns.push(Arc::new(self.map.values().map(|t| t.seq).collect::<Int64Array>()));
        columns.push(Arc::new(self.map.values().map(|t| t.deleted_at_us).collect::<Int64Array>()));
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
