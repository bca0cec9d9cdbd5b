//! The invariants: after every step, and at quiescence.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use futures::TryStreamExt;
use iceberg::table::Table;
use icestream::engine::commit::gaps::TakenGaps;
use icestream::model::event::TopicPartition;
use icestream::model::tables::lineage;

use super::{APPENDS, ORDERS, Plan, TABLE, TOPIC, World};

/// Every table the world writes.
const TABLES: [&str; 6] = [TABLE, APPENDS, "appends_dead_letter", ORDERS, "orders_dead_letter", "orders_changelog"];

/// Rows of `table`: (partition, offset) and, when asked for, `id` and `note`.
async fn rows(table: &Table, id: bool, note: bool) -> Vec<((i32, i64), (Option<i64>, Option<String>))> {
    let mut out = Vec::new();
    if table.metadata().current_snapshot().is_none() {
        return out;
    }
    let mut columns = vec![lineage::PARTITION, lineage::OFFSET];
    columns.extend(id.then_some("id"));
    columns.extend(note.then_some("note"));
    let scan = table.scan().select(columns).build().unwrap();
    let batches: Vec<RecordBatch> = scan.to_arrow().await.unwrap().try_collect().await.unwrap();
    for b in batches {
        let (ps, os) = (b.column(0).as_primitive::<Int32Type>(), b.column(1).as_primitive::<Int64Type>());
        let ids = b.column_by_name("id").map(|c| c.as_primitive::<Int64Type>().clone());
        let notes = b.column_by_name("note").map(|c| c.as_string::<i32>().clone());
        for i in 0..b.num_rows() {
            let n = notes.as_ref().and_then(|n| n.is_valid(i).then(|| n.value(i).to_string()));
            let id = ids.as_ref().and_then(|c| c.is_valid(i).then(|| c.value(i)));
            out.push(((ps.value(i), os.value(i)), (id, n)));
        }
    }
    out
}

impl World {
    /// The invariants that hold after every step, on the tables the step touched (no other
    /// changed). A table whose metadata did not change since the last check has the same
    /// files: only their existence is checked again.
    pub async fn check_step(&mut self) {
        let touched = std::mem::take(&mut self.touched);
        for name in TABLES.into_iter().filter(|t| touched.contains(t)) {
            let table = self.load(name).await;
            let location = table.metadata_location().unwrap_or_default().to_string();
            let known = self.checked.get(name).filter(|(at, _)| *at == location).map(|(_, files)| files.clone());
            let files = match known {
                Some(files) => files,
                None => self.referenced_files(name, &table).await,
            };
            if let Some(gone) = files.iter().find(|f| !Path::new(f.trim_start_matches("file://")).exists()) {
                self.fail(&format!("{name}: {gone}, which its metadata references, is gone"));
            }
            self.checked.insert(name, (location, files));
            for (key, value) in table.metadata().properties() {
                let Some(tp) = key.strip_prefix("icestream.offset.") else { continue };
                let w: i64 = value.parse().unwrap();
                let before = self.watermarks.insert(format!("{name}/{tp}"), w);
                if before.is_some_and(|b| b > w) {
                    self.fail(&format!("{name}: watermark {tp} went back from {before:?} to {w}"));
                }
            }
        }
    }

    /// Every snapshot's manifest list, and the current snapshot's manifests and live files.
    async fn referenced_files(&self, name: &str, table: &Table) -> Vec<String> {
        let metadata = table.metadata();
        let mut files: Vec<String> = metadata.snapshots().map(|s| s.manifest_list().to_string()).collect();
        if let Some(current) = metadata.current_snapshot() {
            let io = table.file_io();
            let list =
                table.manifest_list_reader(current).load().await.unwrap_or_else(|e| self.fail(&format!("{name}: manifest list: {e}")));
            for m in list.entries() {
                files.push(m.manifest_path.clone());
                let manifest =
                    m.load_manifest(io).await.unwrap_or_else(|e| self.fail(&format!("{name}: manifest {}: {e}", m.manifest_path)));
                files.extend(manifest.entries().iter().filter(|e| e.is_alive()).map(|e| e.file_path().to_string()));
            }
        }
        files
    }

