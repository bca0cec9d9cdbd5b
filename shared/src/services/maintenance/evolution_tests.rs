//! Maintenance of a table another engine evolved: files written before a column was added, a
//! type promoted (int → long, float → double, decimal precision up) or a struct grew are read
//! by Iceberg's evolution rules, and one action that fails does not stop the others.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Float64Type, Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, Decimal128Array, Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, StructArray,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, SchemaRef};
use futures::TryStreamExt;
use iceberg::spec::{NestedField, Operation, PrimitiveType, Schema, StructType, Transform, Type, UnboundPartitionSpec};
use iceberg::table::Table;

use super::{MaintenanceRequest, maintain};
use crate::engine::commit::ChangeSet;
use crate::engine::commit::row_delta::write_position_deletes;
use crate::testkit::{FixedChange, LocalTable, TestResult, data_file, soon};

fn primitive(p: PrimitiveType) -> Box<Type> {
    Box::new(Type::Primitive(p))
}

/// Schema 0: what the first files were written with.
fn schema_v0() -> Schema {
    let s = StructType::new(vec![NestedField::optional(6, "a", *primitive(PrimitiveType::Int)).into()]);
    Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "n", Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::optional(3, "x", Type::Primitive(PrimitiveType::Float)).into(),
            NestedField::optional(4, "d", Type::Primitive(PrimitiveType::Decimal { precision: 5, scale: 2 })).into(),
            NestedField::optional(5, "s", Type::Struct(s)).into(),
        ])
        .build()
        .unwrap()
}

/// Schema 1, as another engine evolves schema 0: promoted types, a struct field and a column
/// added.
fn schema_v1() -> Schema {
    let s = StructType::new(vec![
        NestedField::optional(6, "a", *primitive(PrimitiveType::Int)).into(),
        NestedField::optional(7, "b", *primitive(PrimitiveType::String)).into(),
    ]);
    Schema::builder()
        .with_schema_id(1)
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "n", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(3, "x", Type::Primitive(PrimitiveType::Double)).into(),
            NestedField::optional(4, "d", Type::Primitive(PrimitiveType::Decimal { precision: 10, scale: 2 })).into(),
            NestedField::optional(5, "s", Type::Struct(s)).into(),
            NestedField::optional(8, "note", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()
        .unwrap()
}

fn arrow(table: &Table) -> TestResult<SchemaRef> {
    Ok(Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?))
}

/// Three rows of schema 0 with ids `first..first + 3`: values, nulls and a null struct.
fn rows_v0(schema: &SchemaRef, first: i64) -> TestResult<RecordBatch> {
    let DataType::Struct(s_fields) = schema.field_with_name("s")?.data_type() else { return Err("s is a struct".into()) };
    let s = StructArray::try_new(
        s_fields.clone(),
        vec![Arc::new(Int32Array::from(vec![Some(1), None, Some(3)])) as ArrayRef],
        Some(NullBuffer::from(vec![true, true, false])),
    )?;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(first..first + 3)),
        Arc::new(Int32Array::from(vec![Some(10), None, Some(-7)])),
        Arc::new(Float32Array::from(vec![Some(1.5), Some(-0.25), None])),
        Arc::new(Decimal128Array::from(vec![Some(12345), Some(-1), None]).with_precision_and_scale(5, 2)?),
        Arc::new(s),
    ];
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// One row of schema 1 with id `id`, using what schema 0 could not hold.
fn row_v1(schema: &SchemaRef, id: i64) -> TestResult<RecordBatch> {
    let DataType::Struct(s_fields) = schema.field_with_name("s")?.data_type() else { return Err("s is a struct".into()) };
    let s = StructArray::try_new(
        s_fields.clone(),
        vec![Arc::new(Int32Array::from(vec![5])) as ArrayRef, Arc::new(StringArray::from(vec!["bee"]))],
        None,
    )?;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![id])),
        Arc::new(Int64Array::from(vec![1i64 << 40])),
        Arc::new(Float64Array::from(vec![0.1])),
        Arc::new(Decimal128Array::from(vec![1_234_567_890]).with_precision_and_scale(10, 2)?),
        Arc::new(s),
        Arc::new(StringArray::from(vec!["hi"])),
    ];
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

