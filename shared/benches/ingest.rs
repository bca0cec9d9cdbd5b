//! `make bench`: the whole ingest path from event bytes — MSK event JSON → parse (base64,
//! headers) → generic decoder (`RecordDecoder`, what ingest runs) → lineage → partition split →
//! Parquet (zstd) → commit on the embedded catalog — per format and size, on one core, as a warm
//! function meets its events (the median of several), next to the bare arrow-rs Parquet write of
//! the same rows, in one file and in as many files as the ingest wrote (the floors), each written
//! right after its event's ingest and compared with it alone; the least ratio any reader of the
//! event text could reach (the event floor); the catalog and storage round trips of each
//! invocation; and the peak RSS of `icestream ingest` on a maximal (6 MB) MSK event. Figures are
//! printed, never asserted.

use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use icestream::dev::codec::{self, TelemetryBuilder};
use icestream::dev::generate::{GeneratorOptions, generate};
use icestream::model::config::Source;
use icestream::model::event::parse_event;
use icestream::model::tables;
use icestream::{Config, IngestPipeline};
use parquet::arrow::ArrowWriter;

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// The rows of the event's values, decoded by the hand-written reference codec (for the floor).
fn rows(source: Source, values: &[&[u8]], schema: arrow_schema::SchemaRef) -> BenchResult<RecordBatch> {
    let mut b = TelemetryBuilder::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        codec::decode_into(source, v, &mut b)?;
        b.append_lineage("vehicle-telemetry", 0, i as i64);
    }
    Ok(b.finish(schema)?)
}

/// The floor: the rows as `files` bare arrow-rs `ArrowWriter` (zstd) files of contiguous slices.
/// One file is the plain floor; as many files as the ingest wrote is the floor of a partitioned
/// write, which pays every file's fixed cost (column writers, codec contexts, footer) as the
/// ingest does.
fn floor_write_files(batch: &RecordBatch, files: usize, dir: &std::path::Path) -> BenchResult<Duration> {
    let files = files.clamp(1, batch.num_rows().max(1));
    let props = icestream::engine::writer::writer_properties("zstd", &[batch])?;
    let t0 = Instant::now();
    for i in 0..files {
        let (start, end) = (batch.num_rows() * i / files, batch.num_rows() * (i + 1) / files);
        let file = std::fs::File::create(dir.join(format!("floor-{i}.parquet")))?;
        let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props.clone()))?;
        w.write(&batch.slice(start, end - start))?;
        w.close()?;
    }
    Ok(t0.elapsed())
}

/// The event floor: the least any reader of the event does, finding each record's value and
/// decoding its base64 into one buffer (no records, keys, headers, offsets or topics kept). With the
/// files floor it bounds the ratio from below: no ingest of the event comes nearer the files floor
/// than (event floor + files floor) / files floor, whatever its parser, before it decodes a value.
fn event_floor(event: &[u8], records: usize) -> BenchResult<Duration> {
    let t0 = Instant::now();
    let value = memchr::memmem::Finder::new(b"\"value\":\"");
    let mut out = Vec::with_capacity(event.len() / 4 * 3);
    let (mut at, mut values) = (0, 0);
    while let Some(found) = value.find(&event[at..]) {
        let start = at + found + value.needle().len();
        let Some(len) = memchr::memchr(b'"', &event[start..]) else { break };
        base64_simd::STANDARD.decode_append(&event[start..start + len], &mut out).map_err(|e| e.to_string())?;
        (at, values) = (start + len + 1, values + 1);
    }
    let elapsed = t0.elapsed();
    std::hint::black_box(&out);
    if values != records {
        return Err(format!("the event floor found {values} of the event's {records} values").into());
    }
    Ok(elapsed)
}

/// CPU time of this process so far, over all its threads: (user, system).
fn cpu_time() -> (Duration, Duration) {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    (tv(usage.ru_utime), tv(usage.ru_stime))
}

/// Events of each size up to this many records run this many times in one process, each a new
/// event (later offsets, another seed), as a warm function meets them; the figures are the
/// median of the warm ones. A larger event runs once.
const WARM_EVENTS: usize = 9;
const WARM_EVENTS_UP_TO: usize = 100_000;

/// The middle value of `values` (not empty), in the order `cmp` gives.
fn median_by<T: Copy>(mut values: Vec<T>, cmp: impl FnMut(&T, &T) -> std::cmp::Ordering) -> T {
    values.sort_by(cmp);
    values[values.len() / 2]
}

/// The warm events' figures: the cold first event is left out where there are warm ones.
fn warm_only<T>(mut values: Vec<T>) -> Vec<T> {
    if values.len() > 1 { values.split_off(1) } else { values }
}

/// What `make bench` prints of one format and size.
struct Figures {
    whole: Duration,
    cpu: Duration,
    /// The kernel's share of the CPU time of all the warm events together.
    sys_share: f64,
    parse: Duration,
    floor: Duration,
    files_floor: Duration,
    event_floor: Duration,
    /// Each warm event's whole time over its own floors' (one file, as many files), medians.
    ratio: f64,
    files_ratio: f64,
    /// The least ratio to the files floor any reader of the event could reach, median.
    least_ratio: f64,
    event_bytes: usize,
    files: usize,
    calls: icestream::engine::catalog_calls::CatalogCalls,
}

