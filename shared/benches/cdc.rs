//! `make bench` (part 3): upsert apply rate of the accounts feed on the embedded catalog.
//!
//! Changes from the simulator (80% on 5% of accounts, round-robin over 4 partitions) go through
//! the reference `accounts` upsert pipeline (CSV lines) in 10,000-change batches (the MSK batch
//! maximum), for 10k, 100k and 1M changes over 10k and 1M accounts: changes/s through the
//! changelog and the guarded apply, files written per commit, then the time to read the whole
//! table before and after compaction.
//! `ICESTREAM_BENCH_CDC_MAX` caps the number of changes (default 1,000,000).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use icestream::dev::generate::accounts::{CdcSimulator, SimulatorOptions};
use icestream::model::event::{KafkaRecordIn, ParsedEvent, TopicPartition};
use icestream::{Config, IngestPipeline};

const BATCH: usize = 10_000;
const PARTITIONS: i32 = 4;

const TOPIC: &str = "bank-accounts-cdc";

async fn read_all(pipeline: &IngestPipeline) -> (usize, Duration) {
    let started = Instant::now();
    let catalogs = pipeline.catalogs();
    let table = catalogs.catalog().load_table(&catalogs.ident("accounts")).await.unwrap();
    let batches: Vec<_> = table.scan().build().unwrap().to_arrow().await.unwrap().try_collect().await.unwrap();
    (batches.iter().map(|b| b.num_rows()).sum(), started.elapsed())
}

async fn run(changes: usize, accounts: i64) {
    let dir = tempfile::tempdir().unwrap();
    // The reference `accounts` pipeline on the simulator's topic, its changes as CSV lines.
    let schema = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("json/account.schema.json");
    let file = dir.path().join("pipelines.toml");
    let spec = format!(
        "namespace = \"bigdata\"\n[[pipeline]]\ntable = \"accounts\"\ntopics = [\"{TOPIC}\"]\nformat = \"json\"\nschema = {:?}\n\
         partition_by = [\"bucket(16, account_id)\"]\nmode = \"upsert\"\nkey = [\"account_id\"]\nenvelope = \"csv\"\norder_by = \"seq\"\nchangelog = true\n",
        schema.display().to_string()
    );
    std::fs::write(&file, spec).unwrap();
    let config = Config::from_args([format!("warehouse={}", dir.path().display()), format!("pipelines={}", file.display())]).unwrap();
    let pipeline = IngestPipeline::new(config.clone()).await.unwrap();
    let mut sim = CdcSimulator::new(SimulatorOptions { accounts, ..Default::default() });
    let mut offsets: BTreeMap<i32, i64> = BTreeMap::new();
    let (mut files, mut commits) = (0, 0);
    let started = Instant::now();
    let mut sent = 0;
    while sent < changes {
        let n = BATCH.min(changes - sent);
        let mut partitions: BTreeMap<TopicPartition, Vec<KafkaRecordIn>> = BTreeMap::new();
        for (i, c) in sim.take(n).into_iter().enumerate() {
            let p = (sent + i) as i32 % PARTITIONS;
            let offset = offsets.entry(p).or_default();
            partitions.entry(TopicPartition { topic: TOPIC.into(), partition: p }).or_default().push(KafkaRecordIn {
                offset: *offset,
                timestamp_ms: c.last_updated_us / 1000,
                timestamp_type: None,
                key: None,
                value: Some(c.to_csv().into()),
                value_error: None,
                headers: Default::default(),
                value_schema: None,
            });
            *offset += 1;
        }
        let s = pipeline.handle(ParsedEvent { event_source: None, partitions }, Instant::now() + Duration::from_secs(600)).await.unwrap();
        files += s.files;
        commits += 1;
        sent += n;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (rows, before) = read_all(&pipeline).await;
    let catalogs = pipeline.catalogs();
    let settings = icestream::services::maintenance::MaintenanceSettings::from(&config);
    icestream::services::maintenance::compact::compact(
        catalogs,
        &catalogs.ident("accounts"),
        &settings,
        false,
        Instant::now() + Duration::from_secs(3600),
    )
    .await
    .unwrap();
    let (rows_after, after) = read_all(&pipeline).await;
    assert_eq!(rows, rows_after);
    println!(
        "{changes:>9} {accounts:>9} {:>12.0} {:>8} {:>13.1} {:>10} {:>13.0} {:>12.0}",
        changes as f64 / elapsed,
        commits,
        files as f64 / commits as f64,
        rows,
        before.as_secs_f64() * 1000.0,
        after.as_secs_f64() * 1000.0
    );
}

fn main() {
    let max: usize = std::env::var("ICESTREAM_BENCH_CDC_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // files/commit: every file a batch writes (changelog, data, position deletes).
    println!("  changes  accounts  changes/s  commits  files/commit  live rows  read ms before  read ms after");
    for accounts in [10_000, 1_000_000] {
        for changes in [10_000, 100_000, 1_000_000].into_iter().filter(|c| *c <= max) {
            runtime.block_on(run(changes, accounts));
        }
    }
}
