//! Upsert pipelines in process, where ranks decide: changes of one key with equal order values
//! (an update and a delete in one `source.ts_ms`) are two changes, ranked by their Kafka
//! position in the guarded apply, the changelog and the rebuild alike; dead letters replayed
//! into an upsert table go through the guarded apply, marked once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use icestream::engine::keyed::tombstones::KeyTombstones;
use icestream::model::event::{KafkaRecordIn, ParsedEvent, TopicPartition};
use icestream::services::ingest::IngestPipeline;
use icestream::services::replay::{ReplayFilter, replay};
use icestream_integration::*;

const TOPIC: &str = "shop.orders";

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(120)
}

/// A record at `offset` with a JSON key of `id` and `value` (`None`: a Kafka tombstone).
fn record(offset: i64, id: i64, value: Option<Vec<u8>>) -> KafkaRecordIn {
    KafkaRecordIn {
        offset,
        timestamp_ms: 1_764_460_800_000,
        timestamp_type: None,
        key: Some(format!(r#"{{"id":{id}}}"#).into_bytes().into()),
        value: value.map(Into::into),
        value_error: None,
        headers: Default::default(),
        value_schema: None,
    }
}

fn event(partition: i32, records: Vec<KafkaRecordIn>) -> ParsedEvent {
    let tp = TopicPartition { topic: TOPIC.into(), partition };
    ParsedEvent { event_source: Some("aws:kafka".into()), partitions: BTreeMap::from([(tp, records)]) }
}

/// Write `pipelines.toml` (table `orders`, key `id`, changelog kept) with `lines` added, and
/// open the pipeline on `wh`.
async fn pipeline(wh: &Path, lines: &[&str]) -> IngestPipeline {
    let file = wh.join("pipelines.toml");
    let head = ["namespace = \"bigdata\"", "[[pipeline]]", "table = \"orders\"", &format!("topics = [\"{TOPIC}\"]"), "key = [\"id\"]"];
    let tail = ["partition_by = [\"bucket(4, id)\"]", "mode = \"upsert\"", "changelog = true"];
    std::fs::write(&file, [&head[..], lines, &tail[..]].concat().join("\n") + "\n").unwrap();
    IngestPipeline::new(config(wh, &[&format!("pipelines={}", file.display())])).await.unwrap()
}

/// The live rows of `orders`: id -> (note, position (partition, offset)), asserting one per id.
async fn live(wh: &Path) -> BTreeMap<i64, (Option<String>, (i32, i64))> {
    let mut out = BTreeMap::new();
    for b in scan(wh, "orders").await {
        let ids = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let notes = b.column_by_name("note").unwrap().as_string::<i32>();
        let partitions = b.column_by_name("kafka_partition").unwrap().as_primitive::<Int32Type>();
        let offsets = b.column_by_name("kafka_offset").unwrap().as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let note = arrow_array::Array::is_valid(notes, i).then(|| notes.value(i).to_string());
            let prev = out.insert(ids.value(i), (note, (partitions.value(i), offsets.value(i))));
            assert!(prev.is_none(), "id {} has two live rows", ids.value(i));
        }
    }
    out
}

/// (operation, id, partition, offset) of every changelog row, asserting each record once.
async fn changelog(wh: &Path) -> BTreeSet<(String, i64, i32, i64)> {
    let mut out = BTreeSet::new();
    for b in scan(wh, "orders_changelog").await {
        let ops = b.column_by_name("operation").unwrap().as_string::<i32>();
        let ids = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let partitions = b.column_by_name("kafka_partition").unwrap().as_primitive::<Int32Type>();
        let offsets = b.column_by_name("kafka_offset").unwrap().as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let row = (ops.value(i).to_string(), ids.value(i), partitions.value(i), offsets.value(i));
            assert!(out.insert(row.clone()), "{row:?} twice in the changelog");
        }
    }
    out
}

async fn tombstones(p: &IngestPipeline) -> usize {
    let catalogs = p.catalogs();
    let table = catalogs.catalog().load_table(&catalogs.ident("orders")).await.unwrap();
    KeyTombstones::load_any(&table).await.unwrap().map_or(0, |t| t.len())
}

/// The table's state (live rows, tombstones) as ingest left it and as a rebuild from the
/// changelog alone makes it: they must be equal.
async fn rebuilt_equals_applied(wh: &Path, p: &IngestPipeline) {
    let applied = (live(wh).await, tombstones(p).await);
    let spec = &p.pipelines().pipelines[0];
    let cfg = p.config();
    icestream::modes::upsert::rebuild::rebuild(p.catalogs(), spec, &cfg.compression, cfg.target_file_size_bytes, deadline()).await.unwrap();
    assert_eq!((live(wh).await, tombstones(p).await), applied, "cdc-rebuild differs from the guarded apply");
}

