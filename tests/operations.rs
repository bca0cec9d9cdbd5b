//! Operating it: the audit proves exactly-once from the tables (and fails on a duplicate file
//! committed behind ingest's back), dead letters made by a stale schema are replayed once after
//! the fix with the audit still adding up, and the per-table EMF line and snapshot summary carry
//! the records' ages at commit.

use std::path::Path;

use base64::Engine;
use iceberg::table::Table;
use icestream::engine::catalog::Catalogs;
use icestream::engine::commit::{ChangeSet, Planner};
use icestream_integration::*;
use serde_json::{Value, json};

/// An MSK event on topic `orders`, partition 0, offsets 0..10: 0-5 written with V1, 6-9 with V2;
/// record `i` has the Kafka timestamp `timestamps[i]`.
fn event_at(timestamps: &[i64; 10]) -> Value {
    let records: Vec<Value> = (0..10)
        .map(|i| {
            let value = avro_order(i, &format!("order {i}"), (i >= 6).then_some(i * 100));
            json!({"topic": "orders", "partition": 0, "offset": i, "timestamp": timestamps[i as usize], "timestampType": "CREATE_TIME",
                   "value": base64::engine::general_purpose::STANDARD.encode(value), "headers": []})
        })
        .collect();
    json!({"eventSource": "aws:kafka", "records": {"orders-0": records}})
}

fn event() -> Value {
    event_at(&std::array::from_fn(|i| 1_764_000_000_000 + i as i64))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test]
