//! End to end on the embedded default catalog: sample and generated events through the
//! `icestream` binary, read back with iceberg-rust. (PyIceberg and DuckDB read the same tables
//! in tests/python.)

use icestream::dev::generate::{GeneratorOptions, generate};
use icestream_integration::*;

fn workspace_file(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

#[tokio::test]
async fn sample_events_of_every_format_land_with_their_dead_letters() {
    for (format, file, valid, corrupt) in [
        ("proto", "events/msk-proto.json", 40, 0),
        ("avro", "events/msk-avro.json", 40, 0),
        ("json", "events/msk-json.json", 40, 0),
        ("json", "events/msk-json-corrupt.json", 37, 3),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().join("wh");
        let event = workspace_file(file);
        let s = summary_of(&icestream(
            &["ingest", event.to_str().unwrap(), &format!("warehouse={}", wh.display()), &format!("source={format}")],
            &[],
        ));
        assert_eq!(s["records"], valid + corrupt, "{file}: {s}");
        assert_eq!(s["written"], valid, "{file}: {s}");
        assert_eq!(s["dead_letter"], corrupt, "{file}: {s}");
        assert_eq!(telemetry_rows(&wh).await.len(), valid as usize, "{file}");
        assert_eq!(dead_letter_offsets(&wh).await.len(), corrupt as usize, "{file}");
    }
}

#[tokio::test]
async fn generated_event_counts_sums_partitioning_and_dead_letters_match_what_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let opts = GeneratorOptions::from_args(["records=30000", "format=json", "corrupt=true", "partitions=3", "seed=7"]).unwrap();
    let g = generate(&opts).unwrap();
    let event = write_event(dir.path(), "e.json", &g.event);
    let s = summary_of(&icestream(
        &["ingest", event.to_str().unwrap(), &format!("warehouse={}", wh.display()), "source=json", "dedup=none"],
        &[],
    ));
    let e = &g.expectation;
    assert!(e.corrupt > 0 && e.resends > 0 && e.late > 0, "{e:?}");
    assert_eq!(s["written"], e.valid as u64, "{s}");
    assert_eq!(s["dead_letter"], e.corrupt as u64, "{s}");

    let rows = telemetry_rows(&wh).await;
    assert_eq!(rows.len(), e.valid);
    assert_eq!(rows.iter().map(|(_, r)| i64::from(r.speed_kmh)).sum::<i64>(), e.speed_sum);

    // Every dead letter is a record whose raw value really is malformed JSON.
    let dl = scan(&wh, "vehicle_telemetry_dead_letter").await;
    let mut dl_rows = 0;
    for b in &dl {
        use arrow_array::cast::AsArray;
        let raw = b.column_by_name("raw_value").unwrap().as_binary::<i64>();
        let err = b.column_by_name("error").unwrap().as_string::<i32>();
        for i in 0..b.num_rows() {
            assert!(serde_json::from_slice::<serde_json::Value>(raw.value(i)).is_err());
            assert!(err.value(i).starts_with("json:"), "{}", err.value(i));
            dl_rows += 1;
        }
    }
    assert_eq!(dl_rows, e.corrupt);

    let cfg = config(&wh, &[]);
    let catalogs = icestream::engine::catalog::Catalogs::connect(&cfg).await.unwrap();
    let table = catalogs.catalog().load_table(&catalogs.ident("vehicle_telemetry")).await.unwrap();
    let report = icestream::services::report::report(&table).await.unwrap();
    assert_eq!(report.partition_spec, ["hour(event_time) as event_time_hour", "bucket[16](vehicle_id) as vehicle_id_bucket"]);
    assert_eq!(report.snapshots, 1, "one commit per table per invocation");
    assert_eq!(report.records, e.valid as u64);
    // Three hours of readings (two plus the late ones) over 16 buckets.
    assert!(report.partitions > 16, "{report:?}");
    assert_eq!(report.watermarks.len(), 3);
}

