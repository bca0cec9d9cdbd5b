use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use iceberg::spec::DataFile;
use iceberg::table::Table;

use super::with_lineage_columns;
use crate::engine::commit::ChangeSet;
use crate::engine::commit::live_rows::read_with_lineage;
use crate::testkit::{FixedChange, LocalTable, TestResult, soon};

/// Data files of `ids` (one file per slice), written but not committed.
async fn files(table: &Table, slices: &[&[i64]]) -> TestResult<Vec<DataFile>> {
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let mut out = Vec::new();
    for ids in slices {
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(ids.to_vec())) as ArrayRef])?;
        out.extend(crate::engine::writer::write_data_files(table, &[batch], "zstd", 64 << 20).await?);
    }
    Ok(out)
}

async fn commit(f: &LocalTable, change: ChangeSet) -> TestResult<Table> {
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(change)).await?;
    Ok(f.load().await)
}

/// Each live data file's first row id as a reader finds it: its own, or inherited from its
/// manifest (the manifest's first-row-id plus the rows of the inheriting entries before it).
async fn row_ids(table: &Table) -> TestResult<BTreeMap<String, i64>> {
    let mut out = BTreeMap::new();
    let snapshot = table.metadata().current_snapshot().ok_or("no snapshot")?;
    for m in crate::engine::commit::manifest_cache::manifest_list(table, snapshot).await?.iter() {
        let mut next = m.first_row_id.map(|id| id as i64);
        for entry in crate::engine::commit::manifest_cache::manifest(table, m).await?.entries().iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            let id = match file.first_row_id() {
                Some(id) => id,
                None => {
                    let id = next.ok_or("a data file with no row id to inherit")?;
                    next = Some(id + file.record_count() as i64);
                    id
                }
            };
            out.insert(file.file_path().to_string(), id);
        }
    }
    Ok(out)
}

#[tokio::test]
async fn rows_keep_their_ids_when_their_manifest_is_rewritten_and_new_rows_take_the_next() -> TestResult {
    let f = LocalTable::v3().await;
    let table = f.load().await;
    let first = files(&table, &[&[1, 2, 3]]).await?;
    let table = commit(&f, ChangeSet::append(first.clone())).await?;
    assert_eq!((table.metadata().next_row_id(), table.metadata().current_snapshot().and_then(|s| s.first_row_id())), (3, Some(0)));
    // Two files in one manifest: the second inherits 3 + 2.
    let pair = files(&table, &[&[4, 5], &[6, 7, 8, 9]]).await?;
    let table = commit(&f, ChangeSet::append(pair.clone())).await?;
    let before = row_ids(&table).await?;
    assert_eq!(before.values().copied().collect::<std::collections::BTreeSet<_>>(), [0, 3, 5].into());
    assert_eq!(table.metadata().next_row_id(), 9);

    // Removing the manifest's first file rewrites the manifest (a new range): the other keeps
    // its id, and the next file's rows follow every id given out so far.
    let mut change = ChangeSet::new(iceberg::spec::Operation::Overwrite);
    change.removed_files.insert(pair[0].file_path().to_string());
    change.added_data_files = files(&table, &[&[10]]).await?;
    let table = commit(&f, change.clone()).await?;
    let after = row_ids(&table).await?;
    assert_eq!(after.get(pair[1].file_path()), before.get(pair[1].file_path()), "a carried file keeps its row ids");
    assert_eq!(after.get(first[0].file_path()), Some(&0));
    let added = after.get(change.added_data_files[0].file_path()).copied().ok_or("the new file")?;
    assert!(added >= 9, "new rows take ids past every id given out: {added}");
    let ids: Vec<i64> = after.values().copied().collect();
    assert_eq!(ids.len(), 3);
    assert!(table.metadata().next_row_id() as i64 > added);

    // Manifests rewritten whole (maintenance) keep every id.
    let mut rewrite = ChangeSet::new(iceberg::spec::Operation::Replace);
    rewrite.rewrite_manifests = true;
    let table = commit(&f, rewrite).await?;
    assert_eq!(row_ids(&table).await?, after);
    Ok(())
}

#[tokio::test]
async fn compaction_moves_rows_with_their_ids_and_sequence_numbers() -> TestResult {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    let f = LocalTable::v3().await;
    let a = files(&f.load().await, &[&[1, 2, 3]]).await?;
    commit(&f, ChangeSet::append(a.clone())).await?;
    let table = commit(&f, ChangeSet::append(files(&f.load().await, &[&[4, 5]]).await?)).await?;
    // id 2 (row 1 of the first file) deleted by a deletion vector.
    let live = crate::engine::commit::live_rows::LiveFiles::of(&table).await?;
    let dv = crate::engine::commit::deletes::delete_rows(&table, &live, &a[0], &[1].into(), "zstd").await?;
    let mut change = ChangeSet::new(iceberg::spec::Operation::Delete);
    change.added_delete_files.push(dv.added);
    commit(&f, change).await?;

    let settings =
        crate::services::maintenance::MaintenanceSettings::from(&crate::model::config::Config::from_args(["hot_partition_hours=0"])?);
    let report = crate::services::maintenance::compact::compact(&f.catalogs, &f.ident, &settings, false, soon()).await?;
    assert_eq!(report.groups_committed, 1, "{report:?}");
    let table = f.load().await;
    let live = crate::engine::commit::live_rows::LiveFiles::of(&table).await?;
    assert_eq!((live.data.len(), live.deletes_by_data_file.len()), (1, 0), "one file, the DV folded");
    let path = live.data[0].file_path();
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(&with_lineage_columns(table.metadata().current_schema())?)?);
    let batches = read_with_lineage(&table, path, &[], &schema, live.lineage[path]).await?;
    let mut got: Vec<(i64, i64, i64)> = Vec::new();
    for b in &batches {
        let col = |i: usize| b.column(i).as_primitive::<Int64Type>().clone();
        let (ids, row_ids, seqs) = (col(0), col(1), col(2));
        got.extend((0..b.num_rows()).map(|i| (ids.value(i), row_ids.value(i), seqs.value(i))));
    }
    got.sort_unstable();
    assert_eq!(got, vec![(1, 0, 1), (3, 2, 1), (4, 3, 2), (5, 4, 2)], "(id, _row_id, _last_updated_sequence_number) as before the rewrite");
    Ok(())
}
