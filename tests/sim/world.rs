//! The simulated world: the processes (committer, maintenance, direct ingest), the queue and
//! the feeds, and the actors' steps: planned from the seed, run interleaved, then applied.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use iceberg::TableIdent;
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type, UnboundPartitionSpec};
use iceberg::table::Table;
use icestream::Config;
use icestream::base::clock::Clock;
use icestream::engine::catalog::Catalogs;
use icestream::engine::catalog_calls::CallCounter;
use icestream::engine::commit::{Committer, PointerSwap};
use icestream::engine::queue::Message;
use icestream::engine::storage_calls::CountingStorageFactory;
use icestream::model::event::{KafkaRecordIn, ParsedEvent, TopicPartition};
use icestream::model::tables::{TableDef, lineage, reference_properties};
use icestream::services::ingest::IngestPipeline;
use icestream::services::maintenance::{MaintenanceRequest, maintain};
use icestream::services::queued::batch::commit_batch;
use icestream::services::replay::{ReplayFilter, replay};
use icestream_integration::sim::faults::{SimCatalog, SimPointer, SimStorageFactory};
use icestream_integration::sim::queue::{Partition, SimQueue};
use icestream_integration::sim::sched::{Actor, Rates, Sched};
use icestream_integration::{ORDER_V1, ORDER_V2, avro_order};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[path = "actors.rs"]
mod actors;
#[path = "checks.rs"]
mod checks;

pub const TOPIC: &str = "sim";
pub const TABLE: &str = "sim_events";
/// Direct ingest: an append table and an upsert table (key `id`, changelog), Avro values.
pub const APPENDS: &str = "appends";
pub const ORDERS: &str = "orders";
/// Virtual time a step takes: files written a few steps ago are past the orphan margin (1 h).
pub const STEP_SECS: u64 = 3600;
/// Keys per partition of the upsert topic (a key always goes to one partition).
const KEYS: i64 = 4;

/// Offsets the committers moved past, and filled later, over all seeds (the figures line).
static GAP_OFFSETS: AtomicU64 = AtomicU64::new(0);
static FILLED_OFFSETS: AtomicU64 = AtomicU64::new(0);
static CONCURRENT_STEPS: AtomicU64 = AtomicU64::new(0);
static EVOLUTIONS: AtomicU64 = AtomicU64::new(0);

pub fn figures() -> String {
    format!(
        "gap offsets taken {} and filled {}, interleaved steps {}, other engine's evolutions {} so far",
        GAP_OFFSETS.load(Ordering::Relaxed),
        FILLED_OFFSETS.load(Ordering::Relaxed),
        CONCURRENT_STEPS.load(Ordering::Relaxed),
        EVOLUTIONS.load(Ordering::Relaxed)
    )
}

/// A seed's warehouse: in memory (`/dev/shm`, when it has room) unless `SIM_TMP` names a
/// directory. Every file is synced at close and SQLite syncs its log: on a disk those syncs
/// were most of a seed's time.
fn scratch_dir() -> tempfile::TempDir {
    if let Ok(dir) = std::env::var("SIM_TMP") {
        return tempfile::tempdir_in(dir).unwrap();
    }
    let shm = std::ffi::CString::new("/dev/shm").unwrap();
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs fills the struct it is given from a NUL-terminated path.
    let free = if unsafe { libc::statvfs(shm.as_ptr(), &mut stat) } == 0 { stat.f_bavail as u64 * stat.f_frsize as u64 } else { 0 };
    if free >= 1 << 30 { tempfile::tempdir_in("/dev/shm").unwrap() } else { tempfile::tempdir().unwrap() }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

/// A direct topic's record at (partition, offset), a function of the seed: the key, whether
/// it is a Kafka tombstone (upserts only), whether it was written with V2 of the schema (a dead
/// letter until the pipeline reads V2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rec {
    pub id: i64,
    pub tombstone: bool,
    pub v2: bool,
}

fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
    x ^ (x >> 31)
}