#[tokio::test]
async fn dedup_batch_keeps_one_copy_per_identity() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let opts = GeneratorOptions::from_args(["records=20000", "format=avro", "seed=3"]).unwrap();
    let g = generate(&opts).unwrap();
    let event = write_event(dir.path(), "e.json", &g.event);
    let s = summary_of(&icestream(
        &["ingest", event.to_str().unwrap(), &format!("warehouse={}", wh.display()), "source=avro", "dedup=batch"],
        &[],
    ));
    assert!(g.expectation.resends > 0);
    assert_eq!(s["written"], g.expectation.unique_valid as u64, "{s}");
    assert_eq!(s["duplicates"], g.expectation.resends as u64, "{s}");
    let rows = telemetry_rows(&wh).await;
    let ids: std::collections::HashSet<_> = rows.iter().map(|(_, r)| (r.vehicle_id, r.event_time_us)).collect();
    assert_eq!(ids.len(), rows.len());
}

#[tokio::test]
async fn files_are_zstd_parquet_and_roll_at_the_target_size() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let opts = GeneratorOptions::from_args(["records=40000", "partitions=1", "vehicles=1", "seed=5"]).unwrap();
    let g = generate(&opts).unwrap();
    let event = write_event(dir.path(), "e.json", &g.event);
    // One vehicle and < 1 h of readings: one partition, so the file count is the rolling.
    let s = summary_of(&icestream(
        &["ingest", event.to_str().unwrap(), &format!("warehouse={}", wh.display()), "target_file_size_bytes=65536"],
        &[],
    ));
    let files = s["files"].as_u64().unwrap();
    assert!(files >= 3, "expected rolling into several files: {s}");
    let parquet: Vec<_> = walk(&wh).into_iter().filter(|p| p.extension().is_some_and(|e| e == "parquet")).collect();
    assert_eq!(parquet.len() as u64, files);
    for p in parquet {
        // Compressed but for the columns of one value in the file (one vehicle and its model,
        // one topic and partition): a dictionary page and runs of zeros, left uncompressed.
        use icestream::model::tables::{lineage, telemetry};
        let codecs = column_codecs(&p);
        for (column, codec) in &codecs {
            let uniform = [telemetry::VEHICLE_ID, telemetry::MODEL, lineage::TOPIC, lineage::PARTITION].contains(&column.as_str());
            assert_eq!(codec.starts_with("ZSTD"), !uniform, "{}: {codecs:?}", p.display());
            assert_eq!(codec == "UNCOMPRESSED", uniform, "{}: {codecs:?}", p.display());
        }
        assert_eq!(codecs.len(), 10, "{codecs:?}");
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
    }
    out
}

/// Each column's codec in a Parquet file's first row group.
fn column_codecs(path: &std::path::Path) -> Vec<(String, String)> {
    use parquet::file::reader::FileReader;
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::file::reader::SerializedFileReader::new(file).unwrap();
    reader.metadata().row_group(0).columns().iter().map(|c| (c.column_path().string(), format!("{:?}", c.compression()))).collect()
}

