//! Manifests of a table whose partition spec another engine evolved (bucket(4) -> bucket(8) on
//! the same column): every manifest this module writes, whatever rewrites it (rewrite-manifests,
//! a compaction's removal, a row delta's deletes), names the spec of its own entries, and a
//! filtered scan, which prunes by each manifest's spec, still finds every row.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use futures::TryStreamExt;
use iceberg::expr::Reference;
use iceberg::spec::{DataFile, Datum, Operation, Transform, UnboundPartitionSpec};
use iceberg::table::Table;

use crate::engine::commit::ChangeSet;
use crate::engine::commit::live_rows::LiveFiles;
use crate::engine::commit::row_delta::write_position_deletes;
use crate::services::maintenance::MaintenanceSettings;
use crate::testkit::{FixedChange, LocalTable, TestResult, soon};

/// Commits one fixed change.
/// `ids` written as data files of the table's current spec (one per partition) and appended.
async fn append(f: &LocalTable, ids: impl IntoIterator<Item = i64>) -> TestResult<Vec<DataFile>> {
    let table = f.load().await;
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(ids)) as ArrayRef])?;
    let files = crate::engine::writer::write_data_files(&table, &[batch], "zstd", 64 << 20).await?;
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(ChangeSet::append(files.clone()))).await?;
    Ok(files)
}

/// Iceberg's bucket of a long (Murmur3 of its 8 bytes), as `Transform::Bucket` computes it.
fn bucket(n: u32, id: i64) -> TestResult<i32> {
    let function = iceberg::transform::create_transform_function(&Transform::Bucket(n))?;
    let value = function.transform_literal(&Datum::long(id))?.ok_or("bucket of a long")?;
    match value.literal() {
        iceberg::spec::PrimitiveLiteral::Int(b) => Ok(*b),
        other => Err(format!("bucket value {other:?}").into()),
    }
}

/// A table partitioned by bucket(4, id) with data files of spec 0, whose spec another engine
/// then evolved to bucket(8, id) (spec 1), and more files written under that. Returns the
/// fixture, the paths of the spec-0 files, and every id. Five data manifests (rewrite-manifests
/// runs past four). Spec-0 files: one per bucket4 value, and a second one in bucket4 0 (so
/// compaction has a group there and leaves the other spec-0 files live in their manifest).
/// Spec-1 ids all fall in bucket8 4..7, so no spec-1 partition tuple equals a spec-0 one.
async fn evolved_table() -> TestResult<(LocalTable, HashSet<String>, Vec<i64>)> {
    let f = LocalTable::partitioned_by(Transform::Bucket(4)).await;
    let mut old_ids: Vec<i64> = (0..24).collect();
    let mut old = HashSet::new();
    old.extend(append(&f, old_ids.clone()).await?.iter().map(|d| d.file_path().to_string()));
    let in_bucket0: Vec<i64> = (100..200).filter(|&id| bucket(4, id).is_ok_and(|b| b == 0)).take(3).collect();
    old.extend(append(&f, in_bucket0.clone()).await?.iter().map(|d| d.file_path().to_string()));
    old_ids.extend(in_bucket0);

    let table = f
        .other_engine_commit(|b| {
            let spec = UnboundPartitionSpec::builder().add_partition_field(1, "id_bucket_8", Transform::Bucket(8))?.build();
            b.add_partition_spec(spec)?.set_default_partition_spec(-1)
        })
        .await?;
    assert_eq!(table.metadata().default_partition_spec_id(), 1);

    let new_ids: Vec<i64> = (1000..2000).filter(|&id| bucket(8, id).is_ok_and(|b| b >= 4)).take(36).collect();
    for chunk in new_ids.chunks(12) {
        append(&f, chunk.iter().copied()).await?;
    }
    let ids = old_ids.into_iter().chain(new_ids).collect();
    Ok((f, old, ids))
}

/// Every manifest of the current snapshot names the spec its entries were partitioned with
/// (a data file's spec: 0 for the files in `old`, else 1; a delete file's: its data file's).
async fn assert_manifests_name_their_entries_spec(table: &Table, old: &HashSet<String>) -> TestResult {
    let spec_of = |path: &str| if old.contains(path) { 0 } else { 1 };
    let current = table.metadata().current_snapshot().ok_or("no snapshot")?;
    for manifest_file in table.manifest_list_reader(current).load().await?.entries() {
        let manifest = manifest_file.load_manifest(table.file_io()).await?;
        assert_eq!(manifest.metadata().partition_spec().spec_id(), manifest_file.partition_spec_id, "{}", manifest_file.manifest_path);
        for entry in manifest.entries() {
            let file = entry.data_file();
            let data_path = file.referenced_data_file().unwrap_or_else(|| file.file_path().to_string());
            assert_eq!(manifest_file.partition_spec_id, spec_of(&data_path), "{} in {}", file.file_path(), manifest_file.manifest_path);
        }
    }
    Ok(())
}