async fn the_per_table_emf_line_and_the_snapshot_carry_the_records_ages_at_commit() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let pipelines = pipeline_file(dir.path());
    let pipeline = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={pipelines}")])).await.unwrap();
    // Ten records, 10 minutes to 1 minute old, in shuffled order.
    let now = now_ms();
    let ages_s: [i64; 10] = [420, 600, 60, 300, 540, 120, 360, 180, 480, 240];
    let timestamps: [i64; 10] = std::array::from_fn(|i| now - ages_s[i] * 1000);
    let before = now_ms();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let summary = pipeline.handle_json(event_at(&timestamps).to_string().as_bytes(), deadline).await.unwrap();
    let after = now_ms();

    let lines = icestream::services::metrics::emf_lines(&summary);
    assert_eq!(lines.len(), 2, "the invocation's line and one per table");
    let line: Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!((line["Table"].as_str(), line["Function"].as_str()), (Some("orders"), Some("ingest")), "{line}");
    assert_eq!(line["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["Function", "Table"]]));
    assert_eq!((line["Written"].as_f64(), line["DeadLettered"].as_f64()), (Some(6.0), Some(4.0)));
    // Every record of the event counts (its offsets are what the commit covers). Sorted
    // timestamps: the oldest is 600 s old, the newest 60 s; nearest-rank p50 of ten ages is
    // the 5th youngest (300 s), p99 the oldest.
    let within = |name: &str, age_s: i64| {
        let ts = now - age_s * 1000;
        let value = line[name].as_f64().unwrap_or_else(|| panic!("{name} missing: {line}")) as i64;
        assert!((before - ts..=after - ts).contains(&value), "{name} = {value}, expected the commit time minus {ts} ({line})");
    };
    within("NewestRecordAge", 60);
    within("RecordAgeMax", 600);
    within("RecordAgeP50", 300);
    within("RecordAgeP99", 600);
    let latency = line["CommitLatency"].as_f64().unwrap() as i64;
    assert!((0..=after - before).contains(&latency), "{line}");

    // The snapshot records the same figures.
    let catalogs = Catalogs::connect(&config(&wh, &[])).await.unwrap();
    let table = catalogs.catalog().load_table(&catalogs.ident("orders")).await.unwrap();
    let recorded =
        icestream::base::freshness::Freshness::from_summary(&table.metadata().current_snapshot().unwrap().summary().additional_properties)
            .unwrap();
    assert_eq!(Some(recorded), summary.table_metrics[0].freshness);
    assert_eq!(recorded.newest_record_ms, now - 60_000);

    // `icestream status` reads the same figures back, with the last hour's counts.
    let out = icestream(&["status", "output=json", &format!("warehouse={}", wh.display()), &format!("pipelines={pipelines}")], &[]);
    let status = &summary_of(&out)[0];
    assert_eq!(status["table"], "orders");
    assert_eq!((status["rows_last_hour"].as_u64(), status["dead_letters_last_hour"].as_u64()), (Some(6), Some(4)), "{status}");
    // Six rows of an unpartitioned table: one (small) file.
    assert_eq!((status["files_last_hour"].as_u64(), status["small_files"].as_u64()), (Some(1), Some(1)), "{status}");
    assert_eq!(status["freshness"], serde_json::to_value(recorded).unwrap());
    assert!(status["newest_record_age_ms"].as_i64().unwrap() >= 60_000, "{status}");
    assert!(status["last_commit"].as_str().is_some() && status["pending_commit_requests"].is_null(), "{status}");

    // Queued commits: a request the committer has not taken yet is a staged manifest.
    let data_file = {
        let list =
            icestream::engine::commit::manifest_cache::manifest_list(&table, table.metadata().current_snapshot().unwrap()).await.unwrap();
        icestream::engine::commit::manifest_cache::manifest(&table, &list[0]).await.unwrap().entries()[0].data_file().clone()
    };
    icestream::engine::commit::staged::write_staged_manifest(&table, &[data_file], &uuid::Uuid::new_v4()).await.unwrap();
    let queued = ["commit_mode=queued", "commit_queue_url=http://127.0.0.1:9/queue.fifo"];
    let out = icestream(
        &[&["status", "output=json", &format!("warehouse={}", wh.display()), &format!("pipelines={pipelines}")], &queued[..]].concat(),
        &[],
    );
    assert_eq!(summary_of(&out)[0]["pending_commit_requests"], 1);
}

fn pipeline_file(dir: &Path) -> String {
    std::fs::write(dir.join("order.avsc"), ORDER_V1).unwrap();
    let file = dir.join("pipelines.toml");
    std::fs::write(
        &file,
        "[[pipeline]]\ntable = \"orders\"\ntopics = [\"orders\"]\nformat = \"avro\"\nschema = \"order.avsc\"\nkey = [\"id\"]\n",
    )
    .unwrap();
    file.display().to_string()
}

/// `icestream audit orders`: the exit code and the JSON report (the last line).
fn audit(args: &[&str]) -> (i32, Value) {
    let out = icestream(&[&["audit", "orders"], args].concat(), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_else(|| panic!("no report: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(stdout.lines().next().unwrap().starts_with("audit bigdata.orders: "), "{stdout}");
    (out.status.code().unwrap(), serde_json::from_str(last).unwrap())
}

fn offsets_of(batches: &[arrow_array::RecordBatch]) -> Vec<i64> {
    use arrow_array::cast::AsArray;
    let mut out: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column_by_name("kafka_offset").unwrap().as_primitive::<arrow_array::types::Int64Type>().values().to_vec())
        .collect();
    out.sort();
    out
}

/// Re-adds a data file the table already holds: the duplicate a broken writer would commit.
struct DuplicateFile;

impl Planner for DuplicateFile {
    async fn plan(&mut self, table: &Table, _attempt: u32) -> icestream::Result<Option<ChangeSet>> {
        let snapshot = table.metadata().current_snapshot().unwrap();
        let list = icestream::engine::commit::manifest_cache::manifest_list(table, snapshot).await?;
        let manifest = icestream::engine::commit::manifest_cache::manifest(table, &list[0]).await?;
        let file = manifest.entries()[0].data_file().clone();
        Ok(Some(ChangeSet::append(vec![file])))
    }
}

#[tokio::test]
async fn audit_passes_replay_adds_once_and_a_duplicate_file_fails_the_audit() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let (warehouse, pipelines) = (format!("warehouse={}", wh.display()), format!("pipelines={}", pipeline_file(dir.path())));
    let event = write_event(dir.path(), "event.json", &event());
    let s = summary_of(&icestream(&["ingest", event.to_str().unwrap(), &warehouse, &pipelines], &[]));
    assert_eq!((s["written"].as_u64(), s["dead_letter"].as_u64()), (Some(6), Some(4)), "{s}");

    let (code, report) = audit(&[&warehouse, &pipelines]);
    assert_eq!((code, report["verdict"].as_str()), (0, Some("pass")), "{report}");
    assert_eq!((report["rows"].as_u64(), report["dead_letters"].as_u64(), report["gap_offsets"].as_u64()), (Some(6), Some(4), Some(0)));

    // The fix: the pipeline reads the producer's new schema (the table keeps its columns).
    std::fs::write(dir.path().join("order.avsc"), ORDER_V2).unwrap();
    let replay =
        |extra: &[&str]| summary_of(&icestream(&[&["dead-letters", "replay", "orders", &warehouse, &pipelines], extra].concat(), &[]));
    let dry = replay(&["dry-run=true"]);
    assert_eq!((dry["replayed"].as_u64(), dry["snapshot_id"].as_i64()), (Some(4), None), "{dry}");
    // A filter that matches nothing replays nothing.
    assert_eq!(replay(&["dry-run=true", "reason=no such reason"])["matched"], 0);
    assert_eq!(offsets_of(&scan(&wh, "orders").await), (0..6).collect::<Vec<_>>(), "a dry run commits nothing");

    let first = replay(&["since=1h", "reason=left over"]);
    assert_eq!((first["matched"].as_u64(), first["replayed"].as_u64()), (Some(4), Some(4)), "{first}");
    assert!(first["still_failing"].as_object().unwrap().is_empty());
    assert_eq!(offsets_of(&scan(&wh, "orders").await), (0..10).collect::<Vec<_>>(), "every offset once");
    // The replay's commit evolved the table: the new optional column holds the replayed values.
    let mut extras: Vec<(i64, Option<i64>)> = Vec::new();
    for b in scan(&wh, "orders").await {
        use arrow_array::cast::AsArray;
        use arrow_array::types::Int64Type;
        let (offsets, extra) = (
            b.column_by_name("kafka_offset").unwrap().as_primitive::<Int64Type>(),
            b.column_by_name("extra").unwrap().as_primitive::<Int64Type>(),
        );
        extras.extend((0..b.num_rows()).map(|i| (offsets.value(i), (!arrow_array::Array::is_null(extra, i)).then(|| extra.value(i)))));
    }
    extras.sort();
    assert_eq!(extras, (0..10).map(|i| (i, (i >= 6).then_some(i * 100))).collect::<Vec<_>>());
    // The second replay, and an audit, as the scheduled maintenance function runs them.
    let maintained = summary_of(&icestream(&["maintain", "action=audit,replay-dead-letters", "table=orders", &warehouse, &pipelines], &[]));
    let second = &maintained["tables"][0]["replay_dead_letters"];
    assert_eq!((second["replayed"].as_u64(), second["already_replayed"].as_u64()), (Some(0), Some(4)), "{maintained}");
    assert_eq!(maintained["tables"][0]["audit"]["verdict"], "pass", "{maintained}");
    assert_eq!(offsets_of(&scan(&wh, "orders").await).len(), 10);
    assert_eq!(offsets_of(&scan(&wh, "orders_dead_letter").await), (6..10).collect::<Vec<_>>(), "dead letters stay");

    let (code, report) = audit(&[&warehouse, &pipelines]);
    assert_eq!((code, report["verdict"].as_str(), report["replayed"].as_u64()), (0, Some("pass"), Some(4)), "{report}");
    // The redelivered batch still adds nothing.
    let s = summary_of(&icestream(&["ingest", event.to_str().unwrap(), &warehouse, &pipelines], &[]));
    assert_eq!((s["written"].as_u64(), s["skipped_replay"].as_u64()), (Some(0), Some(10)), "{s}");

    // A file committed a second time, behind ingest's back.
    let catalogs = Catalogs::connect(&config(&wh, &[])).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    catalogs.committer.commit(&catalogs.ident("orders"), deadline, &mut DuplicateFile).await.unwrap();
    let out = icestream(&["maintain", "action=audit", "table=orders", &warehouse, &pipelines], &[]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("FAIL"), "a failed audit fails the scheduled run");
    let (code, report) = audit(&[&warehouse, &pipelines]);
    assert_eq!((code, report["verdict"].as_str()), (1, Some("fail")), "{report}");
    let duplicates = report["duplicates"].as_array().unwrap();
    assert!(!duplicates.is_empty() && report["duplicate_offsets"].as_u64() == Some(duplicates.len() as u64), "{report}");
    for d in duplicates {
        assert_eq!((d["topic"].as_str(), d["partition"].as_i64(), d["in_table"].as_u64()), (Some("orders"), Some(0), Some(2)), "{d}");
    }
}

/// A log sink the test reads back.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn json_log_lines_about_a_batch_carry_the_request_id_table_and_offsets() {
    use tracing::Instrument;
    let captured = Captured::default();
    let writer = captured.clone();
    // The process-wide subscriber: a thread-local one misses events when another test thread
    // registers a callsite first (tracing caches interest per callsite). Other tests' lines
    // land here too; the checks below look at this invocation's lines.
    tracing::subscriber::set_global_default(icestream::base::logging::json_subscriber(move || writer.clone())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pipelines = pipeline_file(dir.path());
    let pipeline = icestream::IngestPipeline::new(config(&dir.path().join("wh"), &[&format!("pipelines={pipelines}")])).await.unwrap();
    // What lambda_runtime wraps each invocation in.
    let invocation = tracing::info_span!("Lambda runtime invoke", requestId = "req-42");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    pipeline.handle_json(event().to_string().as_bytes(), deadline).instrument(invocation).await.unwrap();

    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}"))).collect();
    let span = |line: &Value, name: &str| line["spans"].as_array().and_then(|s| s.iter().find(|s| s["name"] == name).cloned());
    let ours = |l: &&Value| span(l, "Lambda runtime invoke").is_some_and(|s| s["requestId"] == "req-42");
    let batch_lines: Vec<&Value> = lines.iter().filter(ours).filter(|l| span(l, "batch").is_some()).collect();
    assert!(batch_lines.iter().any(|l| l["message"] == "table committed" && l["written"] == 6), "{text}");
    for line in batch_lines {
        let batch = span(line, "batch").unwrap();
        assert_eq!((batch["table"].as_str(), batch["offsets"].as_str()), (Some("bigdata.orders"), Some("orders-0:0-9")), "{line}");
        assert!(line["level"].is_string() && line["timestamp"].is_string(), "{line}");
    }
}

/// Produce `orders` values (V1) with ids `ids` to partition 0 of `topic`.
fn produce_orders(bootstrap: &str, ids: std::ops::Range<i64>) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = icestream_tools::kafka::client_config(bootstrap).create().unwrap();
    for id in ids {
        let value = avro_order(id, &format!("order {id}"), None);
        producer.send(BaseRecord::<(), [u8]>::to("orders").partition(0).payload(&value)).unwrap();
    }
    producer.flush(std::time::Duration::from_secs(30)).unwrap();
}