#[tokio::test]
async fn malformed_event_and_bad_config_fail_with_clear_messages() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"eventSource\":\"aws:kafka\"}").unwrap();
    let out = icestream(&["ingest", bad.to_str().unwrap(), &format!("warehouse={}", dir.path().display())], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("records"));
    let out = icestream(&["ingest", bad.to_str().unwrap(), "source=xml"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("`source`") && err.contains("proto|avro|json"), "{err}");
    let out = icestream(&["ingest", bad.to_str().unwrap()], &[("ICESTREAM_DEDUP", "sometimes")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("ICESTREAM_DEDUP") && err.contains("none|batch|window"), "{err}");
}

#[tokio::test]
async fn one_invocation_loads_each_table_once() {
    for dedup in ["none", "window"] {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().join("wh");
        let p = icestream::IngestPipeline::new(config(&wh, &["source=json", &format!("dedup={dedup}")])).await.unwrap();
        let g = generate(&GeneratorOptions::from_args(["records=300", "format=json", "corrupt=true", "seed=11"]).unwrap()).unwrap();
        let before = p.catalogs().calls();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let s = p.handle_json(g.event.to_string().as_bytes(), deadline).await.unwrap();
        assert!(s.written > 0 && s.dead_letter > 0, "{s:?}");
        let used = p.catalogs().calls() - before;
        // Telemetry and dead letters: one load and one swap each (was 6 loads, 7 with dedup=window).
        assert_eq!((used.loads, used.swaps, used.other), (2, 2, 0), "dedup={dedup}: {used:?}");
    }
}

/// Round trips of one direct-mode invocation into one table (no dead letters): each table
/// loaded once (the lookup and its metadata file: two sequential), the data files written side
/// by side, then the manifest, the manifest list and the metadata file, and the pointer swap.
/// The summary (and so the EMF line) carries the same counts. Every call is made 20 ms slower,
/// as over a network: local files answer too fast for calls issued together to overlap.
#[tokio::test]
async fn one_invocation_counts_its_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let p = icestream::IngestPipeline::new(config(&wh, &["source=proto"])).await.unwrap();
    p.catalogs().call_counter().simulate_latency(std::time::Duration::from_millis(20));
    let g = generate(&GeneratorOptions::from_args(["records=2000", "seed=3"]).unwrap()).unwrap();
    let before = p.catalogs().calls();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let s = p.handle_json(g.event.to_string().as_bytes(), deadline).await.unwrap();
    let used = p.catalogs().calls() - before;
    assert_eq!(s.round_trips, used);
    assert!(s.files > 1 && s.dead_letter == 0, "{s:?}");
    assert_eq!((used.loads, used.swaps, used.other, used.queue_sends), (2, 1, 0, 0), "{used:?}");
    // Data files, manifest, manifest list, metadata file.
    assert_eq!(used.storage_writes, s.files as u64 + 3, "{used:?}");
    // Loads (2, side by side), data files (1, side by side), manifest, manifest list with the
    // metadata file, swap: 6, the target for one table. Written one after another it was 26.
    assert_eq!(used.sequential, 6, "{used:?}");
    let line: serde_json::Value = serde_json::from_str(&icestream::services::metrics::emf_lines(&s)[0]).unwrap();
    assert_eq!(line["SequentialRoundTrips"].as_f64(), Some(used.sequential as f64));
    assert_eq!(line["StorageWrites"].as_f64(), Some(used.storage_writes as f64));
    assert_eq!(line["Files"].as_f64(), Some(s.files as f64));
    assert!(line["FilesPerGB"].as_f64().unwrap() > 0.0);

    // The next invocation carries the snapshot's manifests: the current manifest list is read
    // beside the new manifest's upload, not before it (7 when it was).
    let g = generate(&GeneratorOptions::from_args(["records=2000", "seed=4", "start_offset=2000"]).unwrap()).unwrap();
    let before = p.catalogs().calls();
    let s = p.handle_json(g.event.to_string().as_bytes(), deadline).await.unwrap();
    let used = p.catalogs().calls() - before;
    assert!(s.written == 2000 && s.dead_letter == 0, "{s:?}");
    assert_eq!((used.loads, used.swaps, used.storage_reads), (2, 1, 3), "{used:?}");
    assert_eq!(used.sequential, 6, "{used:?}");
}

#[tokio::test]
async fn a_self_managed_kafka_event_lands_as_an_msk_one_does() {
    // A self-managed cluster's mapping (Confluent Cloud, Redpanda, Kafka on EC2) sends
    // `"eventSource": "SelfManagedKafka"`, its bootstrap servers and no cluster ARN.
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let opts = GeneratorOptions::from_args(["records=500", "format=json", "partitions=2", "seed=9"]).unwrap();
    let g = generate(&opts).unwrap();
    let mut event = g.event.clone();
    let object = event.as_object_mut().unwrap();
    object.remove("eventSourceArn");
    object.insert("eventSource".into(), "SelfManagedKafka".into());
    object.insert("bootstrapServers".into(), "pkc-1.eu-west-1.aws.confluent.cloud:9092".into());
    let file = write_event(dir.path(), "self-managed.json", &event);
    let s = summary_of(&icestream(&["ingest", file.to_str().unwrap(), &format!("warehouse={}", wh.display()), "source=json"], &[]));
    assert_eq!((s["written"].as_u64(), s["records"].as_u64()), (Some(g.expectation.valid as u64), Some(500)), "{s}");
    let rows = telemetry_rows(&wh).await;
    assert_eq!(rows.len(), g.expectation.valid);
    assert_eq!(watermarks(&wh, "vehicle_telemetry").await.len(), 2, "lineage and watermarks per topic-partition");
}