/// The ids an iceberg-rust scan with `id = <id>` returns, for each of `ids` (pruning runs on
/// every manifest's partition summaries and entries, by the manifest's spec).
async fn filtered_scan(table: &Table, ids: &[i64]) -> TestResult<Vec<i64>> {
    let mut found = Vec::new();
    for &id in ids {
        let scan = table.scan().with_filter(Reference::new("id").equal_to(Datum::long(id))).build()?;
        let batches: Vec<RecordBatch> = scan.to_arrow().await?.try_collect().await?;
        for batch in &batches {
            found.extend(batch.column(0).as_primitive::<Int64Type>().values().iter().copied());
        }
    }
    Ok(found)
}

#[tokio::test]
async fn rewrite_manifests_keeps_each_entry_under_its_own_spec() -> TestResult {
    let (f, old, ids) = evolved_table().await?;
    let report = crate::services::maintenance::rewrite_manifests::rewrite_manifests(&f.catalogs, &f.ident, false, soon()).await?;
    assert!(report.committed, "{report:?}");
    assert_eq!(report.data_manifests_after, 2, "one manifest per spec: {report:?}");
    let table = f.load().await;
    assert_manifests_name_their_entries_spec(&table, &old).await?;
    assert_eq!(filtered_scan(&table, &ids).await?, ids);
    Ok(())
}

#[tokio::test]
async fn a_compaction_removal_rewrites_the_manifest_under_its_spec() -> TestResult {
    let (f, old, ids) = evolved_table().await?;
    let config = crate::model::config::Config::from_args(["hot_partition_hours=1"])?;
    let settings = MaintenanceSettings::from(&config);
    let report = crate::services::maintenance::compact::compact(&f.catalogs, &f.ident, &settings, false, soon()).await?;
    assert!(report.groups_committed >= 1, "{report:?}");
    // Bucket4 0's two spec-0 files are rewritten under spec 1; the other three spec-0 files
    // stay live in the manifest the removal rewrites.
    let table = f.load().await;
    let live = LiveFiles::of(&table).await?;
    assert_eq!(live.data.iter().filter(|d| old.contains(d.file_path())).count(), 3);
    assert_manifests_name_their_entries_spec(&table, &old).await?;
    let mut found = filtered_scan(&table, &ids).await?;
    found.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(found, expected);
    Ok(())
}

#[tokio::test]
async fn a_row_deltas_deletes_of_an_old_spec_file_land_under_that_spec() -> TestResult {
    let (f, old, ids) = evolved_table().await?;
    let table = f.load().await;
    // An id whose bucket8 differs from its bucket4: a spec-1 filter would prune a spec-0 tuple.
    let gone = *ids.iter().find(|&&id| id < 1000 && bucket(8, id).ok() != bucket(4, id).ok()).ok_or("an id")?;
    let live = LiveFiles::of(&table).await?;
    let mut holder = None;
    for file in live.data.iter().filter(|d| old.contains(d.file_path())) {
        let (batches, positions) =
            crate::engine::commit::live_rows::read_live_rows(&table, file.file_path(), &["id"], &Default::default()).await?;
        let values = batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec());
        if let Some((_, pos)) = values.zip(positions).find(|(v, _)| *v == gone) {
            holder = Some((file.clone(), pos));
        }
    }
    let (file, pos) = holder.ok_or("the file holding the id")?;
    let deletes = write_position_deletes(&table, &file, &BTreeSet::from([pos]), "zstd").await?;
    // With an appended row, as an upsert's commit carries both.
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![5000])) as ArrayRef])?;
    let mut change = ChangeSet::new(Operation::Overwrite);
    change.added_data_files = crate::engine::writer::write_data_files(&table, &[batch], "zstd", 64 << 20).await?;
    change.added_delete_files = vec![deletes];
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(change)).await?;

    let table = f.load().await;
    assert_manifests_name_their_entries_spec(&table, &old).await?;
    let expected: Vec<i64> = ids.iter().copied().filter(|&id| id != gone).chain([5000]).collect();
    let probe: Vec<i64> = ids.iter().copied().chain([5000]).collect();
    assert_eq!(filtered_scan(&table, &probe).await?, expected);
    // The whole table too: the delete applies to its file.
    let all: Vec<RecordBatch> = table.scan().build()?.to_arrow().await?.try_collect().await?;
    let counts: HashMap<i64, usize> =
        all.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).fold(HashMap::new(), |mut m, id| {
            *m.entry(id).or_default() += 1;
            m
        });
    assert_eq!(counts.get(&gone), None);
    assert_eq!(counts.len(), expected.len());
    Ok(())
}

