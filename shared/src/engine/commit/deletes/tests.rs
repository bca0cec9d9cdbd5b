use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use iceberg::spec::{DataFileFormat, Operation};

use super::*;
use crate::engine::commit::ChangeSet;
use crate::engine::commit::live_rows::read_data_file;
use crate::testkit::{FixedChange, LocalTable, TestResult, soon};

/// Table `t` holding one data file of ids 0..5; the file.
async fn one_file(f: &LocalTable) -> TestResult<DataFile> {
    let table = f.load().await;
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..5)) as ArrayRef])?;
    let files = crate::engine::writer::write_data_files(&table, &[batch], "zstd", 64 << 20).await?;
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(ChangeSet::append(files.clone()))).await?;
    Ok(files.into_iter().next().ok_or("a file")?)
}

/// Delete `positions` of `file` in one commit, as the keyed apply does; the deletes it wrote.
async fn delete(f: &LocalTable, file: &DataFile, positions: &[i64]) -> TestResult<FileDeletes> {
    let table = f.load().await;
    let live = LiveFiles::of(&table).await?;
    let deleted = delete_rows(&table, &live, file, &positions.iter().copied().collect::<BTreeSet<_>>(), "zstd").await?;
    let mut change = ChangeSet::new(Operation::Delete);
    change.added_delete_files.push(deleted.added.clone());
    change.removed_files.extend(deleted.replaced.clone());
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(change)).await?;
    Ok(deleted)
}

/// The ids `t` reads, and the live delete files of `file`.
async fn state(f: &LocalTable, file: &DataFile) -> TestResult<(Vec<i64>, Vec<DataFile>)> {
    let table = f.load().await;
    let live = LiveFiles::of(&table).await?;
    let deletes = live.deletes_for(file.file_path());
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let batches = read_data_file(&table, file.file_path(), &deletes, &schema).await?;
    let ids = batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect();
    Ok((ids, deletes.into_iter().cloned().collect()))
}

#[tokio::test]
async fn a_v3_table_keeps_one_deletion_vector_per_data_file_merging_each_batch_into_it() -> TestResult {
    let f = LocalTable::keyed_v3().await;
    let file = one_file(&f).await?;
    let first = delete(&f, &file, &[1]).await?;
    assert_eq!((first.added.file_format(), first.replaced.len()), (DataFileFormat::Puffin, 0));
    let second = delete(&f, &file, &[3]).await?;
    assert_eq!(second.replaced, vec![first.added.file_path().to_string()], "the new DV replaces the file's last one");
    let (ids, deletes) = state(&f, &file).await?;
    assert_eq!(ids, vec![0, 2, 4], "both batches' rows stay deleted");
    assert_eq!(deletes.len(), 1, "one DV for the data file");
    assert_eq!(deletes[0].record_count(), 2);
    Ok(())
}

#[tokio::test]
async fn a_v2_table_adds_a_position_delete_file_per_batch() -> TestResult {
    let f = LocalTable::keyed().await;
    let file = one_file(&f).await?;
    delete(&f, &file, &[1]).await?;
    let second = delete(&f, &file, &[3]).await?;
    assert_eq!((second.added.file_format(), second.replaced.len()), (DataFileFormat::Parquet, 0));
    let (ids, deletes) = state(&f, &file).await?;
    assert_eq!((ids, deletes.len()), (vec![0, 2, 4], 2));
    Ok(())
}