/// Tansu 0.6.0 (the local broker) cannot remove records: DeleteRecords resets the connection
/// and its memory storage enforces no `retention.ms`. So the gap here is one the broker still
/// holds: batches a broken mapping never delivered. The broker tells it apart (lost; dropped by
/// dedup when the pipeline dedups); the retention cause (below the log start offset) is
/// classified by the same code, unit-tested in tools/src/broker_gaps.rs.
#[tokio::test]
async fn a_gap_the_broker_still_holds_is_reported_lost_and_fails_the_audit() {
    use icestream_integration::broker::Broker;
    let broker = Broker::start(&[("orders", 1)]);
    let bootstrap = broker.bootstrap();
    produce_orders(&bootstrap, 0..30);
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let (warehouse, pipelines) = (format!("warehouse={}", wh.display()), format!("pipelines={}", pipeline_file(dir.path())));
    // The same records as the broker holds, delivered without offsets 10-19.
    for (name, offsets) in [("a.json", 0..10), ("b.json", 20..30)] {
        let records: Vec<Value> = offsets
            .map(|i| {
                json!({"topic": "orders", "partition": 0, "offset": i, "timestamp": now_ms(), "headers": [],
                            "value": base64::engine::general_purpose::STANDARD.encode(avro_order(i, &format!("order {i}"), None))})
            })
            .collect();
        let event = write_event(dir.path(), name, &json!({"eventSource": "aws:kafka", "records": {"orders-0": records}}));
        summary_of(&icestream(&["ingest", event.to_str().unwrap(), &warehouse, &pipelines], &[]));
    }
    let (code, report) = audit(&[&warehouse, &pipelines]);
    assert_eq!((code, report["gap_offsets"].as_u64()), (0, Some(10)), "a gap alone fails nothing: {report}");
    assert!(report["gaps"][0]["cause"].is_null(), "without the broker a gap is unexplained: {report}");
    let (code, report) = audit(&[&warehouse, &pipelines, &format!("bootstrap={bootstrap}")]);
    assert_eq!((code, report["verdict"].as_str()), (1, Some("fail")), "{report}");
    assert_eq!(report["gaps"], json!([{"topic": "orders", "partition": 0, "from": 10, "to": 19, "cause": "lost"}]), "{report}");
}