/// Files written under spec 0 and committed after another engine made spec 1 the default (a
/// retried append's kept files, a queued request's staged files) go in a spec-0 manifest.
#[tokio::test]
async fn files_written_before_the_spec_evolved_are_committed_under_their_spec() -> TestResult {
    let f = LocalTable::partitioned_by(Transform::Bucket(4)).await;
    let table = f.load().await;
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
    let ids: Vec<i64> = (0..24).collect();
    let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.clone())) as ArrayRef])?;
    let files = crate::engine::writer::write_data_files(&table, &[batch], "zstd", 64 << 20).await?;
    f.other_engine_commit(|b| {
        let spec = UnboundPartitionSpec::builder().add_partition_field(1, "id_bucket_8", Transform::Bucket(8))?.build();
        b.add_partition_spec(spec)?.set_default_partition_spec(-1)
    })
    .await?;
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(ChangeSet::append(files.clone()))).await?;
    let table = f.load().await;
    let old: HashSet<String> = files.iter().map(|d| d.file_path().to_string()).collect();
    assert_manifests_name_their_entries_spec(&table, &old).await?;
    assert_eq!(filtered_scan(&table, &ids).await?, ids);
    Ok(())
}

/// An identity partition of an int column another engine promoted to long: spec 0's partition
/// type is long now, the older entries' values ints. Rewritten manifests (a compaction's
/// removal, rewrite-manifests) widen them as readers do, rather than failing on every attempt.
#[tokio::test]
async fn an_identity_partition_of_a_promoted_column_is_rewritten_widened() -> TestResult {
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
    let schema = |n: PrimitiveType| {
        Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "n", Type::Primitive(n)).into(),
            ])
            .build()
    };
    let spec = UnboundPartitionSpec::builder().add_partition_field(2, "n", Transform::Identity)?.build();
    let f = LocalTable::of_schema(schema(PrimitiveType::Int)?, spec).await;
    let rows = |table: &Table, ids: std::ops::Range<i64>| -> TestResult<RecordBatch> {
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
        let n: ArrayRef = Arc::new(Int64Array::from_iter_values(ids.clone().map(|id| id % 3)));
        let n = arrow_cast::cast(&n, arrow.field_with_name("n")?.data_type())?;
        Ok(RecordBatch::try_new(arrow, vec![Arc::new(Int64Array::from_iter_values(ids)) as ArrayRef, n])?)
    };
    for ids in [0..6, 6..9] {
        let table = f.load().await;
        let files = crate::engine::writer::write_data_files(&table, &[rows(&table, ids)?], "zstd", 64 << 20).await?;
        f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(ChangeSet::append(files))).await?;
    }
    let table = f.other_engine_commit(|b| b.add_current_schema(schema(PrimitiveType::Long)?)).await?;
    let files = crate::engine::writer::write_data_files(&table, &[rows(&table, 9..12)?], "zstd", 64 << 20).await?;
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(ChangeSet::append(files))).await?;

    let config = crate::model::config::Config::from_args(["hot_partition_hours=1"])?;
    let report =
        crate::services::maintenance::compact::compact(&f.catalogs, &f.ident, &MaintenanceSettings::from(&config), false, soon()).await?;
    assert!(report.groups_committed >= 3, "{report:?}");
    let table = f.load().await;
    for n in 0..3i64 {
        let scan = table.scan().with_filter(Reference::new("n").equal_to(Datum::long(n))).build()?;
        let batches: Vec<RecordBatch> = scan.to_arrow().await?.try_collect().await?;
        let mut ids: Vec<i64> = batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect();
        ids.sort();
        assert_eq!(ids, (0..12).filter(|id| id % 3 == n).collect::<Vec<_>>());
    }
    Ok(())
}
