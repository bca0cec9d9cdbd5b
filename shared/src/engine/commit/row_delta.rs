//! Row-level changes (merge-on-read), the operation iceberg-rust 0.10 lacks, built from its
//! public blocks: where rows live (data file + row position, minus positions already deleted)
//! is [`super::live_rows`]'s; this writes the Iceberg position-delete files that remove them. A [`super::ChangeSet`]
//! then carries the delete files together with the appended rows in one snapshot.
//!
//! Every delete file we write references exactly one data file (`referenced_data_file` set):
//! readers can skip it for every other file, and iceberg-rust 0.10.1's scan can hang when
//! several data files share one position-delete file. No equality deletes: slow to read and
//! unreadable by PyIceberg.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum};
use iceberg::table::Table;
use parquet::arrow::ArrowWriter;

use super::live_rows::{FILE_PATH_FIELD_ID, POS_FIELD_ID};
use super::manifest::spec_of;
use crate::base::error::{Error, Result};
use crate::engine::writer::writer_properties;

fn position_delete_schema() -> Arc<ArrowSchema> {
    let field = |name: &str, ty: DataType, id: i32| {
        Field::new(name, ty, false).with_metadata(HashMap::from([("PARQUET:field_id".to_string(), id.to_string())]))
    };
    Arc::new(ArrowSchema::new(vec![field("file_path", DataType::Utf8, FILE_PATH_FIELD_ID), field("pos", DataType::Int64, POS_FIELD_ID)]))
}

/// Write one position-delete file removing `positions` of `data_file`, next to it.
pub async fn write_position_deletes(table: &Table, data_file: &DataFile, positions: &BTreeSet<i64>, compression: &str) -> Result<DataFile> {
    let data_path = data_file.file_path();
    let dir = data_path.rsplit_once('/').map(|(d, _)| d).unwrap_or(data_path);
    let path = format!("{dir}/{}-deletes.parquet", uuid::Uuid::new_v4());
    let schema = position_delete_schema();
    let n = positions.len();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(data_path, n))),
        Arc::new(positions.iter().copied().collect::<Int64Array>()),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    let mut buffer = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buffer, schema, Some(writer_properties(compression, &[&batch])?))?;
    writer.write(&batch)?;
    writer.close()?;
    let size = buffer.len() as u64;
    table.file_io().new_output(&path)?.write(buffer.into()).await?;
    let (first, last) = (*positions.first().unwrap_or(&0), *positions.last().unwrap_or(&0));
    DataFileBuilder::default()
        .content(DataContentType::PositionDeletes)
        .file_path(path)
        .file_format(DataFileFormat::Parquet)
        .partition(data_file.partition().clone())
        // The data file's tuple, so the data file's spec (an older one for a file written
        // before the spec evolved): the commit puts this file in a manifest of that spec.
        .partition_spec_id(spec_of(data_file, table.metadata())?.spec_id())
        .record_count(n as u64)
        .file_size_in_bytes(size)
        // Bounds on file_path let readers match the delete file to its data file from metadata.
        .lower_bounds(HashMap::from([(FILE_PATH_FIELD_ID, Datum::string(data_path)), (POS_FIELD_ID, Datum::long(first))]))
        .upper_bounds(HashMap::from([(FILE_PATH_FIELD_ID, Datum::string(data_path)), (POS_FIELD_ID, Datum::long(last))]))
        .referenced_data_file(Some(data_path.to_string()))
        .build()
        .map_err(|e| Error::Invariant(format!("position-delete file for {data_path}: {e}")))
}
