//! `make bench` (part 4): upsert read cost as the table grows.
//!
//! A Debezium-fed upsert table (key: tenant string + order id long, bucket(16, order_id),
//! bloom filters on the key) is loaded with N keys (100k, 1M; `ICESTREAM_BENCH_UPSERT_KEYS`
//! lists others, e.g. 10000000), compacted, then fed 10,000-change batches (updates and deletes
//! shuffled over 4 partitions) of two workloads: `uniform` (updates and deletes of keys drawn
//! from the whole table) and `recent` (inserts of new keys, updates and deletes of the newest
//! 50k). Per size: changes/s on one core (a current-thread runtime), and the data files, bytes
//! and range requests the guarded apply read per batch, for the first batch after the load (the
//! compacted files unseen, as in a cold container) and for the next four (a warm process: the
//! footers and key page indexes kept). Files are sorted by key in pages of 256 rows and each is
//! probed with the keys its bucket holds: `recent` stays flat from 10M keys on (~1.1 MB, ~420
//! requests warm at 10M and 20M); `uniform` reads the key columns nearly whole until the table
//! has many more pages than a batch has keys (34 MB at 10M, 52 MB in 2,000 requests at 20M).
//!
//! Then v2 against v3 (`format_version`: position delete files against deletion vectors): per
//! size (`ICESTREAM_BENCH_UPSERT_V3_KEYS`, default 1M and 10M), `ICESTREAM_BENCH_UPSERT_V3_BATCHES`
//! (default 100) `uniform` batches after the load, no compaction between: per batch the files,
//! bytes and write requests written and the bytes and read requests read (means), and after
//! the last batch the delete files a full scan opens.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use icestream::model::event::{KafkaRecordIn, ParsedEvent, TopicPartition};
use icestream::{Config, IngestPipeline};

const BATCH: usize = 10_000;
const LOAD_BATCH: usize = 100_000;
const MEASURED_BATCHES: usize = 5;
const PARTITIONS: i32 = 4;
const TOPIC: &str = "db.shop.orders";

const SCHEMA: &str = r#"{"type":"object","required":["tenant","order_id"],"properties":{
  "tenant":{"type":"string"},"order_id":{"type":"integer"},"amount":{"type":["integer","null"]}}}"#;

const PIPELINES: &str = r#"namespace = "bench"
[[pipeline]]
table = "orders"
topics = ["db.shop.orders"]
format = "json"
schema = "orders.json"
partition_by = ["bucket(16, order_id)"]
key = ["tenant", "order_id"]
mode = "upsert"
envelope = "debezium"
order_by = "source.lsn"
"#;

