//! Tombstones of the mirror: for every deleted account, the `seq` of its delete, so an older
//! insert or update arriving later cannot resurrect the row (DESIGN.md, decision 4).
//!
//! They live in one small Parquet file under the mirror's `metadata/` directory, named by the
//! table property [`TOMBSTONES_PROPERTY`]. The property is set in the same metadata swap as
//! the mirror's rows, so rows and tombstones always change together, and readers of the
//! table (PyIceberg, DuckDB, Spark) never see a deleted account. A new file is written only
//! when a commit changes the set; the one it replaces becomes an orphan that orphan removal
//! deletes after its margin.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use iceberg::table::Table;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::columns::Columns;
use crate::error::Result;
use crate::writer::writer_properties;

/// Table property holding the path of the current tombstone file ("" = none).
pub const TOMBSTONES_PROPERTY: &str = "icestream.cdc.tombstones";

/// One deleted account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tombstone {
    /// `seq` of the delete.
    pub seq: i64,
    /// When icestream applied the delete (epoch µs): retention counts from here.
    pub deleted_at_us: i64,
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

fn schema() -> Arc<ArrowSchema> {
    Arc::new(ArrowSchema::new(vec![
        Field::new(ID_COLUMN, DataType::Int64, false),
        Field::new(SEQ_COLUMN, DataType::Int64, false),
        Field::new(DELETED_AT_COLUMN, DataType::Int64, false),
    ]))
}

impl Tombstones {
    /// The tombstones of `table` as of its loaded metadata.
    pub async fn load(table: &Table) -> Result<Self> {
        let Some(path) = referenced_file(table.metadata().properties()) else { return Ok(Self::default()) };
        let bytes = table.file_io().new_input(path)?.read().await?;
        let mut out = BTreeMap::new();
        for batch in ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()? {
            let batch = batch?;
            let columns = Columns::new(&batch, format!("tombstone file {path}"));
            let (ids, seqs, at) = (columns.i64(ID_COLUMN)?, columns.i64(SEQ_COLUMN)?, columns.i64(DELETED_AT_COLUMN)?);
            for i in 0..batch.num_rows() {
                out.insert(ids.value(i), Tombstone { seq: seqs.value(i), deleted_at_us: at.value(i) });
            }
        }
        Ok(Self(out))
    }

    pub fn get(&self, account_id: i64) -> Option<Tombstone> {
        self.0.get(&account_id).copied()
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
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.0.keys().copied().collect::<Int64Array>()),
            Arc::new(self.0.values().map(|t| t.seq).collect::<Int64Array>()),
            Arc::new(self.0.values().map(|t| t.deleted_at_us).collect::<Int64Array>()),
        ];
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
