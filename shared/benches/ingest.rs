//! `make bench`: the whole ingest path from event bytes — MSK event JSON → parse (base64,
//! headers) → generic decoder (`RecordDecoder`, what ingest runs) → lineage → partition split →
//! Parquet (zstd) → commit on the embedded catalog — per format and size, on one core, next to
//! the bare arrow-rs Parquet write of the same rows measured in the same run (the floor); the
//! catalog and storage round trips of each invocation; and the peak RSS of `icestream ingest`
//! on a maximal (6 MB) MSK event. Figures are printed, never asserted.

use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use icestream::codec::{self, TelemetryBuilder};
use icestream::config::Source;
use icestream::event::parse_event;
use icestream::generate::{GeneratorOptions, generate};
use icestream::{Config, IngestPipeline, tables};
use parquet::arrow::ArrowWriter;

/// The rows of the event's values, decoded by the hand-written reference codec (for the floor).
fn rows(source: Source, values: &[&[u8]], schema: arrow_schema::SchemaRef) -> RecordBatch {
    let mut b = TelemetryBuilder::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        codec::decode_into(source, v, &mut b).expect("bench values decode");
        b.append_lineage("vehicle-telemetry", 0, i as i64);
    }
    b.finish(schema).expect("batch")
}

/// The floor: one bare arrow-rs `ArrowWriter` (zstd) of the rows into one file.
fn floor_write(batch: &RecordBatch, dir: &std::path::Path) -> Duration {
    let t0 = Instant::now();
    let file = std::fs::File::create(dir.join("floor.parquet")).unwrap();
    let props = icestream::writer::writer_properties("zstd", &[batch]).unwrap();
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    t0.elapsed()
}

fn main() {
    // First, while this process is small: Linux carries a parent's peak RSS into a forked
    // child's ru_maxrss, so measuring after the 1M-row runs would report ours, not the child's.
    peak_rss();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|_| vec![10_000, 1_000_000]);
    println!("whole ingest path from event bytes (parse, decode, split, Parquet zstd, commit), one core;");
    println!("floor = bare arrow-rs ArrowWriter (zstd) of the same rows; ratio = whole time / floor time");
    println!(
        "{:<6} {:>9} {:>9} {:>12} {:>8} {:>12} {:>7} {:>6} {:>6} {:>12}",
        "format", "records", "event MB", "whole r/s", "parse %", "floor r/s", "ratio", "files", "loads", "swaps"
    );
    // `BENCH_FORMATS=proto` (comma-separated) runs only those formats, e.g. under a profiler.
    let formats = std::env::var("BENCH_FORMATS").unwrap_or_else(|_| "proto,avro,json".into());
    for source in [Source::Proto, Source::Avro, Source::Json] {
        let name = format!("{source:?}").to_lowercase();
        if !formats.split(',').any(|f| f == name) {
            continue;
        }
        for &n in &sizes {
            let dir = tempfile::tempdir().unwrap();
            let wh = dir.path().join("wh");
            let g = generate(&GeneratorOptions::from_args([format!("records={n}"), format!("format={name}")]).unwrap()).unwrap();
            let event = g.event.to_string().into_bytes();
            drop(g);
            let (whole, parse, summary, calls) = rt.block_on(async {
                let config = Config::from_args([format!("warehouse={}", wh.display()), format!("source={name}")]).unwrap();
                let pipeline = IngestPipeline::new(config).await.unwrap();
                let before = pipeline.catalogs().calls();
                let deadline = Instant::now() + Duration::from_secs(3600);
                let t0 = Instant::now();
                let parsed = parse_event(&event).unwrap();
                let parse = t0.elapsed();
                let summary = pipeline.handle(parsed, deadline).await.unwrap();
                (t0.elapsed(), parse, summary, pipeline.catalogs().calls() - before)
            });
            let parsed = parse_event(&event).unwrap();
            // The generator's values all decode (no `corrupt=true`).
            let values: Vec<&[u8]> = parsed.partitions.values().flatten().filter_map(|r| r.value.as_deref()).collect();
            let cfg = Config::from_args([format!("warehouse={}", wh.display())]).unwrap();
            let def = tables::vehicle_telemetry("bench", "zstd", cfg.target_file_size_bytes).unwrap();
            let batch = rows(source, &values, def.arrow_schema().unwrap());
            let floor = floor_write(&batch, dir.path());
            let rate = |d: Duration, rows: usize| rows as f64 / d.as_secs_f64();
            println!(
                "{:<6} {:>9} {:>9.1} {:>12.0} {:>8.1} {:>12.0} {:>7.2} {:>6} {:>6} {:>6}",
                name,
                n,
                event.len() as f64 / 1e6,
                rate(whole, n),
                100.0 * parse.as_secs_f64() / whole.as_secs_f64(),
                rate(floor, batch.num_rows()),
                (whole.as_secs_f64() / n as f64) / (floor.as_secs_f64() / batch.num_rows() as f64),
                summary.files,
                calls.loads,
                calls.swaps,
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
