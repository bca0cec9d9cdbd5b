//! Synthetic MSK events with the reference producer's warts: 0.2% verbatim re-sends, 0.1%
//! readings one hour late, and (with `corrupt=true`) ~0.1% values that do not decode.
//! Deterministic for a seed, so tests know exactly what they sent.

use std::collections::BTreeMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::codec::{self, Reading};
use crate::config::{Allowed, Knob, Settings, Source};
use crate::error::Result;
use crate::event::{KafkaRecordIn, TopicPartition, event_json, record_json};

/// Options of every telemetry record stream (`gen-event` and `produce`).
pub const RECORD_OPTIONS: &[Knob] = &[
    Knob { key: "domain", default: "telemetry", allowed: Allowed::OneOf(&["telemetry"]), help: "What to generate" },
    Knob { key: "format", default: "proto", allowed: Allowed::OneOf(&["proto", "avro", "json"]), help: "Value encoding" },
    Knob { key: "vehicles", default: "1000", allowed: Allowed::Integer { min: 1, max: 10_000_000 }, help: "Distinct vehicle ids" },
    Knob { key: "seed", default: "42", allowed: Allowed::Integer { min: 0, max: i64::MAX }, help: "Random seed" },
    Knob { key: "start_ms", default: "0", allowed: Allowed::Integer { min: 0, max: 4_102_444_800_000 }, help: "Event time of the first reading, epoch ms (0 = two hours ago)" },
    Knob { key: "corrupt", default: "false", allowed: Allowed::OneOf(&["true", "false"]), help: "Make ~0.1% of values undecodable" },
    Knob { key: "topic", default: "vehicle-telemetry", allowed: Allowed::Text, help: "Topic name" },
];

/// Options only `icestream gen-event` has: the shape of the one event it writes.
pub const EVENT_OPTIONS: &[Knob] = &[
    Knob { key: "records", default: "1000", allowed: Allowed::Integer { min: 0, max: 10_000_000 }, help: "Records in the event (ignored when max_bytes is set)" },
    Knob { key: "max_bytes", default: "0", allowed: Allowed::Integer { min: 0, max: 64_000_000 }, help: "If set, generate records until the event JSON reaches this size (6000000 = the MSK payload cap)" },
    Knob { key: "partitions", default: "4", allowed: Allowed::Integer { min: 1, max: 1024 }, help: "Kafka partitions the records spread over (keyed by vehicle)" },
    Knob { key: "start_offset", default: "0", allowed: Allowed::Integer { min: 0, max: i64::MAX / 2 }, help: "First offset in every partition" },
    Knob { key: "out", default: "-", allowed: Allowed::Text, help: "Output file (- = standard output)" },
];

/// The option lists of `icestream gen-event`.
pub const GENERATOR_OPTIONS: &[&[Knob]] = &[RECORD_OPTIONS, EVENT_OPTIONS];

/// Parsed record-stream options.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub source: Source,
    pub vehicles: i64,
    pub seed: u64,
    pub start_ms: i64,
    pub corrupt: bool,
    pub topic: String,
}

impl RecordOptions {
    /// From settings that include [`RECORD_OPTIONS`].
    pub fn from_settings(s: &Settings) -> Result<Self> {
        let start_ms: i64 = s.parse("start_ms")?;
        Ok(Self {
            source: match s.get("format") {
                "avro" => Source::Avro,
                "json" => Source::Json,
                _ => Source::Proto,
            },
            vehicles: s.parse("vehicles")?,
            seed: s.parse("seed")?,
            start_ms: if start_ms == 0 { chrono::Utc::now().timestamp_millis() - 2 * 3_600_000 } else { start_ms },
            corrupt: s.get("corrupt") == "true",
            topic: s.get("topic").to_string(),
        })
    }
}

/// Parsed generator options.
#[derive(Debug, Clone)]
pub struct GeneratorOptions {
    pub record: RecordOptions,
    pub records: usize,
    pub max_bytes: usize,
    pub partitions: i32,
    pub start_offset: i64,
    pub out: String,
}

impl GeneratorOptions {
    pub fn from_args<I: IntoIterator<Item = S>, S: AsRef<str>>(args: I) -> Result<Self> {
        let mut s = Settings::over_lists(GENERATOR_OPTIONS);
        s.apply_args(args)?;
        Ok(Self {
            record: RecordOptions::from_settings(&s)?,
            records: s.parse("records")?,
            max_bytes: s.parse("max_bytes")?,
            partitions: s.parse("partitions")?,
            start_offset: s.parse("start_offset")?,
            out: s.get("out").to_string(),
        })
    }
}