/// A small deterministic generator (xorshift), so runs compare.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn change(op: &str, key: u64, lsn: u64, amount: u64) -> Vec<u8> {
    let tenant = ["acme", "globex", "initech", "umbrella"][(key % 4) as usize];
    let row = format!(r#"{{"tenant":"{tenant}","order_id":{key},"amount":{amount}}}"#);
    let (before, after) = if op == "d" { (row, "null".to_string()) } else { ("null".to_string(), row) };
    format!(r#"{{"before":{before},"after":{after},"source":{{"lsn":{lsn}}},"op":"{op}"}}"#).into_bytes()
}

struct Feed {
    offsets: BTreeMap<i32, i64>,
    lsn: u64,
    rng: Rng,
}

impl Feed {
    fn event(&mut self, values: impl IntoIterator<Item = (&'static str, u64)>) -> ParsedEvent {
        let mut partitions: BTreeMap<TopicPartition, Vec<KafkaRecordIn>> = BTreeMap::new();
        for (op, key) in values {
            self.lsn += 1;
            let p = (self.rng.next() % PARTITIONS as u64) as i32;
            let offset = self.offsets.entry(p).or_default();
            let value = change(op, key, self.lsn, self.rng.next() % 1_000_000);
            let record = KafkaRecordIn {
                offset: *offset,
                timestamp_ms: 1_764_460_800_000,
                timestamp_type: None,
                key: None,
                value: Some(value.into()),
                value_error: None,
                headers: Default::default(),
                value_schema: None,
            };
            partitions.entry(TopicPartition { topic: TOPIC.into(), partition: p }).or_default().push(record);
            *offset += 1;
        }
        ParsedEvent { event_source: None, partitions }
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// A table of `keys` keys, loaded and compacted, of the pipeline file `pipelines`; the pipeline,
/// the feed and the seconds the load took.
async fn loaded(dir: &std::path::Path, pipelines: &str, keys: u64) -> (IngestPipeline, Config, Feed, f64) {
    std::fs::write(dir.join("orders.json"), SCHEMA).unwrap();
    std::fs::write(dir.join("pipelines.toml"), pipelines).unwrap();
    let config = Config::from_args([
        format!("warehouse={}", dir.join("wh").display()),
        format!("pipelines={}", dir.join("pipelines.toml").display()),
    ])
    .unwrap();
    let pipeline = IngestPipeline::new(config.clone()).await.unwrap();
    let mut feed = Feed { offsets: BTreeMap::new(), lsn: 0, rng: Rng(0x9E37_79B9_7F4A_7C15) };
    let load_started = Instant::now();
    for start in (0..keys).step_by(LOAD_BATCH) {
        let end = (start + LOAD_BATCH as u64).min(keys);
        pipeline.handle(feed.event((start..end).map(|k| ("c", k))), deadline()).await.unwrap();
    }
    let catalogs = pipeline.catalogs();
    let settings = icestream::services::maintenance::MaintenanceSettings::from(&config);
    icestream::services::maintenance::compact::compact(catalogs, &catalogs.ident("orders"), &settings, false, deadline()).await.unwrap();
    (pipeline, config, feed, load_started.elapsed().as_secs_f64())
}

async fn run(keys: u64, workload: Workload) {
    let dir = tempfile::tempdir().unwrap();
    let (pipeline, _, mut feed, load_s) = loaded(dir.path(), PIPELINES, keys).await;
    let mut next_key = keys;
    // Per batch: files, bytes and requests read. The first batch after the load finds the
    // compacted files unseen; the others come to a warm process, as a Lambda container's do.
    let (mut files, mut reads, mut elapsed) = (0usize, Vec::new(), 0f64);
    for _ in 0..MEASURED_BATCHES {
        let changes: Vec<(&str, u64)> = (0..BATCH).map(|_| workload.change(&mut feed.rng, keys, &mut next_key)).collect();
        let event = feed.event(changes);
        let started = Instant::now();
        let s = pipeline.handle(event, deadline()).await.unwrap();
        elapsed += started.elapsed().as_secs_f64();
        files += s.key_files_read;
        reads.push((s.key_bytes_read, s.key_read_requests));
    }
    let n = MEASURED_BATCHES as f64;
    let warm = &reads[1..];
    let mean = |f: fn(&(u64, u64)) -> u64| warm.iter().map(f).sum::<u64>() as f64 / warm.len() as f64;
    println!(
        "{keys:>10} {:>8} {:>10.0} {:>11.1} {:>11.2} {:>10.2} {:>12} {:>11.0} {:>9.1}",
        workload.name(),
        (BATCH * MEASURED_BATCHES) as f64 / elapsed,
        files as f64 / n,
        reads[0].0 as f64 / 1e6,
        mean(|r| r.0) / 1e6,
        reads[0].1,
        mean(|r| r.1),
        load_s
    );
}

/// Which keys a measured batch changes.
#[derive(Clone, Copy)]
enum Workload {
    /// Updates (90%) and deletes of keys drawn from the whole table: the worst case, where
    /// every batch touches a key in nearly every part of the table.
    Uniform,
    /// Inserts of new keys (half) and updates and deletes of the newest keys: rows that change
    /// while they are young, as in most databases.
    Recent,
}

/// The newest keys the `Recent` workload changes.
const RECENT_KEYS: u64 = 50_000;

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Uniform => "uniform",
            Workload::Recent => "recent",
        }
    }

    fn change(self, rng: &mut Rng, keys: u64, next_key: &mut u64) -> (&'static str, u64) {
        let op = if rng.next().is_multiple_of(10) { "d" } else { "u" };
        match self {
            Workload::Uniform => (op, rng.next() % keys),
            Workload::Recent if rng.next().is_multiple_of(2) => {
                *next_key += 1;
                ("c", *next_key)
            }
            Workload::Recent => (op, *next_key - rng.next() % RECENT_KEYS.min(*next_key)),
        }
    }
}

/// v2 against v3: `batches` uniform batches into `keys` keys of a table of `format_version`.
async fn formats(keys: u64, batches: usize, format_version: u8) {
    let dir = tempfile::tempdir().unwrap();
    let pipelines = format!("{PIPELINES}format_version = {format_version}\n");
    let (pipeline, _, mut feed, _) = loaded(dir.path(), &pipelines, keys).await;
    let mut next_key = keys;
    let (mut files, mut bytes, mut writes, mut read_bytes, mut reads) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let summary_count = |table: &iceberg::table::Table, key: &str| -> u64 {
        let snapshot = table.metadata().current_snapshot().unwrap();
        snapshot.summary().additional_properties.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    let catalogs = pipeline.catalogs();
    let ident = catalogs.ident("orders");
    for _ in 0..batches {
        let changes: Vec<(&str, u64)> = (0..BATCH).map(|_| Workload::Uniform.change(&mut feed.rng, keys, &mut next_key)).collect();
        let s = pipeline.handle(feed.event(changes), deadline()).await.unwrap();
        let table = catalogs.catalog().load_table(&ident).await.unwrap();
        files += summary_count(&table, "added-data-files") + summary_count(&table, "added-delete-files");
        bytes += summary_count(&table, "added-files-size");
        writes += s.round_trips.storage_writes;
        read_bytes += s.round_trips.storage_bytes_read;
        reads += s.round_trips.storage_reads;
    }
    let table = catalogs.catalog().load_table(&ident).await.unwrap();
    let live = icestream::engine::commit::live_rows::LiveFiles::of(&table).await.unwrap();
    let deletes = live.deletes_by_data_file.values().map(Vec::len).sum::<usize>() + live.unscoped_deletes.len();
    let most = live.deletes_by_data_file.values().map(Vec::len).max().unwrap_or(0);
    let n = batches as f64;
    println!(
        "{keys:>10} {:>3} {:>13.1} {:>13.2} {:>14.1} {:>10.2} {:>13.1} {:>10} {:>12} {:>12}",
        format!("v{format_version}"),
        files as f64 / n,
        bytes as f64 / n / 1e6,
        writes as f64 / n,
        read_bytes as f64 / n / 1e6,
        reads as f64 / n,
        live.data.len(),
        deletes,
        most
    );
}

fn main() {
    let sizes: Vec<u64> = std::env::var("ICESTREAM_BENCH_UPSERT_KEYS")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100_000, 1_000_000]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    println!(
        "per 10k-change batch: files probed, MB and range requests read (first batch after the load; mean of the next {})",
        MEASURED_BATCHES - 1
    );
    println!("      keys workload  changes/s  files/batch    MB first     MB warm  req. first   req. warm    load s");
    for keys in sizes {
        for workload in [Workload::Uniform, Workload::Recent] {
            runtime.block_on(run(keys, workload));
        }
    }
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let sizes: Vec<u64> = env("ICESTREAM_BENCH_UPSERT_V3_KEYS")
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000_000, 10_000_000]);
    let batches: usize = env("ICESTREAM_BENCH_UPSERT_V3_BATCHES").and_then(|v| v.trim().parse().ok()).unwrap_or(100);
    println!(
        "\nv2 (position delete files) against v3 (deletion vectors): {batches} uniform 10k-change batches, no compaction; per batch (mean) written and read, then what a full scan opens"
    );
    println!("      keys fmt files written MB (data+del) write requests    MB read read requests data files delete files most/file");
    for keys in sizes {
        for format_version in [2, 3] {
            runtime.block_on(formats(keys, batches, format_version));
        }
    }
}