/// What a step's actor does.
#[derive(Debug, Clone)]
pub enum Plan {
    /// A queued writer's invocation: records `start..end` of partition `p`; `fate` < 3 crashes it.
    Writer {
        p: usize,
        start: usize,
        end: usize,
        fate: u32,
    },
    Committer {
        messages: Vec<Message>,
    },
    Maintenance {
        action: &'static str,
        table: &'static str,
    },
    /// Direct ingest of records `start..end` of `table`'s partition `p`.
    Ingest {
        table: &'static str,
        p: usize,
        start: usize,
        end: usize,
    },
    Replay {
        table: &'static str,
    },
}

enum Outcome {
    Writer {
        send: Option<String>,
        advance: Option<usize>,
    },
    Committer(icestream::services::queued::report::BatchReport),
    Note(String),
    Ingested(bool),
    /// A maintenance run's error, if any.
    Maintained(Option<String>),
}

pub struct World {
    pub seed: u64,
    pub rng: SmallRng,
    pub now: u64,
    dir: tempfile::TempDir,
    config: Config,
    sched: Arc<Sched>,
    pointer: Arc<SimPointer>,
    storage: SimStorageFactory,
    /// The committer's, maintenance's and direct ingest's processes.
    catalogs: Catalogs,
    maintenance: Catalogs,
    ingest: IngestPipeline,
    /// The operator's replay process: the pipeline reading V2, which decodes the dead letters
    /// V2 producers left (ingest keeps V1: raw Avro carries no writer schema, so V1 values do
    /// not decode with V2).
    replayer: IngestPipeline,
    /// Whether the last replay finished without an error.
    pub replay_ok: bool,
    /// The last maintenance run's error, if any (`Some(None)`: it ran through).
    pub maintenance_ok: Option<Option<String>>,
    /// Maintenance's clock runs this far from the virtual time (seconds, within the orphan margin).
    skew_secs: i64,

    ident: TableIdent,
    queue: SimQueue,
    partitions: Vec<Partition>,
    /// Direct topics' partitions (offsets; `Rec` of each from [`World::rec`]).
    direct: BTreeMap<&'static str, Vec<Partition>>,
    watermarks: BTreeMap<String, i64>,
    /// Each table's metadata location at the last check, and the files it references.
    checked: BTreeMap<&'static str, (String, Vec<String>)>,
    /// Tables the steps since the last check touched.
    touched: std::collections::BTreeSet<&'static str>,
    log: Arc<Mutex<Vec<String>>>,
}

impl World {
    pub async fn new(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let dir = scratch_dir();
        let log = Arc::new(Mutex::new(Vec::new()));
        let rates = Rates { fail: rng.random_range(0..25), lost_after: rng.random_range(0..15), crash: rng.random_range(0..8) };
        let sched = Arc::new(Sched::new(seed, rates, log.clone()));
        let config = Self::config_for(dir.path(), None);
        let mut catalogs = Catalogs::connect(&config).await.unwrap();
        let clock = Arc::new(AtomicU64::new(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()));
        let storage = SimStorageFactory {
            inner: Arc::new(CountingStorageFactory::new(Arc::new(CallCounter::default()))),
            sched: sched.clone(),
            clock,
        };
        let pointer =
            Arc::new(SimPointer::new(catalogs.committer.pointer().clone(), sched.clone(), seed, rng.random_range(10..45), log.clone()));
        Self::simulate(&mut catalogs, &storage, &pointer);
        catalogs.ensure_table(&Self::queued_table()).await.unwrap();
        // Maintenance is another process: its own catalog connection and commit state.
        let mut maintenance = Catalogs::connect(&config).await.unwrap();
        Self::simulate(&mut maintenance, &storage, &pointer);
        let ingest = Self::open_ingest(dir.path(), false, &storage, &pointer).await;
        let replayer = Self::open_ingest(dir.path(), true, &storage, &pointer).await;
        let mut partitions = Vec::new();
        for _ in 0..rng.random_range(1..=2) {
            let records = rng.random_range(6..20);
            partitions.push(Partition::new(&mut rng, records));
        }
        let mut direct = BTreeMap::new();
        for table in [APPENDS, ORDERS] {
            let n = rng.random_range(1..=2);
            let parts = (0..n)
                .map(|_| {
                    let records = rng.random_range(4..16);
                    Partition::new(&mut rng, records)
                })
                .collect();
            direct.insert(table, parts);
        }
        let queue = SimQueue { fifo: rng.random_range(0..4) == 0, ..Default::default() };
        let ident = catalogs.ident(TABLE);
        let skew_secs = rng.random_range(-3000..3000);
        Self {
            seed,
            rng,
            now: 0,
            dir,
            config,
            sched,
            pointer,
            storage,
            catalogs,
            maintenance,
            ingest,
            replayer,
            replay_ok: false,
            maintenance_ok: None,
            skew_secs,
            ident,
            queue,
            partitions,
            direct,
            watermarks: BTreeMap::new(),
            checked: BTreeMap::new(),
            touched: Default::default(),
            log,
        }
    }

