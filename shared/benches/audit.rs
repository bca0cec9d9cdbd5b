//! `make bench` (part 4): `icestream audit` on a table of AUDIT_ROWS rows (default 10M) with
//! lineage columns, 16 Kafka partitions, written once into a temporary local warehouse through
//! the exactly-once append (so the watermarks are real), and an empty dead-letter table. Prints
//! the audit's wall time and verdict as one JSON line.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type, UnboundPartitionSpec};
use icestream::Config;
use icestream::engine::catalog::Catalogs;
use icestream::engine::commit::append::OffsetAppend;
use icestream::model::config::FailPoint;
use icestream::model::event::TopicPartition;
use icestream::model::tables::{TableDef, dead_letter_table, lineage};

const PARTITIONS: i32 = 16;
const CHUNK: i64 = 1_000_000;

fn table_def() -> TableDef {
    let schema = Schema::builder()
        .with_fields([
            NestedField::required(1, "payload", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(2, lineage::TOPIC, Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(3, lineage::PARTITION, Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::required(4, lineage::OFFSET, Type::Primitive(PrimitiveType::Long)).into(),
        ])
        .build()
        .unwrap();
    TableDef {
        name: "audited".into(),
        schema,
        partition_spec: UnboundPartitionSpec::builder().build(),
        properties: HashMap::new(),
        sort_order: None,
        format_version: None,
    }
}

#[tokio::main]
async fn main() {
    let rows: i64 = std::env::var("AUDIT_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000_000);
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_args([format!("warehouse={}", dir.path().display())]).unwrap();
    let catalogs = Catalogs::connect(&config).await.unwrap();
    let def = table_def();
    let table = catalogs.ensure_table(&def).await.unwrap();
    catalogs.ensure_table(&dead_letter_table("audited_dead_letter", "zstd").unwrap()).await.unwrap();
    let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema()).unwrap());

    let written = Instant::now();
    let per_partition = CHUNK / i64::from(PARTITIONS);
    let mut next_offset = 0i64;
    let mut total = 0i64;
    while total < rows {
        let n = per_partition.min((rows - total + i64::from(PARTITIONS) - 1) / i64::from(PARTITIONS));
        let mut ranges = BTreeMap::new();
        let (mut topics, mut partitions, mut offsets) = (Vec::new(), Vec::new(), Vec::new());
        for p in 0..PARTITIONS {
            ranges.insert(TopicPartition { topic: "events".into(), partition: p }, (next_offset, next_offset + n - 1));
            for o in next_offset..next_offset + n {
                topics.push("events");
                partitions.push(p);
                offsets.push(o);
            }
        }
        next_offset += n;
        total += n * i64::from(PARTITIONS);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(offsets.clone())),
            Arc::new(StringArray::from(topics)),
            Arc::new(Int32Array::from(partitions)),
            Arc::new(Int64Array::from(offsets)),
        ];
        let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
        let mut planner = OffsetAppend::new(batch, ranges, "zstd", 128 << 20, FailPoint::None);
        let deadline = Instant::now() + Duration::from_secs(600);
        catalogs.committer.commit(&catalogs.ident("audited"), deadline, &mut planner).await.unwrap();
    }
    let written = written.elapsed();

    let started = Instant::now();
    let report = icestream::services::audit::audit(&catalogs, "audited").await.unwrap();
    let audit = started.elapsed();
    assert_eq!(report.rows, total as u64, "{}", report.verdict_line());
    println!(
        "{}",
        serde_json::json!({
            "rows": total,
            "partitions": PARTITIONS,
            "write_s": (written.as_secs_f64() * 100.0).round() / 100.0,
            "audit_s": (audit.as_secs_f64() * 100.0).round() / 100.0,
            "rows_per_s": (total as f64 / audit.as_secs_f64()).round(),
            "verdict": report.verdict,
        })
    );
}