    /// Every batch delivered again, the dead letters replayed, the DLQ
    /// redriven, the queue drained, without crashes; then [`World::check_final`].
    pub async fn quiesce(&mut self) {
        self.sched.set_crashes(false);
        *self.pointer.crashes.lock().unwrap() = false;
        let mut at = crate::cpu();
        // Each direct partition delivered whole until it lands, then its dead letters replayed.
        for table in [APPENDS, ORDERS] {
            for p in 0..self.direct[table].len() {
                let end = self.direct[table][p].offsets.len();
                self.direct.get_mut(table).unwrap()[p].cursor = 0;
                for _ in 0..50 {
                    self.step(vec![Plan::Ingest { table, p, start: 0, end }]).await;
                    if self.direct[table][p].done() {
                        break;
                    }
                }
            }
        }
        crate::phase(5, &mut at);
        for table in [APPENDS, ORDERS] {
            // Until one replay runs through (faults still strike).
            for _ in 0..50 {
                self.replay_ok = false;
                self.step(vec![Plan::Replay { table }]).await;
                if self.replay_ok {
                    break;
                }
            }
        }
        crate::phase(6, &mut at);
        // Every queued record delivered again, each partition in one batch, then from its start.
        for p in 0..self.partitions.len() {
            let end = self.partitions[p].offsets.len();
            self.step(vec![Plan::Writer { p, start: 0, end, fate: 19 }]).await;
            self.partitions[p].cursor = 0;
        }
        for round in 0..400 {
            let pending: Vec<usize> = (0..self.partitions.len()).filter(|p| !self.partitions[*p].done()).collect();
            let wrote = !pending.is_empty();
            if let Some(&p) = pending.first() {
                let (start, end) = self.partitions[p].batch(&mut self.rng);
                self.step(vec![Plan::Writer { p, start, end, fate: 19 }]).await;
            } else if self.queue.messages.is_empty() && self.queue.dead.is_empty() {
                crate::phase(7, &mut at);
                return;
            }
            if round % 10 == 9 {
                self.queue.redrive(self.now);
            }
            let messages = self.queue.receive(&mut self.rng, self.now, 10);
            // Waiting for a visibility timeout changes nothing: no step, nothing to check.
            let received = !messages.is_empty();
            if received {
                self.step(vec![Plan::Committer { messages }]).await;
            }
            self.tick(2);
            if wrote || received {
                self.check_step().await;
            }
        }
        self.fail(&format!("did not quiesce: {} queued, {} dead", self.queue.messages.len(), self.queue.dead.len()));
    }

    /// Every table of `plan` (its dead-letter table and changelog with it).
    pub fn touch(&mut self, plan: &Plan) {
        let tables: &[&'static str] = match plan {
            Plan::Writer { .. } | Plan::Committer { .. } => &[TABLE],
            Plan::Maintenance { table, .. } => &[table],
            Plan::Ingest { table, .. } | Plan::Replay { table } if *table == APPENDS => &[APPENDS, "appends_dead_letter"],
            Plan::Ingest { .. } | Plan::Replay { .. } => &[ORDERS, "orders_dead_letter", "orders_changelog"],
        };
        self.touched.extend(tables.iter().copied());
    }

    pub async fn check_final(&mut self) {
        self.touched.extend(TABLES);
        self.check_step().await;
        self.check_maintenance().await;
        self.touched.extend(TABLES);
        self.check_step().await;
        self.check_queued().await;
        self.check_appends().await;
        self.check_orders().await;
    }

    /// Without faults, every maintenance action runs through: nothing the faults or the other
    /// engine left may stop a table's maintenance for good.
    async fn check_maintenance(&mut self) {
        self.sched.set_rates(Default::default());
        self.pointer.calm.store(true, std::sync::atomic::Ordering::Relaxed);
        // One table a seed (the seed picks which): all three cost a seed a third more.
        let table = [TABLE, APPENDS, ORDERS][(self.seed % 3) as usize];
        {
            self.maintenance_ok = None;
            self.step(vec![Plan::Maintenance { action: "", table }]).await;
            if let Some(error) = self.maintenance_ok.take().flatten() {
                self.fail(&format!("maintenance of {table} fails without faults: {error}"));
            }
        }
    }

    /// `table`'s watermark of partition `p` of `topic` (with its dead-letter table's, when it
    /// has one: a batch of dead letters only commits nothing to the data table) is the
    /// partition's last offset.
    async fn check_watermark(&self, table: &Table, topic: &str, p: usize, last: Option<i64>) {
        let key = format!("icestream.offset.{topic}.{p}");
        let mark_of = |t: &Table| t.metadata().properties().get(&key).map(|v| v.parse::<i64>().unwrap());
        let mut mark = mark_of(table);
        if topic != TOPIC {
            mark = mark.max(mark_of(&self.load(&format!("{}_dead_letter", table.identifier().name())).await));
        }
        if mark != last {
            self.fail(&format!("{}: {topic} p{p} watermark {mark:?}, last offset {last:?}", table.identifier().name()));
        }
    }

    /// Each offset of `records` held once in `held`, and nothing else of partition `p`.
    fn exactly_once(&self, what: &str, p: usize, records: &BTreeSet<i64>, held: &BTreeMap<(i32, i64), u32>) {
        for &o in records {
            match held.get(&(p as i32, o)) {
                Some(1) => {}
                Some(n) => self.fail(&format!("{what} p{p} offset {o} held {n} times")),
                None => self.fail(&format!("{what} p{p} offset {o} lost")),
            }
        }
        if let Some(o) = held.keys().filter(|(hp, _)| *hp == p as i32).map(|(_, o)| *o).find(|o| !records.contains(o)) {
            self.fail(&format!("{what} p{p} offset {o} held but not expected"));
        }
    }