fn main() -> BenchResult<()> {
    // First, while this process is small: Linux carries a parent's peak RSS into a forked
    // child's ru_maxrss, so measuring after the 1M-row runs would report ours, not the child's.
    peak_rss()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|_| vec![10_000, 1_000_000]);
    println!("whole ingest path from event bytes (parse, decode, split, Parquet zstd, commit), one core;");
    println!("events up to {WARM_EVENTS_UP_TO} records: median of {} warm events in one process (the first is cold);", WARM_EVENTS - 1);
    println!("cpu r/s = records / CPU time (user + system, all threads): the wall time less I/O waits;");
    println!("sys % = the kernel's share of that CPU time (page faults of new memory, file system calls),");
    println!("over all the warm events: the kernel splits CPU time by clock ticks, too coarse for one event;");
    println!("floor = bare arrow-rs ArrowWriter (zstd) of the same rows in one file, files floor = in as many");
    println!("files as the ingest wrote (contiguous slices), each written right after its event's ingest, medians");
    println!("alike; ratio = the median over the warm events of each one's whole time / its own floor time;");
    println!("event floor = finding each record's value in the event text and decoding its base64, nothing");
    println!("else; least = the median of (event floor + files floor) / files floor: no ingest of the event");
    println!("can bring the files ratio below it, before it decodes a value; files = the median event's data");
    println!("files, loads and swaps = the last event's catalog calls");
    println!(
        "{:<6} {:>9} {:>9} {:>11} {:>11} {:>6} {:>7} {:>11} {:>6} {:>11} {:>6} {:>11} {:>6} {:>6} {:>6} {:>6}",
        "format",
        "records",
        "event MB",
        "whole r/s",
        "cpu r/s",
        "sys %",
        "parse %",
        "floor r/s",
        "ratio",
        "files r/s",
        "ratio",
        "event r/s",
        "least",
        "files",
        "loads",
        "swaps"
    );
    // `BENCH_FORMATS=proto` (comma-separated) runs only those formats, e.g. under a profiler.
    let formats = std::env::var("BENCH_FORMATS").unwrap_or_else(|_| "proto,avro,json".into());
    for source in [Source::Proto, Source::Avro, Source::Json] {
        let name = format!("{source:?}").to_lowercase();
        if !formats.split(',').any(|f| f == name) {
            continue;
        }
        for &n in &sizes {
            let f = measure(&rt, source, &name, n)?;
            let rate = |d: Duration| n as f64 / d.as_secs_f64();
            println!(
                "{:<6} {:>9} {:>9.1} {:>11.0} {:>11.0} {:>6.1} {:>7.1} {:>11.0} {:>6.2} {:>11.0} {:>6.2} {:>11.0} {:>6.2} {:>6} {:>6} {:>6}",
                name,
                n,
                f.event_bytes as f64 / 1e6,
                rate(f.whole),
                rate(f.cpu),
                100.0 * f.sys_share,
                100.0 * f.parse.as_secs_f64() / f.whole.as_secs_f64(),
                rate(f.floor),
                f.ratio,
                rate(f.files_floor),
                f.files_ratio,
                rate(f.event_floor),
                f.least_ratio,
                f.files,
                f.calls.loads,
                f.calls.swaps,
            );
        }
    }
    Ok(())
}