/// What a generated event holds, so tests can check the table against it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Expectation {
    pub records: usize,
    /// Distinct valid readings (what `dedup=batch` keeps).
    pub unique_valid: usize,
    /// Valid records, re-sends included (what `dedup=none` keeps).
    pub valid: usize,
    pub resends: usize,
    pub late: usize,
    pub corrupt: usize,
    /// Sum of `speed_kmh` over all valid records, re-sends included.
    pub speed_sum: i64,
    pub bytes: usize,
}

/// A generated event and what it holds.
pub struct Generated {
    pub event: serde_json::Value,
    pub expectation: Expectation,
}

const MODELS: &[&str] = &["Model-E", "Volt-X", "Ion-3", "Aero-S", "Pulse-7"];

/// How many recent valid records a re-send may repeat (bounds memory on endless streams).
const RESEND_WINDOW: usize = 10_000;

/// Values that no decoder accepts: malformed JSON, or an over-long varint for the binary formats.
fn corrupt_value(source: Source, rng: &mut SmallRng) -> Vec<u8> {
    match source {
        Source::Json => format!("{{\"vehicle_id\": {}, \"event_time\": ", rng.random_range(0..1000)).into_bytes(),
        Source::Proto | Source::Avro => vec![0xFF; 12],
    }
}

/// What a generated record is, for the expectation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    Valid { late: bool, speed_kmh: i32 },
    /// A verbatim re-send of an earlier valid record.
    Resend { speed_kmh: i32 },
    Corrupt,
}

/// One generated telemetry record: the vehicle it belongs to (its Kafka key) and its value.
#[derive(Debug, Clone)]
pub struct TelemetryRecord {
    pub vehicle_id: i64,
    pub value: Vec<u8>,
    pub kind: RecordKind,
}

impl TelemetryRecord {
    /// The Kafka key: the vehicle id in decimal.
    pub fn key(&self) -> Vec<u8> {
        self.vehicle_id.to_string().into_bytes()
    }

    /// The partition of `partitions` the record goes to when keyed by vehicle.
    pub fn partition(&self, partitions: i32) -> i32 {
        (self.vehicle_id % i64::from(partitions)) as i32
    }
}

/// The endless record stream behind both `gen-event` and `icestream produce`, warts included.
pub struct TelemetryRecords {
    rng: SmallRng,
    source: Source,
    vehicles: i64,
    start_ms: i64,
    corrupt: bool,
    /// Recent valid records (vehicle, value, speed), for verbatim re-sends.
    recent: std::collections::VecDeque<(i64, Vec<u8>, i32)>,
    index: i64,
}

impl TelemetryRecords {
    pub fn new(opts: &RecordOptions) -> Self {
        Self {
            rng: SmallRng::seed_from_u64(opts.seed),
            source: opts.source,
            vehicles: opts.vehicles,
            start_ms: opts.start_ms,
            corrupt: opts.corrupt,
            recent: Default::default(),
            index: 0,
        }
    }
}

impl Iterator for TelemetryRecords {
    type Item = TelemetryRecord;

    fn next(&mut self) -> Option<TelemetryRecord> {
        let rng = &mut self.rng;
        let i = self.index;
        self.index += 1;
        if !self.recent.is_empty() && rng.random_bool(0.002) {
            let (vehicle_id, value, speed_kmh) = self.recent[rng.random_range(0..self.recent.len())].clone();
            return Some(TelemetryRecord { vehicle_id, value, kind: RecordKind::Resend { speed_kmh } });
        }
        if self.corrupt && rng.random_bool(0.001) {
            let vehicle_id = rng.random_range(0..self.vehicles);
            return Some(TelemetryRecord { vehicle_id, value: corrupt_value(self.source, rng), kind: RecordKind::Corrupt });
        }
        let vehicle = rng.random_range(0..self.vehicles);
        let late = rng.random_bool(0.001);
        // Readings advance ~1 ms per record; a late one is an hour behind.
        let event_ms = self.start_ms + i - if late { 3_600_000 } else { 0 };
        let reading = Reading {
            vehicle_id: vehicle,
            event_time_us: event_ms * 1000,
            model: MODELS[(vehicle as usize) % MODELS.len()].to_string(),
            speed_kmh: rng.random_range(0..180),
            soc_pct: rng.random_range(0..=100),
            odometer_km: 10_000 + vehicle * 7 + i / 100,
            charging: rng.random_bool(0.1),
        };
        let value = codec::encode(self.source, &reading);
        if self.recent.len() == RESEND_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back((vehicle, value.clone(), reading.speed_kmh));
        Some(TelemetryRecord { vehicle_id: vehicle, value, kind: RecordKind::Valid { late, speed_kmh: reading.speed_kmh } })
    }
}