    fn count(rows: &[((i32, i64), (Option<i64>, Option<String>))]) -> BTreeMap<(i32, i64), u32> {
        let mut held = BTreeMap::new();
        for (at, _) in rows {
            *held.entry(*at).or_default() += 1;
        }
        held
    }

    async fn check_queued(&self) {
        let table = self.load(TABLE).await;
        let held = Self::count(&rows(&table, false, false).await);
        let props = table.metadata().properties();
        for (p, partition) in self.partitions.iter().enumerate() {
            let records: BTreeSet<i64> = partition.offsets.iter().copied().collect();
            self.exactly_once(TABLE, p, &records, &held);
            self.check_watermark(&table, TOPIC, p, partition.offsets.last().copied()).await;
            let tp = TopicPartition { topic: TOPIC.into(), partition: p as i32 };
            let open: Vec<(i64, i64)> =
                TakenGaps::from_properties(props).0.get(&tp).into_iter().flatten().map(|g| (g.first, g.last)).collect();
            if let Some((a, b)) = open.iter().find(|(a, b)| records.range(*a..=*b).next().is_some()) {
                self.fail(&format!("p{p}: open gap {a}..={b} holds a record offset"));
            }
        }
    }

    /// Every record in the append table once (V2 ones by replay), with its own id; dead
    /// letters only of V2 records, each once.
    async fn check_appends(&self) {
        let table = self.load(APPENDS).await;
        let data = rows(&table, true, false).await;
        let dead = Self::count(&rows(&self.load("appends_dead_letter").await, false, false).await);
        let held = Self::count(&data);
        for (p, partition) in self.direct[APPENDS].iter().enumerate() {
            let records: BTreeSet<i64> = partition.offsets.iter().copied().collect();
            let dead_of_p: Vec<i64> = dead.keys().filter(|(dp, _)| *dp == p as i32).map(|(_, o)| *o).collect();
            let v2: Vec<i64> = records.iter().copied().filter(|o| self.rec(APPENDS, p, *o).v2).collect();
            self.note(format!("appends p{p}: dead letters {dead_of_p:?}, V2 records {v2:?}"));
            self.exactly_once(APPENDS, p, &records, &held);
            self.check_watermark(&table, APPENDS, p, partition.offsets.last().copied()).await;
            for ((dp, o), n) in dead.iter().filter(|((dp, _), _)| *dp == p as i32) {
                if *n > 1 || !records.contains(o) || !self.rec(APPENDS, p, *o).v2 {
                    self.fail(&format!("appends_dead_letter: p{dp} offset {o} held {n} times (V2 record: {})", records.contains(o)));
                }
            }
        }
        for ((p, o), (id, _)) in &data {
            if *id != Some(self.rec(APPENDS, *p as usize, *o).id) {
                self.fail(&format!("appends: p{p} offset {o} has id {id:?}"));
            }
        }
    }

    /// The upsert table holds each key's last change (none if a tombstone); its changelog each
    /// change once.
    async fn check_orders(&self) {
        let table = self.load(ORDERS).await;
        let mut want: BTreeMap<i64, (i32, i64)> = BTreeMap::new();
        let mut gone: BTreeSet<i64> = BTreeSet::new();
        let mut changes = BTreeSet::new();
        for (p, partition) in self.direct[ORDERS].iter().enumerate() {
            self.check_watermark(&table, ORDERS, p, partition.offsets.last().copied()).await;
            for &o in &partition.offsets {
                let rec = self.rec(ORDERS, p, o);
                changes.insert((p as i32, o));
                if rec.tombstone {
                    want.remove(&rec.id);
                    gone.insert(rec.id);
                } else {
                    want.insert(rec.id, (p as i32, o));
                    gone.remove(&rec.id);
                }
            }
        }
        let mut live: BTreeMap<i64, (i32, i64)> = BTreeMap::new();
        for (at, (id, note)) in rows(&table, true, true).await {
            let id = id.unwrap_or_else(|| self.fail(&format!("orders: row at {at:?} without id")));
            if note != Some(format!("{}/{}", at.0, at.1)) {
                self.fail(&format!("orders: key {id} at {at:?} has note {note:?}"));
            }
            if let Some(before) = live.insert(id, at) {
                self.fail(&format!("orders: key {id} has two live rows, at {before:?} and {at:?}"));
            }
        }
        if live != want {
            self.fail(&format!("orders: live rows {live:?}, each key's last change {want:?} (deleted last: {gone:?})"));
        }
        let changelog = rows(&self.load("orders_changelog").await, false, false).await;
        let held = Self::count(&changelog);
        for (at, n) in &held {
            if *n > 1 || !changes.contains(at) {
                self.fail(&format!("orders_changelog: change at {at:?} held {n} times"));
            }
        }
        let missing: Vec<&(i32, i64)> =
            changes.iter().filter(|at| !held.contains_key(at) && !self.rec(ORDERS, at.0 as usize, at.1).tombstone).collect();
        if !missing.is_empty() {
            self.fail(&format!("orders_changelog: changes {missing:?} missing"));
        }
    }
}
