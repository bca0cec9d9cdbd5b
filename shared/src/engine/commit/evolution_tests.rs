//! Schema evolution through the committer: the schema lands with the files written for it, and
//! two writers that evolve the same table at once re-plan against each other's schema.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::Schema as ArrowSchema;
use futures::TryStreamExt;
use iceberg::arrow::schema_to_arrow_schema;
use iceberg::table::Table;

use super::append::{OffsetAppend, target_schema};
use crate::decode::RecordDecoder;
use crate::engine::catalog::Catalogs;
use crate::model::config::FailPoint;
use crate::model::event::TopicPartition;
use crate::model::schema::{Format, SourceSchema};
use crate::model::tables::lineage;

fn writer(extra: &str) -> Arc<SourceSchema> {
    let text = format!(r#"{{"type":"object","properties":{{"id":{{"type":"integer"}}{extra}}},"required":["id"]}}"#);
    Arc::new(SourceSchema::from_text(Format::Json, &text, None).unwrap())
}

async fn table_v1(dir: &tempfile::TempDir) -> (Catalogs, Table) {
    let path = dir.path().join("p.toml");
    std::fs::write(dir.path().join("v1.json"), r#"{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}"#).unwrap();
    std::fs::write(&path, "[[pipeline]]\ntable = \"orders\"\ntopics = [\"o\"]\nformat = \"json\"\nschema = \"v1.json\"\n").unwrap();
    let config = crate::model::config::Config::from_args([format!("warehouse={}", dir.path().join("wh").display())]).unwrap();
    let set = crate::model::pipeline::PipelineSet::load(&path, "p.toml", &config).await.unwrap();
    let catalogs = Catalogs::connect(&config).await.unwrap();
    let table = catalogs.ensure_table(&set.pipelines[0].def).await.unwrap();
    (catalogs, table)
}

/// Rows of `writer` decoded against `table` (evolved for it), at `offsets` of partition 0.
fn rows(table: &Table, writer: &Arc<SourceSchema>, values: &[&str], first_offset: i64) -> RecordBatch {
    let (schema, _, _) = target_schema(table, std::slice::from_ref(writer), Default::default()).unwrap();
    let layout = Arc::new(schema_to_arrow_schema(&schema).unwrap());
    let decoded: Vec<_> = layout.fields().iter().filter(|f| !lineage::is_lineage(f.name())).cloned().collect();
    let mut decoder = RecordDecoder::new(writer, Arc::new(ArrowSchema::new(decoded))).unwrap();
    for v in values {
        decoder.append(v.as_bytes()).unwrap();
    }
    let mut columns = decoder.finish().unwrap().into_iter();
    let n = values.len();
    let arrays: Vec<ArrayRef> = layout
        .fields()
        .iter()
        .map(|f| match f.name().as_str() {
            lineage::TOPIC => Arc::new(StringArray::from(vec!["o"; n])) as ArrayRef,
            lineage::PARTITION => Arc::new(Int32Array::from(vec![0; n])),
            lineage::OFFSET => Arc::new(Int64Array::from_iter_values(first_offset..first_offset + n as i64)),
            _ => columns.next().unwrap(),
        })
        .collect();
    RecordBatch::try_new(layout, arrays).unwrap()
}

fn append(rows: RecordBatch, writer: &Arc<SourceSchema>) -> OffsetAppend {
    let first = rows.column_by_name(lineage::OFFSET).unwrap().as_primitive::<Int64Type>().value(0);
    let ranges = BTreeMap::from([(TopicPartition { topic: "o".into(), partition: 0 }, (first, first + rows.num_rows() as i64 - 1))]);
    OffsetAppend::new(rows, ranges, "zstd", 1 << 27, FailPoint::None).with_writers(vec![writer.clone()])
}

async fn read(table: &Table) -> Vec<RecordBatch> {
    table.scan().select_all().build().unwrap().to_arrow().await.unwrap().try_collect().await.unwrap()
}

/// `column` of every row, by offset.
fn column(batches: &[RecordBatch], name: &str) -> BTreeMap<i64, Option<String>> {
    let mut out = BTreeMap::new();
    for b in batches {
        let offsets = b.column_by_name(lineage::OFFSET).unwrap().as_primitive::<Int64Type>();
        let values = b.column_by_name(name).map(|c| arrow_cast::cast(c, &arrow_schema::DataType::Utf8).unwrap());
        for i in 0..b.num_rows() {
            let v = values.as_ref().and_then(|c| if c.is_null(i) { None } else { Some(c.as_string::<i32>().value(i).to_string()) });
            out.insert(offsets.value(i), v);
        }
    }
    out
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

#[tokio::test]
async fn the_schema_change_lands_in_the_commit_of_the_first_rows_that_need_it() {
    let dir = tempfile::tempdir().unwrap();
    let (catalogs, table) = table_v1(&dir).await;
    let v2 = writer(r#","note":{"type":"string"}"#);
    let before = table.metadata().current_schema_id();
    let snapshots = table.metadata().snapshots().count();
    let mut planner = append(rows(&table, &v2, &[r#"{"id":1,"note":"a"}"#], 0), &v2);
    let out = catalogs.committer.commit_to(table, deadline(), &mut planner).await.unwrap();
    let metadata = out.table.metadata();
    assert_ne!(metadata.current_schema_id(), before);
    assert_eq!(metadata.snapshots().count(), snapshots + 1, "one commit: schema and rows together");
    assert_eq!(metadata.current_snapshot().unwrap().schema_id(), Some(metadata.current_schema_id()));
    assert!(metadata.current_schema().field_by_name("note").is_some_and(|f| !f.required));
    assert_eq!(column(&read(&out.table).await, "note"), BTreeMap::from([(0, Some("a".to_string()))]));
}

#[tokio::test]
async fn two_writers_evolving_at_once_replan_one_column_each_never_two_for_one_name() {
    let dir = tempfile::tempdir().unwrap();
    let (catalogs, stale) = table_v1(&dir).await;
    let note = writer(r#","note":{"type":"string"}"#);
    let memo = writer(r#","memo":{"type":"string"},"note":{"type":"string"}"#);
    // B plans first against v1 (its `memo` and `note` take the next ids), then A commits `note`.
    let mut b = append(rows(&stale, &memo, &[r#"{"id":2,"memo":"m","note":"b"}"#], 10), &memo);
    let mut a = append(rows(&stale, &note, &[r#"{"id":1,"note":"a"}"#], 0), &note);
    // A is another process (a committer of its own): B learns of A's commit only from the catalog.
    let other_process = super::Committer::new(catalogs.committer.catalog().clone(), catalogs.committer.pointer().clone());
    other_process.commit(&catalogs.ident("orders"), deadline(), &mut a).await.unwrap();
    // B starts from its stale table: the swap loses, it reloads and plans against A's schema.
    let out = catalogs.committer.commit_to(stale, deadline(), &mut b).await.unwrap();
    assert!(out.attempts >= 2, "B must have lost the first swap");
    let schema = out.table.metadata().current_schema();
    let names: Vec<&str> = schema.as_struct().fields().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names.iter().filter(|n| **n == "note").count(), 1, "{names:?}");
    let (note_id, memo_id) = (schema.field_by_name("note").unwrap().id, schema.field_by_name("memo").unwrap().id);
    assert_ne!(note_id, memo_id);
    // B's files were rewritten for the ids A's commit settled: every value reads back in place.
    let batches = read(&out.table).await;
    assert_eq!(column(&batches, "note"), BTreeMap::from([(0, Some("a".into())), (10, Some("b".into()))]));
    assert_eq!(column(&batches, "memo"), BTreeMap::from([(0, None), (10, Some("m".into()))]));
}

/// A `schema = "infer"` writer whose `id` (a long column of the table) now carries fractions.
fn doubles() -> Arc<SourceSchema> {
    use crate::model::schema::{Field, Prim, Ty};
    let mut schema = crate::model::schema::json_schema::JsonSchema::of_fields(vec![Field::new("id", true, Ty::Prim(Prim::Double))]);
    schema.replace_long = vec!["id".into()];
    Arc::new(SourceSchema::Json(schema))
}

/// `id` of every row as a double, by offset.
fn ids(batches: &[RecordBatch]) -> BTreeMap<i64, f64> {
    let mut out = BTreeMap::new();
    for b in batches {
        let offsets = b.column_by_name(lineage::OFFSET).unwrap().as_primitive::<Int64Type>();
        let values = b.column_by_name("id").unwrap().as_primitive::<arrow_array::types::Float64Type>();
        out.extend((0..b.num_rows()).map(|i| (offsets.value(i), values.value(i))));
    }
    out
}

#[tokio::test]
async fn a_long_column_meeting_fractions_becomes_a_double_with_every_live_file_rewritten_in_the_rows_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (catalogs, table) = table_v1(&dir).await;
    let v1 = writer("");
    let batch = rows(&table, &v1, &[r#"{"id":1}"#, r#"{"id":2}"#], 0);
    let stale = catalogs.committer.commit_to(table, deadline(), &mut append(batch, &v1)).await.unwrap().table;
    let old_id = stale.metadata().current_schema().field_by_name("id").unwrap().id;
    assert_eq!(super::replace_column::can_replace(&stale, &["id".into()]).await.unwrap(), ["id"]);
    // Another process appends a long meanwhile: the replacing commit loses its first swap and
    // rewrites that file too.
    let mut other = append(rows(&stale, &v1, &[r#"{"id":7}"#], 5), &v1);
    let other_process = super::Committer::new(catalogs.committer.catalog().clone(), catalogs.committer.pointer().clone());
    other_process.commit(&catalogs.ident("orders"), deadline(), &mut other).await.unwrap();
    let snapshots = stale.metadata().snapshots().count();
    let d = doubles();
    let batch = rows(&stale, &d, &[r#"{"id":2.5}"#], 6);
    let out = catalogs.committer.commit_to(stale, deadline(), &mut append(batch, &d)).await.unwrap();
    assert!(out.attempts >= 2, "the replacing commit must have lost the first swap");
    let metadata = out.table.metadata();
    let id = metadata.current_schema().field_by_name("id").unwrap();
    assert_eq!((id.field_type.to_string().as_str(), id.id != old_id), ("double", true), "a new field id, not a promotion");
    assert_eq!(metadata.snapshots().count(), snapshots + 2, "the other append, then one commit: schema, rewrite and rows");
    assert_eq!(metadata.current_snapshot().unwrap().summary().operation, iceberg::spec::Operation::Overwrite);
    assert_eq!(ids(&read(&out.table).await), BTreeMap::from([(0, 1.0), (1, 2.0), (5, 7.0), (6, 2.5)]));
}

#[tokio::test]
async fn a_long_column_with_a_value_beyond_2_pow_53_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let (catalogs, table) = table_v1(&dir).await;
    let v1 = writer("");
    let batch = rows(&table, &v1, &[r#"{"id":9007199254740993}"#], 0);
    let table = catalogs.committer.commit_to(table, deadline(), &mut append(batch, &v1)).await.unwrap().table;
    assert!(super::replace_column::can_replace(&table, &["id".into()]).await.unwrap().is_empty());
    assert_eq!(super::replace_column::candidates(table.metadata()), ["id"]);
}