async fn append(f: &LocalTable, batch: RecordBatch) -> TestResult<Vec<iceberg::spec::DataFile>> {
    let table = f.load().await;
    let files = crate::engine::writer::write_data_files(&table, &[batch], "zstd", 64 << 20).await?;
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(ChangeSet::append(files.clone()))).await?;
    Ok(files)
}

/// One row as text, every column read through the current schema's types.
fn render(batch: &RecordBatch, i: usize) -> String {
    let c = |name: &str| batch.column_by_name(name).unwrap();
    let opt = |a: &ArrayRef, f: &dyn Fn(usize) -> String| if a.is_null(i) { "null".to_string() } else { f(i) };
    let (n, x, d, s, note) = (c("n"), c("x"), c("d"), c("s"), c("note"));
    let s_struct = s.as_struct();
    let (a, b) = (s_struct.column_by_name("a").unwrap(), s_struct.column_by_name("b").unwrap());
    format!(
        "id={} n={} x={} d={}/{:?} s={} note={}",
        c("id").as_primitive::<Int64Type>().value(i),
        opt(n, &|i| n.as_primitive::<Int64Type>().value(i).to_string()),
        opt(x, &|i| x.as_primitive::<Float64Type>().value(i).to_string()),
        opt(d, &|i| d.as_primitive::<Decimal128Type>().value(i).to_string()),
        d.data_type(),
        opt(s, &|_| format!(
            "{{a={} b={}}}",
            opt(a, &|i| a.as_primitive::<Int32Type>().value(i).to_string()),
            opt(b, &|i| b.as_string::<i32>().value(i).to_string())
        )),
        opt(note, &|i| note.as_string::<i32>().value(i).to_string()),
    )
}

async fn table_rows(table: &Table) -> TestResult<Vec<String>> {
    let batches: Vec<RecordBatch> = table.scan().build()?.to_arrow().await?.try_collect().await?;
    let mut rows: Vec<String> = batches.iter().flat_map(|b| (0..b.num_rows()).map(|i| render(b, i))).collect();
    rows.sort_by_key(|r| r[3..].split_once(' ').map(|(id, _)| id.parse::<i64>().unwrap_or(0)).unwrap_or(0));
    Ok(rows)
}

/// Files of schema 0 (one with a row deleted, as an upsert's delete leaves it), then another
/// engine evolves the schema, then a file of schema 1: compaction rewrites all three and folds
/// the delete in, every value read exactly, and every other action runs.
#[tokio::test]
async fn compaction_reads_files_of_older_schemas_by_the_evolution_rules() -> TestResult {
    let f = LocalTable::of_schema(schema_v0(), UnboundPartitionSpec::builder().build()).await;
    let schema = arrow(&f.load().await)?;
    let first = append(&f, rows_v0(&schema, 1)?).await?;
    append(&f, rows_v0(&schema, 4)?).await?;
    // Row id 2 (position 1 of the first file) deleted.
    let table = f.load().await;
    let deletes = write_position_deletes(&table, &first[0], &[1].into(), "zstd").await?;
    let mut change = ChangeSet::new(Operation::Delete);
    change.added_delete_files = vec![deletes];
    f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(change)).await?;

    let evolved = f.other_engine_commit(|b| b.add_current_schema(schema_v1())).await?;
    append(&f, row_v1(&arrow(&evolved)?, 7)?).await?;

    let config = crate::model::config::Config::from_args(["hot_partition_hours=1"])?;
    let request = MaintenanceRequest::new(&[], &["t".into()], false, &config)?;
    let report = maintain(&f.catalogs, &request, soon()).await?;
    let t = &report.tables[0];
    assert_eq!(t.error, None, "{t:?}");
    let compact = t.compact.as_ref().ok_or("compaction ran")?;
    assert_eq!((compact.groups_committed, compact.files_removed), (1, 3), "{compact:?}");
    assert!(t.rewrite_manifests.is_some() && t.expire.is_some() && t.remove_orphans.is_some(), "{t:?}");

    let table = f.load().await;
    let d = "Decimal128(10, 2)";
    let old = |id: i64| {
        [
            format!("id={id} n=10 x=1.5 d=12345/{d} s={{a=1 b=null}} note=null"),
            format!("id={} n=null x=-0.25 d=-1/{d} s={{a=null b=null}} note=null", id + 1),
            format!("id={} n=-7 x=null d=null/{d} s=null note=null", id + 2),
        ]
    };
    let [one, _deleted, three] = old(1);
    let mut expected = vec![one, three];
    expected.extend(old(4));
    expected.push(format!("id=7 n={} x=0.1 d=1234567890/{d} s={{a=5 b=bee}} note=hi", 1i64 << 40));
    assert_eq!(table_rows(&table).await?, expected);
    Ok(())
}

