//! `make bench` (part 2): commit contention and window dedup, on the embedded catalog.
//!
//! * N writer processes (the release `icestream ingest`, one Kafka partition each) commit to one
//!   table at once: commit attempts and commit wall time per writer, for N = 1, 4, 8, 16.
//! * `dedup=window` against `dedup=batch`: one 10k-record batch into a table that already holds
//!   1M rows in its recent partitions.
//! * One manifest of 10,000 entries (maintenance's rewritten size) of a real ingest's data files:
//!   iceberg-rust's `ManifestWriter` against `commit::manifest`'s.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use iceberg::spec::{DataFile, ManifestContentType, ManifestWriterBuilder};
use icestream::dev::generate::{GeneratorOptions, generate};
use icestream::engine::catalog::Catalogs;
use icestream::engine::commit::live_rows::LiveFiles;
use icestream::engine::commit::manifest::ManifestFileWriter;
use icestream::model::event::{ParsedEvent, event_json, parse_event};
use icestream::{Config, IngestPipeline};

fn bin() -> std::path::PathBuf {
    std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().join("icestream")
}

fn contention(writers: usize) {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let g =
        generate(&GeneratorOptions::from_args([format!("records={}", writers * 5000), format!("partitions={writers}")]).unwrap()).unwrap();
    let full = parse_event(g.event.to_string().as_bytes()).unwrap();
    // Tables first, so the writers race on commits only.
    let warm = dir.path().join("warm.json");
    std::fs::write(&warm, event_json("aws:kafka", "a", "b", &BTreeMap::new()).to_string()).unwrap();
    run(&[warm.to_str().unwrap()], &wh);
    let mut events = vec![];
    for (i, (tp, records)) in full.partitions.iter().enumerate() {
        let path = dir.path().join(format!("p{i}.json"));
        let one: BTreeMap<_, _> = [(tp.clone(), records.clone())].into();
        std::fs::write(&path, event_json("aws:kafka", "a", "b", &one).to_string()).unwrap();
        events.push(path);
    }
    // From the first spawn: the writers run while the later ones start.
    let started = Instant::now();
    let children: Vec<_> = events.iter().map(|path| spawn(path, &wh)).collect();
    let (mut attempts, mut commit_ms, mut max_ms) = (0u64, 0u64, 0u64);
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let s: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
        attempts += s["commit_attempts"].as_u64().unwrap();
        let ms = s["commit_ms"].as_u64().unwrap();
        commit_ms += ms;
        max_ms = max_ms.max(ms);
    }
    println!(
        "{writers:>7} {:>15.2} {:>17.1} {:>15} {:>12.2}",
        attempts as f64 / writers as f64,
        commit_ms as f64 / writers as f64,
        max_ms,
        started.elapsed().as_secs_f64()
    );
}

