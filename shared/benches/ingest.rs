//! `make bench`: decode -> partitioned Parquet throughput per format and size through the
//! generic pipeline decoders (`RecordDecoder`, what ingest runs) and through the hand-written
//! reference codec they replaced, next to the bare arrow-rs Parquet write of the same rows (the
//! floor), on one core; and the peak RSS of `icestream ingest` on a maximal (6 MB) MSK event.
//! Figures are printed, never asserted.

use std::time::Instant;

use arrow_array::RecordBatch;
use icestream::codec::{self, Reading, TelemetryBuilder};
use icestream::config::Source;
use icestream::decode::RecordDecoder;
use icestream::pipeline::PipelineSet;
use icestream::{Config, catalog::Catalogs, tables};
use parquet::arrow::ArrowWriter;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn values(source: Source, n: usize) -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(1);
    let start_ms = 1_767_225_600_000i64;
    (0..n)
        .map(|i| {
            let vehicle = rng.random_range(0..10_000);
            codec::encode(
                source,
                &Reading {
                    vehicle_id: vehicle,
                    event_time_us: (start_ms + i as i64 * 3) * 1000,
                    model: "Model-E".into(),
                    speed_kmh: rng.random_range(0..180),
                    soc_pct: rng.random_range(0..=100),
                    odometer_km: 10_000 + vehicle,
                    charging: rng.random_bool(0.1),
                },
            )
        })
        .collect()
}

/// The generic path: the pipeline's `RecordDecoder` for the shipped schema of `source`, then
/// lineage columns, as `ingest` assembles them.
fn decode_generic(source: Source, values: &[Vec<u8>], schema: arrow_schema::SchemaRef) -> RecordBatch {
    use std::sync::Arc;
    let config = Config::from_args([format!("source={}", format!("{source:?}").to_lowercase()), "warehouse=/tmp/unused".into()]).unwrap();
    let set = PipelineSet::telemetry(&config).unwrap();
    let data_fields: Vec<_> = schema.fields().iter().filter(|f| !f.name().starts_with("kafka_")).cloned().collect();
    let mut decoder = RecordDecoder::new(&set.pipelines[0].source, Arc::new(arrow_schema::Schema::new(data_fields))).unwrap();
    for v in values {
        decoder.append(v).expect("bench values decode");
    }
    let mut columns = decoder.finish().unwrap();
    let n = values.len();
    columns.push(Arc::new(arrow_array::StringArray::from_iter_values(std::iter::repeat_n("vehicle-telemetry", n))));
    columns.push(Arc::new(arrow_array::Int32Array::from(vec![0; n])));
    columns.push(Arc::new(arrow_array::Int64Array::from_iter_values(0..n as i64)));
    RecordBatch::try_new(schema, columns).expect("batch")
}

/// The hand-written reference codec the generic decoders replaced.
fn decode(source: Source, values: &[Vec<u8>], schema: arrow_schema::SchemaRef) -> RecordBatch {
    let mut b = TelemetryBuilder::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        codec::decode_into(source, v, &mut b).expect("bench values decode");
        b.append_lineage("vehicle-telemetry", 0, i as i64);
    }
    b.finish(schema).expect("batch")
}

fn floor_write(batch: &RecordBatch, dir: &std::path::Path) -> u64 {
    let path = dir.join("floor.parquet");
    let file = std::fs::File::create(&path).unwrap();
    let props = icestream::writer::writer_properties("zstd").unwrap();
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    std::fs::metadata(path).unwrap().len()
}

fn main() {
    // First, while this process is small: Linux carries a parent's peak RSS into a forked
    // child's ru_maxrss, so measuring after the 1M-row runs would report ours, not the child's.
    peak_rss();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|_| vec![10_000, 100_000, 1_000_000]);
    println!("decode -> partitioned Parquet (zstd), one core; floor = bare arrow-rs ArrowWriter of the same rows");
    println!("{:<6} {:>9} {:>14} {:>14} {:>14} {:>8} {:>7}", "format", "records", "generic r/s", "hand-made r/s", "floor r/s", "ratio", "files");
    for source in [Source::Proto, Source::Avro, Source::Json] {
        for &n in &sizes {
            let dir = tempfile::tempdir().unwrap();
            let cfg = Config::from_args([format!("warehouse={}", dir.path().join("wh").display())]).unwrap();
            let def = tables::vehicle_telemetry("bench", "zstd", cfg.target_file_size_bytes).unwrap();
            let schema = def.arrow_schema().unwrap();
            let vals = values(source, n);
            let (files, ours, hand_made) = rt.block_on(async {
                let catalogs = Catalogs::connect(&cfg).await.unwrap();
                let table = catalogs.ensure_table(&def).await.unwrap();
                let t0 = Instant::now();
                let batch = decode_generic(source, &vals, schema.clone());
                let files = icestream::writer::write_data_files(&table, &[batch], "zstd", cfg.target_file_size_bytes).await.unwrap();
                let ours = t0.elapsed();
                let t0 = Instant::now();
                let batch = decode(source, &vals, schema.clone());
                icestream::writer::write_data_files(&table, &[batch], "zstd", cfg.target_file_size_bytes).await.unwrap();
                (files.len(), ours, t0.elapsed())
            });
            let batch = decode(source, &vals, schema);
            let t0 = Instant::now();
            floor_write(&batch, dir.path());
            let floor = t0.elapsed();
            let rate = |d: std::time::Duration| n as f64 / d.as_secs_f64();
            println!(
                "{:<6} {:>9} {:>14.0} {:>14.0} {:>14.0} {:>8.2} {:>7}",
                format!("{source:?}").to_lowercase(),
                n,
                rate(ours),
                rate(hand_made),
                rate(floor),
                ours.as_secs_f64() / floor.as_secs_f64(),
                files
            );
        }
    }
}

/// Peak RSS of the release `icestream ingest` on a maximal 6 MB event.
fn peak_rss() {
    let bin = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().join("icestream");
    if !bin.exists() {
        println!("peak RSS: build the release CLI first (cargo build --release --bin icestream)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let event = dir.path().join("max.json");
    let gen_ = std::process::Command::new(&bin)
        .args(["gen-event", "max_bytes=6000000", &format!("out={}", event.display())])
        .output()
        .unwrap();
    assert!(gen_.status.success(), "{}", String::from_utf8_lossy(&gen_.stderr));
    let bytes = std::fs::metadata(&event).unwrap().len();
    let child = std::process::Command::new(&bin)
        .args(["ingest", event.to_str().unwrap(), &format!("warehouse={}", dir.path().join("wh").display())])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut status = 0;
    // SAFETY: wait4 reaps exactly this child and fills the structs we own with its own usage
    // (not the generator's, which getrusage(RUSAGE_CHILDREN) would fold in).
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert!(pid > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "ingest failed");
    println!(
        "peak RSS of `icestream ingest` on a {:.1} MB MSK event: {:.1} MB (target: under 128 MB)",
        bytes as f64 / 1e6,
        usage.ru_maxrss as f64 / 1024.0
    );
}