/// `(offset, kafka_timestamp µs, kafka_timestamp_type, kafka_key, headers)` of every row of
/// `table`, sorted by offset; `None` where a column is null.
type MetaRow = (i64, Option<i64>, Option<String>, Option<Vec<u8>>, Option<Vec<(String, Vec<u8>)>>);

/// Rows from `first_offset` on, of the `columns` among them the table has: iceberg-rust's scan
/// cannot give a binary column null for a file written before the column was added (PyIceberg
/// and DuckDB read those in tests/python), so the older file is skipped by its statistics.
async fn metadata_rows(wh: &Path, table: &str, first_offset: i64, columns: &[&str]) -> Vec<MetaRow> {
    use arrow_array::cast::AsArray;
    use arrow_array::{Array, MapArray};
    use arrow_schema::{DataType, TimeUnit};
    use futures::TryStreamExt;
    let catalogs = Catalogs::connect(&config(wh, &[])).await.unwrap();
    let table = catalogs.catalog().load_table(&catalogs.ident(table)).await.unwrap();
    let schema = table.metadata().current_schema().clone();
    let selected = ["kafka_offset"].into_iter().chain(columns.iter().copied().filter(|c| schema.field_by_name(c).is_some()));
    let filter = iceberg::expr::Reference::new("kafka_offset").greater_than_or_equal_to(iceberg::spec::Datum::long(first_offset));
    let batches: Vec<arrow_array::RecordBatch> =
        table.scan().select(selected).with_filter(filter).build().unwrap().to_arrow().await.unwrap().try_collect().await.unwrap();
    let mut out = Vec::new();
    for b in batches.into_iter().filter(|b| b.num_rows() > 0) {
        let column = |name: &str, to: &DataType| b.column_by_name(name).map(|c| arrow_cast::cast(c, to).unwrap());
        let offsets = column("kafka_offset", &DataType::Int64).unwrap();
        let ts = column("kafka_timestamp", &DataType::Timestamp(TimeUnit::Microsecond, None));
        let kind = column("kafka_timestamp_type", &DataType::Utf8);
        let key = column("kafka_key", &DataType::LargeBinary);
        let headers = b.column_by_name("kafka_headers").map(|c| c.as_any().downcast_ref::<MapArray>().unwrap().clone());
        for i in 0..b.num_rows() {
            if offsets.as_primitive::<arrow_array::types::Int64Type>().value(i) < first_offset {
                continue;
            }
            let valid = |a: &Option<arrow_array::ArrayRef>| a.as_ref().filter(|a| a.is_valid(i)).cloned();
            out.push((
                offsets.as_primitive::<arrow_array::types::Int64Type>().value(i),
                valid(&ts).map(|a| a.as_primitive::<arrow_array::types::TimestampMicrosecondType>().value(i)),
                valid(&kind).map(|a| a.as_string::<i32>().value(i).to_string()),
                valid(&key).map(|a| a.as_binary::<i64>().value(i).to_vec()),
                headers.as_ref().filter(|m| m.is_valid(i)).map(|m| {
                    let entries = m.value(i);
                    let names = arrow_cast::cast(entries.column(0), &DataType::Utf8).unwrap();
                    let values = arrow_cast::cast(entries.column(1), &DataType::LargeBinary).unwrap();
                    (0..names.len())
                        .map(|j| (names.as_string::<i32>().value(j).to_string(), values.as_binary::<i64>().value(j).to_vec()))
                        .collect()
                }),
            ));
        }
    }
    out.sort_by_key(|r| r.0);
    out
}