/// A compaction that fails (its files are gone from storage) is reported, and
/// rewrite-manifests, expiry and orphan removal still run.
#[tokio::test]
async fn one_failing_action_does_not_stop_the_others() -> TestResult {
    let f = LocalTable::new().await;
    for i in 0..5 {
        let table = f.load().await;
        // Entries only: the files were never written, so compaction cannot read them.
        let change = ChangeSet::append(vec![data_file(&table, &format!("missing-{i}"))]);
        f.catalogs.committer.commit(&f.ident, soon(), &mut FixedChange(change)).await?;
    }
    let config = crate::model::config::Config::from_args(["hot_partition_hours=1"])?;
    let request = MaintenanceRequest::new(&[], &["t".into()], false, &config)?;
    let report = maintain(&f.catalogs, &request, soon()).await?;
    let t = &report.tables[0];
    let error = t.error.as_deref().ok_or("the compaction's error is reported")?;
    assert!(error.starts_with("compact: ") && error.contains("missing-"), "{error}");
    assert_eq!(report.failures().len(), 1);
    let rewrite = t.rewrite_manifests.as_ref().ok_or("rewrite-manifests ran")?;
    assert!(rewrite.committed, "{rewrite:?}");
    assert!(t.expire.is_some() && t.remove_orphans.is_some(), "{t:?}");
    Ok(())
}

/// Files of the current hour written under an older spec (hour(ts)) than the default
/// (bucket(id), hour(ts)): their hour is at their own spec's position, and compaction leaves
/// that hot partition alone.
#[tokio::test]
async fn a_hot_partition_of_an_older_spec_is_left_alone() -> TestResult {
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into(),
        ])
        .build()?;
    let f = LocalTable::of_schema(schema, UnboundPartitionSpec::builder().build()).await;
    let by = |fields: Vec<(&str, Transform, i32)>| {
        let mut spec = UnboundPartitionSpec::builder();
        for (name, transform, source) in fields {
            spec = spec.add_partition_field(source, name, transform)?;
        }
        Ok::<_, iceberg::Error>(spec.build())
    };
    f.other_engine_commit(|b| b.add_partition_spec(by(vec![("ts_hour", Transform::Hour, 2)])?)?.set_default_partition_spec(-1)).await?;
    let now_us = chrono::Utc::now().timestamp_micros();
    for id in [1, 2] {
        let table = f.load().await;
        let arrow = arrow(&table)?;
        let ts = arrow_cast::cast(&(Arc::new(Int64Array::from(vec![now_us])) as ArrayRef), arrow.field_with_name("ts")?.data_type())?;
        append(&f, RecordBatch::try_new(arrow, vec![Arc::new(Int64Array::from(vec![id])) as ArrayRef, ts])?).await?;
    }
    let spec = by(vec![("id_bucket", Transform::Bucket(4), 1), ("ts_hour", Transform::Hour, 2)])?;
    f.other_engine_commit(|b| b.add_partition_spec(spec)?.set_default_partition_spec(-1)).await?;

    let config = crate::model::config::Config::from_args(["hot_partition_hours=2"])?; // 2: an hour may turn meanwhile
    let settings = super::MaintenanceSettings::from(&config);
    let report = super::compact::compact(&f.catalogs, &f.ident, &settings, false, soon()).await?;
    assert_eq!((report.groups_committed, report.hot_partitions_skipped), (0, 1), "{report:?}");
    Ok(())
}