fn spawn(event: &std::path::Path, wh: &std::path::Path) -> std::process::Child {
    std::process::Command::new(bin())
        .args(["ingest", event.to_str().unwrap(), &format!("warehouse={}", wh.display())])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn run(args: &[&str], wh: &std::path::Path) {
    let out = std::process::Command::new(bin()).arg("ingest").args(args).arg(format!("warehouse={}", wh.display())).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

async fn window_cost() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let now_ms = chrono_now_ms();
    let load = IngestPipeline::new(Config::from_args([format!("warehouse={}", wh.display())]).unwrap()).await.unwrap();
    // 1M rows over the last ~90 minutes, in ten commits.
    for i in 0..10 {
        let g = generate(
            &GeneratorOptions::from_args([
                "records=100000".to_string(),
                format!("start_offset={}", i * 100_000),
                format!("start_ms={}", now_ms - 90 * 60_000 + i * 540_000),
                format!("seed={i}"),
                "vehicles=10000".to_string(),
            ])
            .unwrap(),
        )
        .unwrap();
        let e: ParsedEvent = parse_event(g.event.to_string().as_bytes()).unwrap();
        load.handle(e, Instant::now() + Duration::from_secs(600)).await.unwrap();
    }
    println!("\ndedup cost per 10k-record batch on a table with 1M rows in its recent partitions");
    for (i, mode) in ["batch", "window", "batch", "window"].iter().enumerate() {
        let p = IngestPipeline::new(Config::from_args([format!("warehouse={}", wh.display()), format!("dedup={mode}")]).unwrap())
            .await
            .unwrap();
        let g = generate(
            &GeneratorOptions::from_args([
                "records=10000".to_string(),
                format!("start_offset={}", 2_000_000 + i * 10_000),
                format!("start_ms={}", now_ms - 10 * 60_000),
                format!("seed={}", 100 + i),
            ])
            .unwrap(),
        )
        .unwrap();
        let e = parse_event(g.event.to_string().as_bytes()).unwrap();
        let t0 = Instant::now();
        let s = p.handle(e, Instant::now() + Duration::from_secs(600)).await.unwrap();
        println!("  dedup={mode:<6} {:>8.1} ms  (written {}, duplicates {})", t0.elapsed().as_secs_f64() * 1000.0, s.written, s.duplicates);
    }
}

const MANIFEST_ENTRIES: usize = 10_000;

type BenchResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

async fn manifest_cost() -> BenchResult {
    let dir = tempfile::tempdir()?;
    let config = Config::from_args([format!("warehouse={}", dir.path().join("wh").display())])?;
    let pipeline = IngestPipeline::new(config.clone()).await?;
    let g = generate(&GeneratorOptions::from_args(["records=10000".to_string()])?)?;
    pipeline.handle(parse_event(g.event.to_string().as_bytes())?, Instant::now() + Duration::from_secs(600)).await?;
    let catalogs = Catalogs::connect(&config).await?;
    let table = catalogs.catalog().load_table(&catalogs.ident(&config.table)).await?;
    let files = LiveFiles::of(&table).await?.data;
    let entries: Vec<DataFile> = files.iter().cycle().take(MANIFEST_ENTRIES).cloned().collect();
    let schema = table.metadata().current_schema().clone();
    let spec = table.metadata().default_partition_spec().as_ref().clone();
    let path = |name: &str| format!("{}/metadata/bench-{name}.avro", table.metadata().location());
    println!("\none manifest of {MANIFEST_ENTRIES} entries ({} data files of a 10k-record ingest, repeated)", files.len());
    for round in 0..3 {
        let t0 = Instant::now();
        let mut theirs =
            ManifestWriterBuilder::new(table.file_io().new_output(path("theirs"))?, Some(1), schema.clone(), spec.clone()).build_v2_data();
        for file in &entries {
            theirs.add_existing_file(file.clone(), 1, 1, Some(1))?;
        }
        let theirs = theirs.write_manifest_file().await?;
        let theirs_time = t0.elapsed();
        let t0 = Instant::now();
        let mut ours = ManifestFileWriter::new(&table, &schema, path("ours"), Some(1), ManifestContentType::Data)?;
        for file in &entries {
            ours.add_existing_file(file.clone(), 1, 1, Some(1))?;
        }
        let ours = ours.write_manifest_file().await?;
        let ours_time = t0.elapsed();
        assert_eq!(ours.manifest_length, theirs.manifest_length, "the two manifests differ in size");
        let per_entry = |t: Duration| t.as_secs_f64() * 1e6 / MANIFEST_ENTRIES as f64;
        println!(
            "  round {round}: iceberg-rust {:>7.1} ms ({:.1} µs an entry), commit::manifest {:>6.1} ms ({:.1} µs an entry), {} bytes each",
            theirs_time.as_secs_f64() * 1e3,
            per_entry(theirs_time),
            ours_time.as_secs_f64() * 1e3,
            per_entry(ours_time),
            ours.manifest_length
        );
    }
    Ok(())
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn main() -> BenchResult {
    assert!(bin().exists(), "build the release CLI first: cargo build --release --bin icestream");
    println!("concurrent writer processes on one table (embedded SQLite catalog), 5000 records each");
    println!("writers attempts/writer commit ms/writer max commit ms     wall s");
    for n in [1, 4, 8, 16] {
        contention(n);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(window_cost());
    rt.block_on(manifest_cost())
}