#[tokio::test]
async fn kafka_columns_evolve_the_table_with_the_rows_and_replayed_dead_letters_carry_them() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let pipelines = pipeline_file(dir.path());
    let deadline = || std::time::Instant::now() + std::time::Duration::from_secs(60);
    let record = |i: i64| {
        let value = avro_order(i, &format!("order {i}"), (i >= 6).then_some(i * 100));
        let kind = if i % 2 == 0 { "CREATE_TIME" } else { "LOG_APPEND_TIME" };
        json!({"topic": "orders", "partition": 0, "offset": i, "timestamp": 1_764_000_000_000 + i, "timestampType": kind,
               "key": base64::engine::general_purpose::STANDARD.encode(format!("k{i}")),
               "value": base64::engine::general_purpose::STANDARD.encode(value), "headers": [{"trace": [i as i8, -1]}, {"tenant": [7]}]})
    };
    let event = |offsets: std::ops::Range<i64>| json!({"eventSource": "aws:kafka", "records": {"orders-0": offsets.map(record).collect::<Vec<_>>()}});

    // A table written before the pipeline asked for metadata columns.
    let pipeline = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={pipelines}")])).await.unwrap();
    pipeline.handle_json(event(0..5).to_string().as_bytes(), deadline()).await.unwrap();
    drop(pipeline);
    let text = std::fs::read_to_string(&pipelines).unwrap() + "kafka_columns = [\"timestamp\", \"timestamp_type\", \"key\", \"headers\"]\n";
    std::fs::write(&pipelines, text).unwrap();

    let pipeline = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={pipelines}")])).await.unwrap();
    let catalogs = Catalogs::connect(&config(&wh, &[])).await.unwrap();
    let table = catalogs.catalog().load_table(&catalogs.ident("orders")).await.unwrap();
    assert!(table.metadata().current_schema().field_by_name("kafka_key").is_none(), "start does not evolve the data table");
    let s = pipeline.handle_json(event(0..10).to_string().as_bytes(), deadline()).await.unwrap();
    assert_eq!((s.written, s.dead_letter, s.schema_changes), (1, 4, 1), "{s:?}");
    let table = catalogs.catalog().load_table(&catalogs.ident("orders")).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap();
    assert_eq!(
        (table.metadata().snapshots().count(), snapshot.schema_id()),
        (2, Some(table.metadata().current_schema_id())),
        "the columns came in the rows' swap"
    );
    let ts = |i: i64| Some((1_764_000_000_000 + i) * 1000);
    let kind = |i: i64| Some(if i % 2 == 0 { "CREATE_TIME" } else { "LOG_APPEND_TIME" }.to_string());
    let full = |i: i64| -> MetaRow {
        (
            i,
            ts(i),
            kind(i),
            Some(format!("k{i}").into_bytes()),
            Some(vec![("tenant".into(), vec![7]), ("trace".into(), vec![i as u8, 255])]),
        )
    };
    const ALL: [&str; 4] = ["kafka_timestamp", "kafka_timestamp_type", "kafka_key", "kafka_headers"];
    assert_eq!(metadata_rows(&wh, "orders", 5, &ALL).await, vec![full(5)]);
    let older = metadata_rows(&wh, "orders", 0, &ALL[..2]).await;
    assert_eq!(older[..5], (0..5).map(|i| (i, None, None, None, None)).collect::<Vec<_>>()[..], "rows written before have nulls");
    // The dead letters keep the timestamp (key and headers are their raw_key and headers).
    let dead: Vec<_> = metadata_rows(&wh, "orders_dead_letter", 0, &ALL[..2]).await.into_iter().map(|r| (r.0, r.1, r.2)).collect();
    assert_eq!(dead, (6..10).map(|i| (i, ts(i), kind(i))).collect::<Vec<_>>());

    // After the fix, a replay fills the columns from the dead letters as ingest would have.
    std::fs::write(dir.path().join("order.avsc"), ORDER_V2).unwrap();
    let pipeline = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={pipelines}")])).await.unwrap();
    let report = icestream::services::replay::replay(&pipeline, "orders", &Default::default(), false, deadline()).await.unwrap();
    assert_eq!(report.replayed, 4, "{report:?}");
    assert_eq!(metadata_rows(&wh, "orders", 5, &ALL).await, (5..10).map(full).collect::<Vec<_>>());
}