/// The whole path and the floors for events of `n` records of `source`.
fn measure(rt: &tokio::runtime::Runtime, source: Source, name: &str, n: usize) -> BenchResult<Figures> {
    let dir = tempfile::tempdir()?;
    let wh = dir.path().join("wh");
    let runs = if n <= WARM_EVENTS_UP_TO { WARM_EVENTS } else { 1 };
    let events = (0..runs)
        .map(|i| {
            // Fixed event times, as `scripts/profile/callgrind_ingest.sh` has them: the generator's default
            // (two hours before now) splits a 1M-record event into two hours' files or three
            // (32 or 48) by the minute the bench runs.
            let args = [
                format!("records={n}"),
                format!("format={name}"),
                format!("seed={}", i + 1),
                format!("start_offset={}", i * n),
                "start_ms=1780000000000".to_string(),
            ];
            Ok(generate(&GeneratorOptions::from_args(args)?)?.event.to_string().into_bytes())
        })
        .collect::<BenchResult<Vec<Vec<u8>>>>()?;
    let (mut wall, mut cpu, mut sys, mut parse, mut files) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut floor, mut files_floor, mut events_floor) = (Vec::new(), Vec::new(), Vec::new());
    let cfg = Config::from_args([format!("warehouse={}", wh.display())])?;
    let schema = tables::vehicle_telemetry("bench", "zstd", cfg.target_file_size_bytes)?.arrow_schema()?;
    let calls = rt.block_on(async {
        let config = Config::from_args([format!("warehouse={}", wh.display()), format!("source={name}")])?;
        let pipeline = IngestPipeline::new(config).await?;
        let mut calls = Default::default();
        for event in &events {
            let before = pipeline.catalogs().calls();
            let deadline = Instant::now() + Duration::from_secs(3600);
            let (t0, c0) = (Instant::now(), cpu_time());
            let parsed = parse_event(event)?;
            parse.push(t0.elapsed());
            let summary = pipeline.handle(parsed, deadline).await?;
            wall.push(t0.elapsed());
            let c1 = cpu_time();
            cpu.push(c1.0 + c1.1 - c0.0 - c0.1);
            sys.push(c1.1 - c0.1);
            if summary.written != n {
                return Err(format!("{} of the event's {n} records written", summary.written).into());
            }
            files.push(summary.files);
            calls = pipeline.catalogs().calls() - before;
            // The floors of the event's rows (one file, and as many as it wrote), right after its
            // ingest: the machine's speed drifts with its neighbours, and a floor measured
            // beside its own event keeps that drift out of the ratio.
            let parsed = parse_event(event)?;
            // The generator's values all decode (no `corrupt=true`).
            let values: Vec<&[u8]> = parsed.partitions.values().flatten().filter_map(|r| r.value.as_deref()).collect();
            let batch = rows(source, &values, schema.clone())?;
            floor.push(floor_write_files(&batch, 1, dir.path())?);
            files_floor.push(floor_write_files(&batch, summary.files, dir.path())?);
            events_floor.push(event_floor(event, n)?);
        }
        BenchResult::Ok(calls)
    })?;
    let warm = |v: Vec<Duration>| median_by(warm_only(v), Ord::cmp);
    // Summed, not a median: user and system time are apportioned by the clock ticks that fell in
    // each (milliseconds apart), so one 11 ms event reads 0% or a large share, whatever it did.
    let total = |v: Vec<Duration>| warm_only(v).iter().sum::<Duration>().as_secs_f64();
    let sys_share = total(sys) / total(cpu.clone()).max(f64::MIN_POSITIVE);
    // Paired, not a ratio of medians: an event and its floors ran back to back, at one speed.
    let paired = |floors: &[Duration]| {
        let ratios = wall.iter().zip(floors).map(|(w, f)| w.as_secs_f64() / f.as_secs_f64()).collect();
        median_by(warm_only(ratios), f64::total_cmp)
    };
    let (ratio, files_ratio) = (paired(&floor), paired(&files_floor));
    let least_ratio = {
        let least = events_floor.iter().zip(&files_floor).map(|(e, f)| (e.as_secs_f64() + f.as_secs_f64()) / f.as_secs_f64()).collect();
        median_by(warm_only(least), f64::total_cmp)
    };
    files.sort_unstable();
    Ok(Figures {
        whole: warm(wall),
        cpu: warm(cpu),
        sys_share,
        parse: warm(parse),
        floor: warm(floor),
        files_floor: warm(files_floor),
        event_floor: warm(events_floor),
        ratio,
        files_ratio,
        least_ratio,
        event_bytes: events.last().map_or(0, Vec::len),
        files: files[files.len() / 2],
        calls,
    })
}

/// Peak RSS of the release `icestream ingest` on a maximal 6 MB event.
fn peak_rss() -> BenchResult<()> {
    let exe = std::env::current_exe()?;
    let Some(bin) = exe.parent().and_then(std::path::Path::parent).map(|release| release.join("icestream")) else {
        return Err(format!("{} has no release directory above it", exe.display()).into());
    };
    if !bin.exists() {
        println!("peak RSS: build the release CLI first (cargo build --release --bin icestream)");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let event = dir.path().join("max.json");
    let gen_ = std::process::Command::new(&bin).args(["gen-event", "max_bytes=6000000", &format!("out={}", event.display())]).output()?;
    if !gen_.status.success() {
        return Err(format!("gen-event failed: {}", String::from_utf8_lossy(&gen_.stderr)).into());
    }
    let bytes = std::fs::metadata(&event)?.len();
    let child = std::process::Command::new(&bin)
        .arg("ingest")
        .arg(&event)
        .arg(format!("warehouse={}", dir.path().join("wh").display()))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        // Its metrics lines (EMF) go to stderr: kept out of the table, shown if it fails.
        .stderr(std::fs::File::create(dir.path().join("stderr"))?)
        .spawn()?;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut status = 0;
    // SAFETY: wait4 reaps exactly this child and fills the structs we own with its own usage
    // (not the generator's, which getrusage(RUSAGE_CHILDREN) would fold in).
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    if !(pid > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err(format!("ingest failed: {}", std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default()).into());
    }
    println!(
        "peak RSS of `icestream ingest` on a {:.1} MB MSK event: {:.1} MB (target: under 128 MB)",
        bytes as f64 / 1e6,
        usage.ru_maxrss as f64 / 1024.0
    );
    Ok(())
}