impl Expectation {
    /// Count one record that was sent.
    pub fn count(&mut self, record: &TelemetryRecord) {
        self.records += 1;
        match record.kind {
            RecordKind::Valid { late, speed_kmh } => {
                self.valid += 1;
                self.unique_valid += 1;
                self.late += usize::from(late);
                self.speed_sum += i64::from(speed_kmh);
            }
            RecordKind::Resend { speed_kmh } => {
                self.valid += 1;
                self.resends += 1;
                self.speed_sum += i64::from(speed_kmh);
            }
            RecordKind::Corrupt => self.corrupt += 1,
        }
    }
}

/// Generate one event.
pub fn generate(opts: &GeneratorOptions) -> Result<Generated> {
    let mut partitions: BTreeMap<TopicPartition, Vec<KafkaRecordIn>> = BTreeMap::new();
    let mut next_offset: BTreeMap<i32, i64> = BTreeMap::new();
    let mut exp = Expectation::default();
    // The event's fixed part (source, ARN, servers, braces).
    let mut approx_bytes = 300usize;
    let target = if opts.max_bytes > 0 { usize::MAX } else { opts.records };
    for (i, generated) in TelemetryRecords::new(&opts.record).take(target).enumerate() {
        let partition = generated.partition(opts.partitions);
        let offset = next_offset.entry(partition).or_insert(opts.start_offset);
        let tp = TopicPartition { topic: opts.record.topic.clone(), partition };
        let record = KafkaRecordIn {
            offset: *offset,
            timestamp_ms: opts.record.start_ms + i as i64,
            key: Some(generated.key()),
            value: Some(generated.value.clone()),
            value_error: None,
            headers: vec![("producer".to_string(), b"icestream-gen".to_vec())],
        };
        if opts.max_bytes > 0 {
            // Exact size of the record as rendered, plus its comma and a possible new group key.
            approx_bytes += record_json(&tp, &record).to_string().len() + 1;
            if !partitions.contains_key(&tp) {
                approx_bytes += tp.to_string().len() + 6;
            }
            if approx_bytes > opts.max_bytes {
                break;
            }
        }
        partitions.entry(tp).or_default().push(record);
        exp.count(&generated);
        *offset += 1;
    }
    let event = event_json(
        "aws:kafka",
        crate::event::LOCAL_CLUSTER_ARN,
        "127.0.0.1:9092",
        &partitions,
    );
    exp.bytes = event.to_string().len();
    Ok(Generated { event, expectation: exp })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::parse_event;

    #[test]
    fn deterministic_with_warts_and_contiguous_offsets() {
        let opts = GeneratorOptions::from_args(["records=20000", "corrupt=true", "format=json", "start_ms=1700000000000"]).unwrap();
        let a = generate(&opts).unwrap();
        let b = generate(&opts).unwrap();
        assert_eq!(a.event, b.event);
        let e = &a.expectation;
        assert_eq!(e.records, 20000);
        assert_eq!(e.valid + e.corrupt, e.records);
        assert!(e.resends > 10 && e.resends < 90, "{e:?}");
        assert!(e.corrupt > 2 && e.corrupt < 60, "{e:?}");
        assert!(e.late > 2 && e.late < 60, "{e:?}");
        let parsed = parse_event(a.event.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.record_count(), 20000);
        for records in parsed.partitions.values() {
            for (i, r) in records.iter().enumerate() {
                assert_eq!(r.offset, i as i64);
            }
        }
    }

    #[test]
    fn max_bytes_caps_the_event_json() {
        let opts = GeneratorOptions::from_args(["max_bytes=200000", "records=0"]).unwrap();
        let g = generate(&opts).unwrap();
        assert!(g.expectation.bytes <= 200_000, "{}", g.expectation.bytes);
        assert!(g.expectation.bytes > 150_000, "{}", g.expectation.bytes);
        let e = &g.expectation;
        assert_eq!(e.valid + e.corrupt, e.records, "{e:?}");
    }
}