#[tokio::test]
async fn partition_sources_inside_structs_split_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let schema = json!({"type": "object", "properties": {
        "id": {"type": "integer"},
        "event": {"type": "object", "properties": {"ts": {"type": "string", "format": "date-time"}}},
        "customer": {"type": "object", "properties": {"country": {"type": "string"}}}}});
    std::fs::write(dir.path().join("e.schema.json"), schema.to_string()).unwrap();
    let pipelines = dir.path().join("pipelines.toml");
    let text = "[[pipeline]]\ntable = \"events\"\ntopics = [\"events\"]\nformat = \"json\"\nschema = \"e.schema.json\"\npartition_by = [\"day(event.ts)\", \"identity(customer.country)\"]\n";
    std::fs::write(&pipelines, text).unwrap();
    let records: Vec<Value> = (0..4)
        .map(|i| {
            let value = json!({"id": i, "event": {"ts": format!("2026-01-0{}T10:00:00Z", 1 + i % 2)}, "customer": {"country": if i < 2 { "de" } else { "fr" }}});
            json!({"topic": "events", "partition": 0, "offset": i, "timestamp": 1, "timestampType": "CREATE_TIME",
                   "value": base64::engine::general_purpose::STANDARD.encode(value.to_string()), "headers": []})
        })
        .collect();
    let event = json!({"eventSource": "aws:kafka", "records": {"events-0": records}});
    let pipeline = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={}", pipelines.display())])).await.unwrap();
    let s =
        pipeline.handle_json(event.to_string().as_bytes(), std::time::Instant::now() + std::time::Duration::from_secs(60)).await.unwrap();
    assert_eq!((s.written, s.dead_letter, s.files), (4, 0, 4), "{s:?}");
    let catalogs = Catalogs::connect(&config(&wh, &[])).await.unwrap();
    let table = catalogs.catalog().load_table(&catalogs.ident("events")).await.unwrap();
    let report = icestream::services::report::report(&table).await.unwrap();
    assert_eq!(report.partition_spec, ["day(event.ts) as event_ts_day", "identity(customer.country) as customer_country"]);
    assert_eq!(report.partitions, 4);
}