mod equal_order_values {
    use super::*;

    const SCHEMA: &str = r#"{"type":"object","required":["id"],"properties":{"id":{"type":"integer"},"note":{"type":["string","null"]}}}"#;

    /// A Debezium change of `id` at `ts_ms`: c, u (with `note`) or d.
    fn change(offset: i64, op: &str, id: i64, note: &str, ts_ms: i64) -> KafkaRecordIn {
        let row = format!(r#"{{"id":{id},"note":"{note}"}}"#);
        let (before, after) = if op == "d" { (row.as_str(), "null") } else { ("null", row.as_str()) };
        let value = format!(r#"{{"before":{before},"after":{after},"source":{{"ts_ms":{ts_ms}}},"op":"{op}"}}"#);
        record(offset, id, Some(value.into_bytes()))
    }

    async fn debezium_by_ts_ms(wh: &Path) -> IngestPipeline {
        std::fs::write(wh.join("orders.schema.json"), SCHEMA).unwrap();
        pipeline(wh, &["format = \"json\"", "schema = \"orders.schema.json\"", "envelope = \"debezium\"", "order_by = \"source.ts_ms\""])
            .await
    }

    #[tokio::test]
    async fn an_update_and_a_delete_in_one_millisecond_are_two_changes_and_the_later_wins_everywhere() {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path();
        let p = debezium_by_ts_ms(wh).await;
        // One batch: id 1 created, then updated and deleted in the same millisecond.
        let batch = vec![change(0, "c", 1, "a", 1000), change(1, "u", 1, "b", 2000), change(2, "d", 1, "b", 2000)];
        p.handle(event(0, batch.clone()), deadline()).await.unwrap();
        // Two batches: id 2 updated, then deleted in the same millisecond by the next batch.
        p.handle(event(0, vec![change(3, "c", 2, "a", 3000), change(4, "u", 2, "b", 4000)]), deadline()).await.unwrap();
        p.handle(event(0, vec![change(5, "d", 2, "b", 4000)]), deadline()).await.unwrap();
        // id 3: a delete, then (delivered later, from another partition, at a lower offset) an
        // update of the same millisecond: the delete's position ranks it last, the key stays gone.
        p.handle(event(0, vec![change(6, "c", 3, "a", 5000), change(7, "d", 3, "a", 6000)]), deadline()).await.unwrap();
        let late = p.handle(event(1, vec![change(0, "u", 3, "late", 6000)]), deadline()).await.unwrap();
        assert_eq!(late.upsert_stale, 1, "{late:?}");

        assert!(live(wh).await.is_empty(), "every key was deleted last: {:?}", live(wh).await);
        assert_eq!(tombstones(&p).await, 3);
        let expected: BTreeSet<(String, i64, i32, i64)> = [
            ("I", 1, 0, 0),
            ("U", 1, 0, 1),
            ("D", 1, 0, 2),
            ("I", 2, 0, 3),
            ("U", 2, 0, 4),
            ("D", 2, 0, 5),
            ("I", 3, 0, 6),
            ("D", 3, 0, 7),
            ("U", 3, 1, 0),
        ]
        .into_iter()
        .map(|(op, id, p, o)| (op.to_string(), id, p, o))
        .collect();
        assert_eq!(changelog(wh).await, expected, "every change once, equal order values or not");

        // A redelivered batch adds nothing anywhere.
        let again = p.handle(event(0, batch), deadline()).await.unwrap();
        assert_eq!((again.changelog_written, again.upsert_applied), (0, 0), "{again:?}");
        assert_eq!(changelog(wh).await, expected);
        rebuilt_equals_applied(wh, &p).await;

        // A newer change brings a key back, in the table and in the rebuild.
        p.handle(event(0, vec![change(8, "c", 1, "back", 6000)]), deadline()).await.unwrap();
        assert_eq!(live(wh).await.get(&1).map(|r| r.0.clone()), Some(Some("back".into())));
        rebuilt_equals_applied(wh, &p).await;
    }

    #[tokio::test]
    async fn a_truncate_ranks_by_its_position_among_changes_of_its_millisecond() {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path();
        std::fs::write(wh.join("orders.schema.json"), SCHEMA).unwrap();
        let lines = [
            "format = \"json\"",
            "schema = \"orders.schema.json\"",
            "envelope = \"debezium\"",
            "order_by = \"source.ts_ms\"",
            "allow_truncate = true",
        ];
        let p = pipeline(wh, &lines).await;
        let truncate = |offset| record(offset, 0, Some(br#"{"before":null,"after":null,"source":{"ts_ms":1000},"op":"t"}"#.to_vec()));
        // In one millisecond: id 1 before the truncate, id 2 after it.
        p.handle(event(0, vec![change(0, "c", 1, "before", 1000), truncate(1), change(2, "c", 2, "after", 1000)]), deadline())
            .await
            .unwrap();
        assert_eq!(live(wh).await.keys().copied().collect::<Vec<_>>(), vec![2]);
        // Delivered late from another partition, of the same millisecond but ranked before the
        // truncate (a lower offset): stale.
        let late = p.handle(event(1, vec![change(0, "c", 3, "late", 1000)]), deadline()).await.unwrap();
        assert_eq!(late.upsert_stale, 1, "{late:?}");
        assert_eq!(live(wh).await.keys().copied().collect::<Vec<_>>(), vec![2]);
        rebuilt_equals_applied(wh, &p).await;
    }
}

mod replayed_dead_letters {
    use super::*;

    /// The row `id`, `note` (with V2's `extra` when given: a dead letter until the pipeline
    /// reads V2).
    fn row(offset: i64, id: i64, note: &str, extra: Option<i64>) -> KafkaRecordIn {
        record(offset, id, Some(avro_order(id, note, extra)))
    }

    async fn keyed_rows(wh: &Path, schema: &str) -> IngestPipeline {
        std::fs::write(wh.join("order.avsc"), schema).unwrap();
        pipeline(wh, &["format = \"avro\"", "schema = \"order.avsc\"", "envelope = \"row\""]).await
    }

    #[tokio::test]
    async fn replay_goes_through_the_guarded_apply_once() {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path();
        let p = keyed_rows(wh, ORDER_V1).await;
        // Keyed rows ordered by offset; the V2 values are dead letters.
        let batch = vec![
            row(0, 1, "first", None),
            row(1, 1, "stale", Some(1)), // id 1: a newer version follows
            row(2, 1, "newer", None),
            row(3, 2, "deleted", Some(3)), // id 2: a delete follows
            record(4, 2, None),
            row(5, 3, "new key", Some(5)), // id 3: nothing else
            row(6, 4, "gone", None),
            record(7, 4, None),
            row(8, 4, "after the delete", Some(8)), // id 4: newer than its delete
        ];
        let s = p.handle(event(0, batch), deadline()).await.unwrap();
        assert_eq!(s.dead_letter, 4, "{s:?}");
        let before_replay = changelog(wh).await;
        assert_eq!(before_replay.len(), 5);

        // The pipeline reads V2 now: the dead letters decode.
        drop(p);
        let p = keyed_rows(wh, ORDER_V2).await;
        let first = replay(&p, "orders", &ReplayFilter::default(), false, deadline()).await.unwrap();
        assert_eq!((first.matched, first.replayed, first.stale), (4, 4, 2), "{first:?}");
        let want: BTreeMap<i64, (Option<String>, (i32, i64))> = [(1, ("newer", 2)), (3, ("new key", 5)), (4, ("after the delete", 8))]
            .into_iter()
            .map(|(id, (n, o))| (id, (Some(n.to_string()), (0, o))))
            .collect();
        assert_eq!(
            live(wh).await,
            want,
            "a newer version stays, a deleted key stays deleted, a new key and a change newer than its delete apply"
        );
        let mut with_replays = before_replay.clone();
        with_replays.extend([1, 3, 5, 8].map(|o| ("U".to_string(), [0, 1, 1, 2, 2, 3, 4, 4, 4][o as usize], 0, o)));
        assert_eq!(changelog(wh).await, with_replays, "the changelog takes each replayed change once");

        // Replayed twice: nothing more, anywhere.
        let second = replay(&p, "orders", &ReplayFilter::default(), false, deadline()).await.unwrap();
        assert_eq!((second.already_replayed, second.replayed, second.snapshot_id), (4, 0, None), "{second:?}");
        assert_eq!(live(wh).await, want);
        assert_eq!(changelog(wh).await, with_replays);
        // Watermarks were not moved; the batch redelivered changes nothing.
        let s = p.handle(event(0, vec![row(8, 4, "after the delete", Some(8))]), deadline()).await.unwrap();
        assert_eq!((s.upsert_applied, s.dead_letter), (0, 0), "{s:?}");
        rebuilt_equals_applied(wh, &p).await;
    }
}
