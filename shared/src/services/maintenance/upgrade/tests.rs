use std::collections::BTreeSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use iceberg::spec::{DataFile, DataFileFormat};

use super::*;
use crate::engine::commit::deletes::delete_rows;
use crate::engine::commit::live_rows::read_data_file;
use crate::testkit::{FixedChange, LocalTable, TestResult, soon};

/// Delete `positions` of the table's one data file in a commit, as the keyed apply does.
async fn delete(f: &LocalTable, positions: &[i64]) -> TestResult<DataFile> {
    let table = f.load().await;
    let live = LiveFiles::of(&table).await?;
    let file = live.data.first().ok_or("a data file")?.clone();
    let deleted = delete_rows(&table, &live, &file, &positions.iter().copied().collect::<BTreeSet<_>>(), "zstd").await?;
    let mut change = ChangeSet::new(Operation::Delete);
    change.added_delete_files.push(deleted.added.clone());
    change.removed_files.extend(deleted.replaced);
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(change)).await?;
    Ok(deleted.added)
}

/// Every id the table reads.
async fn ids(f: &LocalTable) -> TestResult<Vec<i64>> {
    let table = f.load().await;
    let live = LiveFiles::of(&table).await?;
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let mut out = Vec::new();
    for file in &live.data {
        for b in read_data_file(&table, file.file_path(), &live.deletes_for(file.file_path()), &schema).await? {
            out.extend(b.column(0).as_primitive::<Int64Type>().values().iter().copied());
        }
    }
    out.sort_unstable();
    Ok(out)
}

#[tokio::test]
async fn a_v2_table_with_position_deletes_is_upgraded_once_compaction_folds_them() -> TestResult {
    let f = LocalTable::keyed().await;
    let table = f.load().await;
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..6)) as ArrayRef])?;
    let files = crate::engine::writer::write_data_files(&table, &[batch], "zstd", 64 << 20).await?;
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(ChangeSet::append(files))).await?;
    assert_eq!(delete(&f, &[1]).await?.file_format(), DataFileFormat::Parquet);

    let err = upgrade(&f.catalogs, &f.ident, Some(3), false, soon()).await.unwrap_err().to_string();
    assert!(err.contains("1 position delete file(s)") && err.contains("action=compact"), "{err}");
    assert_eq!(f.load().await.metadata().format_version(), FormatVersion::V2);
    let err = upgrade(&f.catalogs, &f.ident, None, false, soon()).await.unwrap_err().to_string();
    assert!(err.contains("format_version=3"), "{err}");

    let settings =
        crate::services::maintenance::MaintenanceSettings::from(&crate::model::config::Config::from_args(["hot_partition_hours=1"])?);
    crate::services::maintenance::compact::compact(&f.catalogs, &f.ident, &settings, false, soon()).await?;
    let dry = upgrade(&f.catalogs, &f.ident, Some(3), true, soon()).await?;
    assert!(!dry.committed && f.load().await.metadata().format_version() == FormatVersion::V2);
    let report = upgrade(&f.catalogs, &f.ident, Some(3), false, soon()).await?;
    assert_eq!((report.from, report.to, report.committed), (2, 3, true));
    assert_eq!(f.load().await.metadata().format_version(), FormatVersion::V3);
    assert_eq!(ids(&f).await?, vec![0, 2, 3, 4, 5], "the upgrade keeps every row");

    // Deletes after the upgrade are deletion vectors; the next commit gives out row ids.
    assert_eq!(delete(&f, &[2]).await?.file_format(), DataFileFormat::Puffin);
    assert_eq!(ids(&f).await?, vec![0, 2, 4, 5], "position 2 of the compacted file");
    // Again: nothing to do; never down.
    assert!(!upgrade(&f.catalogs, &f.ident, Some(3), false, soon()).await?.committed);
    let err = upgrade(&f.catalogs, &f.ident, Some(2), false, soon()).await.unwrap_err().to_string();
    assert!(err.contains("never downgraded"), "{err}");
    Ok(())
}

#[tokio::test]
async fn expiry_and_orphan_removal_delete_a_replaced_deletion_vector_and_keep_the_live_one() -> TestResult {
    let f = LocalTable::keyed_v3().await;
    let table = f.load().await;
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..6)) as ArrayRef])?;
    let files = crate::engine::writer::write_data_files(&table, &[batch], "zstd", 64 << 20).await?;
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(ChangeSet::append(files))).await?;
    let replaced = delete(&f, &[1]).await?;
    let live = delete(&f, &[4]).await?;
    let exists = |path: &str| std::path::Path::new(path.trim_start_matches("file://").trim_start_matches("file:")).exists();

    // A day later: every snapshot but the current one expires, and the orphan margin is past.
    let later = chrono::Utc::now().timestamp_millis() + 86_400_000;
    let config = crate::model::config::Config::from_args(["snapshot_max_age_hours=1", "min_snapshots_to_keep=1", "orphan_margin_hours=1"])?;
    let mut settings = crate::services::maintenance::MaintenanceSettings::from(&config);
    settings.clock = crate::base::clock::Clock::at_ms(later);
    let orphans = crate::services::maintenance::orphans::remove_orphans(&f.catalogs, &f.ident, &settings, false, soon()).await?;
    assert_eq!(orphans.deleted, 0, "every file is referenced by some snapshot: {orphans:?}");
    assert!(exists(replaced.file_path()) && exists(live.file_path()));
    let expired = crate::services::maintenance::expire::expire(&f.catalogs, &f.ident, &settings, false, soon()).await?;
    assert_eq!(expired.delete_files_deleted, 1, "{expired:?}");
    assert!(!exists(replaced.file_path()), "the replaced DV goes with the last snapshot that held it");
    assert!(exists(live.file_path()), "the live DV stays");
    let orphans = crate::services::maintenance::orphans::remove_orphans(&f.catalogs, &f.ident, &settings, false, soon()).await?;
    assert_eq!(orphans.deleted, 0, "{orphans:?}");
    assert!(exists(live.file_path()));
    assert_eq!(ids(&f).await?, vec![0, 2, 3, 5]);
    Ok(())
}