#[tokio::test]
async fn a_pattern_with_a_table_per_topic_makes_each_topics_table_when_first_seen() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    std::fs::write(dir.path().join("order.avsc"), ORDER_V1).unwrap();
    let pipelines = dir.path().join("pipelines.toml");
    let text = "[[pipeline]]\ntable = \"raw_{topic}\"\ntopic_pattern = \"shop\\\\..+\"\nformat = \"avro\"\nschema = \"order.avsc\"\nkafka_columns = [\"key\"]\n";
    std::fs::write(&pipelines, text).unwrap();
    let records = |topic: &str, n: i64| -> Vec<Value> {
        (0..n)
            .map(|i| {
                json!({"topic": topic, "partition": 0, "offset": i, "timestamp": 1, "timestampType": "CREATE_TIME", "key": "aw==",
                            "value": base64::engine::general_purpose::STANDARD.encode(avro_order(i, "n", None)), "headers": []})
            })
            .collect()
    };
    let event = json!({"eventSource": "aws:kafka", "records": {"shop.Orders-0": records("shop.Orders", 3), "shop.refunds-0": records("shop.refunds", 2)}});
    let pipeline = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={}", pipelines.display())])).await.unwrap();
    let deadline = || std::time::Instant::now() + std::time::Duration::from_secs(60);
    let s = pipeline.handle_json(event.to_string().as_bytes(), deadline()).await.unwrap();
    assert_eq!((s.written, s.tables), (5, 2), "{s:?}");
    let tables: Vec<_> = s.table_metrics.iter().map(|m| (m.table.as_str(), m.written)).collect();
    assert_eq!(tables, [("raw_shop_orders", 3), ("raw_shop_refunds", 2)]);
    assert_eq!(offsets_of(&scan(&wh, "raw_shop_orders").await), [0, 1, 2]);
    assert_eq!(watermarks(&wh, "raw_shop_refunds").await.into_iter().collect::<Vec<_>>(), [("shop.refunds-0".to_string(), 1)]);
    // A replay adds nothing; a new process finds the tables again.
    let again = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={}", pipelines.display())])).await.unwrap();
    let s = again.handle_json(event.to_string().as_bytes(), deadline()).await.unwrap();
    assert_eq!((s.written, s.skipped_replay), (0, 5), "{s:?}");
    // A topic first seen now whose table another topic writes fails the invocation, naming it.
    let clash = json!({"eventSource": "aws:kafka", "records": {"shop.orders-0": records("shop.orders", 1)}});
    let e = again.handle_json(clash.to_string().as_bytes(), deadline()).await.unwrap_err().to_string();
    assert!(e.contains("topic \"shop.orders\" maps to table `raw_shop_orders`") && e.contains("\"shop.Orders\" already writes"), "{e}");
    let fresh = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={}", pipelines.display())])).await.unwrap();
    let e = fresh.handle_json(clash.to_string().as_bytes(), deadline()).await.unwrap_err().to_string();
    assert!(
        e.contains("topic \"shop.orders\" maps to table `raw_shop_orders`, which topic \"shop.Orders\" already writes"),
        "a new process: {e}"
    );
    // A dead-letter replay in a process that has not seen the topic finds its pipeline.
    let replayer = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={}", pipelines.display())])).await.unwrap();
    let report = icestream::services::replay::replay(&replayer, "raw_shop_refunds", &Default::default(), false, deadline()).await.unwrap();
    assert_eq!((report.matched, report.replayed), (0, 0), "{report:?}");
    let unclaimed = json!({"eventSource": "aws:kafka", "records": {"other-0": records("other", 1)}});
    assert!(
        again.handle_json(unclaimed.to_string().as_bytes(), deadline()).await.unwrap_err().to_string().contains("claimed by no pipeline")
    );
}