    fn config_for(dir: &std::path::Path, pipelines: Option<&str>) -> Config {
        let mut args = vec![
            format!("warehouse={}", dir.display()),
            format!("table={TABLE}"),
            format!("commit_gap_patience={}", std::env::var("SIM_PATIENCE").unwrap_or_else(|_| "2".into())),
            "snapshot_max_age_hours=1".into(),
            "min_snapshots_to_keep=1".into(),
            "orphan_margin_hours=1".into(),
            "hot_partition_hours=0".into(),
        ];
        if let Some(file) = pipelines {
            args.push(format!("pipelines={}", dir.join(file).display()));
        }
        Config::from_args(args).unwrap()
    }

    fn queued_table() -> TableDef {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::required(2, lineage::TOPIC, Type::Primitive(PrimitiveType::String)).into(),
                NestedField::required(3, lineage::PARTITION, Type::Primitive(PrimitiveType::Int)).into(),
                NestedField::required(4, lineage::OFFSET, Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap();
        TableDef {
            name: TABLE.into(),
            schema,
            partition_spec: UnboundPartitionSpec::builder().build(),
            properties: reference_properties("zstd", 1 << 20),
            sort_order: None,
            format_version: None,
        }
    }

    /// A process's catalog and pointer through the fault layer.
    fn simulate(catalogs: &mut Catalogs, storage: &SimStorageFactory, pointer: &Arc<SimPointer>) {
        let catalog = Arc::new(SimCatalog { inner: catalogs.committer.catalog().clone(), storage: storage.clone() });
        let pointer: Arc<dyn PointerSwap> = pointer.clone();
        catalogs.committer = Committer::new(catalog, pointer);
    }

    /// A crashed process starts cold: nothing of its last commits is remembered.
    fn restart(catalogs: &mut Catalogs, pointer: &Arc<SimPointer>) {
        let pointer: Arc<dyn PointerSwap> = pointer.clone();
        catalogs.committer = Committer::new(catalogs.committer.catalog().clone(), pointer);
    }

    /// A direct-ingest process (`v2`: the replay process), reading V1 (V2) of the schema.
    async fn open_ingest(dir: &std::path::Path, v2: bool, storage: &SimStorageFactory, pointer: &Arc<SimPointer>) -> IngestPipeline {
        let (schema, pipelines) = if v2 { ("order_v2.avsc", "pipelines_v2.toml") } else { ("order.avsc", "pipelines.toml") };
        std::fs::write(dir.join(schema), if v2 { ORDER_V2 } else { ORDER_V1 }).unwrap();
        let file = [
            "[[pipeline]]",
            &format!("table = \"{APPENDS}\""),
            &format!("topics = [\"{APPENDS}\"]"),
            "format = \"avro\"",
            &format!("schema = \"{schema}\""),
            "[[pipeline]]",
            &format!("table = \"{ORDERS}\""),
            &format!("topics = [\"{ORDERS}\"]"),
            "key = [\"id\"]",
            "format = \"avro\"",
            &format!("schema = \"{schema}\""),
            "envelope = \"row\"",
            "partition_by = [\"bucket(4, id)\"]",
            "mode = \"upsert\"",
            "changelog = true",
        ]
        .join("\n");
        std::fs::write(dir.join(pipelines), file + "\n").unwrap();
        let mut pipeline = IngestPipeline::new(Self::config_for(dir, Some(pipelines))).await.unwrap();
        Self::simulate(pipeline.catalogs_mut(), storage, pointer);
        pipeline
    }

    pub fn note(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }

    pub fn fail(&self, what: &str) -> ! {
        let log = self.log.lock().unwrap();
        let keep = std::env::var("SIM_LOG_LINES").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
        let tail: Vec<&String> = log.iter().rev().take(keep).collect::<Vec<_>>().into_iter().rev().collect();
        panic!(
            "sim seed {} failed: {what}\nreproduce: SIM_FIRST_SEED={} SIM_SEEDS=1 cargo test -p icestream-integration --test sim -- --nocapture\nlast steps:\n  {}",
            self.seed,
            self.seed,
            tail.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  ")
        );
    }

    pub async fn load(&self, name: &str) -> Table {
        let ident = self.catalogs.ident(name);
        self.catalogs.catalog().load_table(&ident).await.unwrap_or_else(|e| self.fail(&format!("table {name} does not load: {e}")))
    }

    /// The record of a direct topic at (partition, offset).
    pub fn rec(&self, table: &str, p: usize, offset: i64) -> Rec {
        let h = mix(self.seed ^ mix(table.len() as u64 * 7919 + p as u64 * 104_729 + offset as u64));
        let n = self.direct[table].len() as i64;
        let id = if table == ORDERS { ((h % KEYS as u64) as i64) * n + p as i64 } else { offset * 10 + p as i64 };
        Rec { id, tombstone: table == ORDERS && h % 7 == 3, v2: (h >> 8).is_multiple_of(5) }
    }

    fn kafka_record(&self, table: &str, p: usize, offset: i64) -> KafkaRecordIn {
        let rec = self.rec(table, p, offset);
        let note = format!("{p}/{offset}");
        KafkaRecordIn {
            offset,
            timestamp_ms: 1_764_460_800_000 + offset,
            timestamp_type: None,
            key: (table == ORDERS).then(|| format!(r#"{{"id":{}}}"#, rec.id).into_bytes().into()),
            value: (!rec.tombstone).then(|| avro_order(rec.id, &note, rec.v2.then_some(offset)).into()),
            value_error: None,
            headers: Default::default(),
            value_schema: None,
        }
    }

    // ------------------------------------------------------------------------ planning

    /// The seed's next actor.
    pub fn plan(&mut self) -> Plan {
        match self.rng.random_range(0..16) {
            0..=3 => {
                let p = self.rng.random_range(0..self.partitions.len());
                let (start, end) = if self.partitions[p].done() { (0, 0) } else { self.partitions[p].batch(&mut self.rng) };
                Plan::Writer { p, start, end, fate: self.rng.random_range(0..20) }
            }
            4..=7 => Plan::Committer { messages: self.queue.receive(&mut self.rng, self.now, 10) },
            8..=9 => {
                // Orphan removal is the action that deletes most: it runs most often.
                let actions = ["compact", "compact", "expire", "expire", "rewrite-manifests", "purge-tombstones"];
                let action = *actions.get(self.rng.random_range(0..9)).unwrap_or(&"remove-orphans");
                Plan::Maintenance { action, table: [TABLE, TABLE, APPENDS, ORDERS][self.rng.random_range(0..4)] }
            }
            10..=14 => {
                let table = [APPENDS, ORDERS][self.rng.random_range(0..2)];
                let p = self.rng.random_range(0..self.direct[table].len());
                let part = &self.direct[table][p];
                let (start, end) = if part.done() { (0, 0) } else { part.batch(&mut self.rng) };
                Plan::Ingest { table, p, start, end }
            }
            _ => Plan::Replay { table: [APPENDS, ORDERS][self.rng.random_range(0..2)] },
        }
    }

    /// Run `plans` as actors, interleaved call by call, then apply what each did.
    pub async fn step(&mut self, plans: Vec<Plan>) {
        // One invocation per process at a time: a second actor of a busy process is dropped.
        let mut plans = plans;
        let mut busy = std::collections::BTreeSet::new();
        plans.retain(|p| {
            let process = match p {
                Plan::Writer { p, .. } => 10 + *p,
                Plan::Committer { .. } => 1,
                Plan::Maintenance { .. } => 2,
                Plan::Ingest { .. } => 3,
                Plan::Replay { .. } => 4,
            };
            busy.insert(process)
        });
        for plan in &plans {
            self.touch(plan);
        }
        if plans.len() > 1 {
            CONCURRENT_STEPS.fetch_add(1, Ordering::Relaxed);
        }
        let outcomes: Vec<Mutex<Option<Outcome>>> = plans.iter().map(|_| Mutex::new(None)).collect();
        {
            let this = &*self;
            let actors: Vec<Actor<'_>> = plans
                .iter()
                .zip(&outcomes)
                .map(|(plan, slot)| {
                    let fut = async move {
                        let out = this.act(plan).await;
                        *slot.lock().unwrap() = Some(out);
                    };
                    (format!("{plan:?}").chars().take(60).collect(), Box::pin(fut) as _)
                })
                .collect();
            self.sched.run(actors).await;
        }
        self.pointer.land_delayed().await;
        for (plan, slot) in plans.into_iter().zip(outcomes) {
            let outcome = slot.into_inner().unwrap();
            self.apply(plan, outcome).await;
        }
    }

    async fn act(&self, plan: &Plan) -> Outcome {
        match plan {
            Plan::Writer { p, start, end, fate } => self.write_batch(*p, *start, *end, *fate).await,
            Plan::Committer { messages } => {
                if messages.is_empty() {
                    return Outcome::Note("committer: nothing received".into());
                }
                Outcome::Committer(commit_batch(&self.catalogs, &self.config, messages, deadline()).await)
            }
            Plan::Maintenance { action, table } => {
                // "": every action, in the safe order.
                let actions: Vec<String> = [action].iter().filter(|a| !a.is_empty()).map(|a| a.to_string()).collect();
                let mut request = MaintenanceRequest::new(&actions, &[table.to_string()], false, &self.config).unwrap();
                // Maintenance's clock is the virtual time, off by the seed's skew (within the
                // orphan margin: past it, orphan removal could take a commit in flight's files,
                // which the margin exists to prevent).
                let now = self.storage.clock.load(Ordering::Relaxed) as i64 + self.skew_secs;
                request.settings.clock = Clock::at_ms(now * 1000);
                match maintain(&self.maintenance, &request, deadline()).await {
                    Ok(report) => Outcome::Maintained(report.tables.first().and_then(|t| t.error.clone())),
                    Err(e) => Outcome::Maintained(Some(e.to_string())),
                }
            }
            Plan::Ingest { table, p, start, end } => {
                if start == end {
                    return Outcome::Ingested(true);
                }
                let offsets = &self.direct[table][*p].offsets[*start..*end];
                let records = offsets.iter().map(|o| self.kafka_record(table, *p, *o)).collect();
                let tp = TopicPartition { topic: table.to_string(), partition: *p as i32 };
                let event = ParsedEvent { event_source: Some("aws:kafka".into()), partitions: BTreeMap::from([(tp, records)]) };
                match self.ingest.handle(event, deadline()).await {
                    Ok(_) => Outcome::Ingested(true),
                    Err(e) => {
                        self.note(format!("  ingest {table} p{p} failed: {e}"));
                        Outcome::Ingested(false)
                    }
                }
            }
            Plan::Replay { table } => match replay(&self.replayer, table, &ReplayFilter::default(), false, deadline()).await {
                Ok(r) => Outcome::Note(format!(
                    "matched {} already {} not committed {} replayed {} stale {} still failing {:?}",
                    r.matched, r.already_replayed, r.not_committed_yet, r.replayed, r.stale, r.still_failing
                )),
                Err(e) => Outcome::Note(format!("failed: {e}")),
            },
        }
    }

    /// What a finished (or crashed: `None`) actor leaves behind.
    async fn apply(&mut self, plan: Plan, outcome: Option<Outcome>) {
        let crashed = outcome.is_none();
        self.replay_ok &= !crashed;
        match (plan, outcome) {
            (Plan::Writer { p, start, end, .. }, Some(Outcome::Writer { send, advance })) => {
                let sent = send.is_some();
                if let Some(body) = send {
                    self.queue.send(body, self.now);
                }
                if let Some(end) = advance {
                    self.partitions[p].cursor = end;
                }
                self.note(format!("writer p{p} {start}..{end}: sent {sent}, mapping moved on {}", advance.is_some()));
            }
            (Plan::Committer { messages }, Some(Outcome::Committer(report))) => {
                for t in &report.tables {
                    GAP_OFFSETS.fetch_add(t.gap_offsets_taken, Ordering::Relaxed);
                    FILLED_OFFSETS.fetch_add(t.gap_offsets_filled, Ordering::Relaxed);
                }
                self.note(format!(
                    "committer {:?}: failures {:?} deferred {:?} tables {:?}",
                    messages.iter().map(|m| (&m.id, m.receive_count)).collect::<Vec<_>>(),
                    report.batch_item_failures,
                    report.deferred,
                    report
                        .tables
                        .iter()
                        .map(|t| (t.committed, t.trimmed, t.dropped, t.deferred, t.failed, t.error.clone()))
                        .collect::<Vec<_>>()
                ));
                if self.rng.random_range(0..12) == 0 {
                    self.note("committer crashed before acknowledging".into());
                    Self::restart(&mut self.catalogs, &self.pointer);
                    return;
                }
                for m in &messages {
                    if report.deferred.contains(&m.id) {
                        self.queue.show_again_at(&m.id, self.now + 1);
                    } else if !report.batch_item_failures.contains(&m.id) {
                        self.queue.delete(&m.id);
                    }
                }
            }
            (Plan::Ingest { table, p, start, end }, Some(Outcome::Ingested(ok))) => {
                if ok && end > start {
                    self.direct.get_mut(table).unwrap()[p].cursor = end;
                }
                self.note(format!("ingest {table} p{p} {start}..{end}: ok {ok}"));
            }
            (plan, Some(Outcome::Maintained(error))) => {
                self.note(format!("{plan:?}: error {error:?}").chars().take(300).collect());
                self.maintenance_ok = Some(error);
            }
            (plan, Some(Outcome::Note(note))) => {
                if matches!(plan, Plan::Replay { .. }) {
                    self.replay_ok = !note.starts_with("failed");
                }
                self.note(format!("{plan:?}: {note}").chars().take(300).collect())
            }
            (plan, _) if crashed => {
                self.note(format!("{plan:?} crashed").chars().take(200).collect());
                match plan {
                    Plan::Committer { .. } | Plan::Writer { .. } => Self::restart(&mut self.catalogs, &self.pointer),
                    Plan::Maintenance { .. } => Self::restart(&mut self.maintenance, &self.pointer),
                    Plan::Ingest { .. } => {
                        self.ingest = Self::open_ingest(self.dir.path(), false, &self.storage, &self.pointer).await;
                    }
                    Plan::Replay { .. } => {
                        self.replayer = Self::open_ingest(self.dir.path(), true, &self.storage, &self.pointer).await;
                    }
                }
            }
            (plan, _) => self.fail(&format!("{plan:?}: an outcome of another actor")),
        }
    }

    /// The virtual clock moves on by `steps` steps.
    pub fn tick(&mut self, steps: u64) {
        self.now += steps;
        self.storage.clock.fetch_add(steps * STEP_SECS, Ordering::Relaxed);
    }

    pub fn redrive(&mut self) {
        self.note("operator redrives the commit DLQ".into());
        self.queue.redrive(self.now);
    }

    /// The mapping starts a partition again from an earlier offset (its offset commit was lost,
    /// a rebalance): everything from there is delivered again.
    pub fn rewind(&mut self) {
        let tables = [TABLE, APPENDS, ORDERS];
        let table = tables[self.rng.random_range(0..3)];
        let parts = if table == TABLE { &mut self.partitions } else { self.direct.get_mut(table).unwrap() };
        let p = self.rng.random_range(0..parts.len());
        let back = self.rng.random_range(0..=parts[p].cursor);
        parts[p].cursor -= back;
        self.note(format!("mapping rewinds {table} p{p} by {back} records"));
    }
}