#[tokio::test]
async fn maintenance_status_and_the_committer_cover_the_tables_a_pattern_made() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    std::fs::write(dir.path().join("order.avsc"), ORDER_V1).unwrap();
    let pipelines = dir.path().join("pipelines.toml");
    std::fs::write(
        &pipelines,
        "[[pipeline]]\ntable = \"raw_{topic}\"\ntopic_pattern = \"shop\\\\..+\"\nformat = \"avro\"\nschema = \"order.avsc\"\n",
    )
    .unwrap();
    let value = base64::engine::general_purpose::STANDARD.encode(avro_order(1, "n", None));
    let record = |topic: &str| json!([{"topic": topic, "partition": 0, "offset": 0, "timestamp": 1, "value": value, "headers": []}]);
    let event = json!({"eventSource": "aws:kafka", "records": {"shop.a-0": record("shop.a"), "shop.b-0": record("shop.b")}});
    let with_file = format!("pipelines={}", pipelines.display());
    let pipeline = icestream::IngestPipeline::new(config(&wh, &[&with_file])).await.unwrap();
    pipeline.handle_json(event.to_string().as_bytes(), std::time::Instant::now() + std::time::Duration::from_secs(60)).await.unwrap();

    let mut cfg = config(&wh, &[&with_file]);
    let mut tables = icestream::services::maintenance::pipeline_tables(&mut cfg).await.unwrap().unwrap();
    tables.sort();
    assert_eq!(tables, ["raw_shop_a", "raw_shop_a_dead_letter", "raw_shop_b", "raw_shop_b_dead_letter"]);
    let status = summary_of(&icestream(&["status", "output=json", &format!("warehouse={}", wh.display()), &with_file], &[]));
    let names: Vec<_> = status.as_array().unwrap().iter().map(|s| s["table"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["raw_shop_a", "raw_shop_b"]);
    let queued = config(&wh, &[&with_file]);
    let known = icestream::services::queued::validate::configured_tables(&queued).await.unwrap();
    assert!(known.contains("bigdata.raw_{topic}"), "{known:?}");
}

/// A partition's last records are dead letters (the producer moved to a new schema): their batch
/// commits nothing to the data table in direct mode, so only the dead-letter table's watermark
/// covers them. After the fix a replay takes them (found by the simulation, seed 27).
#[tokio::test]
async fn dead_letters_at_a_partitions_tail_are_replayed() {
    use icestream::model::event::{KafkaRecordIn, ParsedEvent, TopicPartition};
    let deadline = || std::time::Instant::now() + std::time::Duration::from_secs(60);
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let pipelines = pipeline_file(dir.path());
    let record = |offset: i64, extra: Option<i64>| KafkaRecordIn {
        offset,
        timestamp_ms: 1_764_000_000_000,
        timestamp_type: None,
        key: None,
        value: Some(avro_order(offset, "n", extra).into()),
        value_error: None,
        headers: Default::default(),
        value_schema: None,
    };
    let event = |records| ParsedEvent {
        event_source: Some("aws:kafka".into()),
        partitions: [(TopicPartition { topic: "orders".into(), partition: 0 }, records)].into(),
    };
    let pipeline = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={pipelines}")])).await.unwrap();
    let s = pipeline.handle(event(vec![record(0, None), record(1, None)]), deadline()).await.unwrap();
    assert_eq!((s.written, s.dead_letter), (2, 0), "{s:?}");
    // Every record from offset 2 on is V2: a batch of dead letters only.
    let s = pipeline.handle(event(vec![record(2, Some(2)), record(3, Some(3))]), deadline()).await.unwrap();
    assert_eq!((s.written, s.dead_letter), (0, 2), "{s:?}");
    drop(pipeline);
    std::fs::write(dir.path().join("order.avsc"), ORDER_V2).unwrap();
    let pipeline = icestream::IngestPipeline::new(config(&wh, &[&format!("pipelines={pipelines}")])).await.unwrap();
    let report = icestream::services::replay::replay(&pipeline, "orders", &Default::default(), false, deadline()).await.unwrap();
    assert_eq!((report.replayed, report.not_committed_yet), (2, 0), "{report:?}");
    let batches = scan(&wh, "orders").await;
    let mut offsets = offsets_of(&batches);
    offsets.sort_unstable();
    assert_eq!(offsets, vec![0, 1, 2, 3]);
    // Replayed once: a second replay and the batch redelivered add nothing.
    let again = icestream::services::replay::replay(&pipeline, "orders", &Default::default(), false, deadline()).await.unwrap();
    assert_eq!((again.replayed, again.already_replayed), (0, 2), "{again:?}");
    let s = pipeline.handle(event(vec![record(2, Some(2)), record(3, Some(3))]), deadline()).await.unwrap();
    assert_eq!((s.written, s.dead_letter), (0, 0), "{s:?}");
    assert_eq!(offsets_of(&scan(&wh, "orders").await).len(), 4);
}
