//! Synthetic MSK events and record streams: vehicle telemetry with the reference producer's
//! warts (0.2% verbatim re-sends, 0.1% readings one hour late, and with `corrupt=true` ~0.1%
//! values that do not decode), or bank-account changes from the CDC simulator. Deterministic
//! for a seed, so tests know exactly what they sent. `gen-event` packs a stream into one event;
//! `icestream produce` sends the same stream to Kafka.

use std::collections::{BTreeMap, VecDeque};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

pub mod accounts;

use crate::base::error::Result;
use crate::dev::codec::{self, Reading};
use crate::model::config::{Allowed, Knob, Settings, Source};
use crate::model::event::{KafkaRecordIn, LOCAL_CLUSTER_ARN, TopicPartition, event_json, record_json};
use accounts::{CdcFormat, CdcSimulator, SimulatorOptions};

/// Options of every record stream (`gen-event`, `produce`, `simulate-cdc`).
pub const RECORD_OPTIONS: &[Knob] = &[
    Knob {
        key: "domain",
        default: "telemetry",
        allowed: Allowed::OneOf(&["telemetry", "cdc"]),
        help: "What to generate: vehicle telemetry, or bank-account changes (CDC)",
    },
    Knob {
        key: "format",
        default: "auto",
        allowed: Allowed::OneOf(&["auto", "proto", "avro", "json", "csv", "dms"]),
        help: "Value encoding: proto|avro|json for telemetry (auto = proto), csv|dms for cdc (auto = csv)",
    },
    Knob { key: "vehicles", default: "1000", allowed: Allowed::Integer { min: 1, max: 10_000_000 }, help: "Distinct vehicle ids" },
    Knob {
        key: "accounts",
        default: "10000",
        allowed: Allowed::Integer { min: 1, max: 100_000_000 },
        help: "cdc: distinct account ids (80% of changes go to 5% of them)",
    },
    Knob {
        key: "first_seq",
        default: "1",
        allowed: Allowed::Integer { min: 0, max: i64::MAX / 2 },
        help: "cdc: `seq` of the first change",
    },
    Knob {
        key: "keyed",
        default: "auto",
        allowed: Allowed::OneOf(&["auto", "true", "false"]),
        help: "Key records by vehicle or account (one partition per key) or send them unkeyed, round-robin; auto = keyed telemetry, round-robin cdc (order across partitions is lost, as with unkeyed producers)",
    },
    Knob { key: "seed", default: "42", allowed: Allowed::Integer { min: 0, max: i64::MAX }, help: "Random seed" },
    Knob {
        key: "start_ms",
        default: "0",
        allowed: Allowed::Integer { min: 0, max: 4_102_444_800_000 },
        help: "Event time of the first reading, epoch ms (0 = two hours ago)",
    },
    Knob {
        key: "corrupt",
        default: "false",
        allowed: Allowed::OneOf(&["true", "false"]),
        help: "telemetry: make ~0.1% of values undecodable",
    },
    Knob {
        key: "topic",
        default: "auto",
        allowed: Allowed::Text,
        help: "Topic name (auto = vehicle-telemetry, or bank-accounts-cdc for cdc)",
    },
];

/// Options only `gen-event` has: the shape of the one event it writes.
pub const EVENT_OPTIONS: &[Knob] = &[
    Knob {
        key: "records",
        default: "1000",
        allowed: Allowed::Integer { min: 0, max: 10_000_000 },
        help: "Records in the event (ignored when max_bytes is set)",
    },
    Knob {
        key: "max_bytes",
        default: "0",
        allowed: Allowed::Integer { min: 0, max: 64_000_000 },
        help: "If set, generate records until the event JSON reaches this size (6000000 = the MSK payload cap)",
    },
    Knob {
        key: "partitions",
        default: "4",
        allowed: Allowed::Integer { min: 1, max: 1024 },
        help: "Kafka partitions the records spread over (by key, or round-robin)",
    },
    Knob {
        key: "start_offset",
        default: "0",
        allowed: Allowed::Integer { min: 0, max: i64::MAX / 2 },
        help: "First offset in every partition",
    },
    Knob { key: "out", default: "-", allowed: Allowed::Text, help: "Output file (- = standard output)" },
];

/// The option lists of `icestream gen-event`.
pub const GENERATOR_OPTIONS: &[&[Knob]] = &[RECORD_OPTIONS, EVENT_OPTIONS];

/// What a stream generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    Telemetry,
    Cdc,
}

/// Parsed [`RECORD_OPTIONS`].
#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub domain: Domain,
    pub source: Source,
    pub cdc_format: CdcFormat,
    pub vehicles: i64,
    pub accounts: i64,
    pub first_seq: i64,
    pub keyed: bool,
    pub seed: u64,
    pub start_ms: i64,
    pub corrupt: bool,
    pub topic: String,
}

impl RecordOptions {
    /// From settings over a list that includes [`RECORD_OPTIONS`].
    pub fn from_settings(s: &Settings) -> Result<Self> {
        let start_ms: i64 = s.parse("start_ms")?;
        let domain = if s.get("domain") == "cdc" { Domain::Cdc } else { Domain::Telemetry };
        let format = s.get("format");
        let fits = match domain {
            Domain::Telemetry => ["auto", "proto", "avro", "json"].contains(&format),
            Domain::Cdc => ["auto", "csv", "dms"].contains(&format),
        };
        if !fits {
            return Err(crate::base::error::Error::Config(format!(
                "bad value {format:?} for `format` with domain {}: allowed is {}",
                s.get("domain"),
                if domain == Domain::Cdc { "csv|dms" } else { "proto|avro|json" }
            )));
        }
        if domain == Domain::Cdc && s.get("corrupt") == "true" {
            return Err(crate::base::error::Error::Config("`corrupt=true` applies to domain telemetry only".into()));
        }
        Ok(Self {
            domain,
            source: match format {
                "avro" => Source::Avro,
                "json" => Source::Json,
                _ => Source::Proto,
            },
            cdc_format: if format == "dms" { CdcFormat::Dms } else { CdcFormat::Csv },
            vehicles: s.parse("vehicles")?,
            accounts: s.parse("accounts")?,
            first_seq: s.parse("first_seq")?,
            keyed: match s.get("keyed") {
                "true" => true,
                "false" => false,
                _ => domain == Domain::Telemetry,
            },
            seed: s.parse("seed")?,
            start_ms: if start_ms == 0 { chrono::Utc::now().timestamp_millis() - 2 * 3_600_000 } else { start_ms },
            corrupt: s.get("corrupt") == "true",
            topic: match (s.get("topic"), domain) {
                ("auto", Domain::Telemetry) => "vehicle-telemetry".to_string(),
                ("auto", Domain::Cdc) => "bank-accounts-cdc".to_string(),
                (topic, _) => topic.to_string(),
            },
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

/// What a generated event (or a produced stream) holds, so tests can check the tables.
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
    /// cdc: changes by operation code (I, U, D).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub changes: BTreeMap<&'static str, usize>,
}

impl Expectation {
    /// Count one record that was sent.
    pub fn count(&mut self, record: &GeneratedRecord) {
        self.records += 1;
        match record.kind {
            RecordKind::Reading { late, speed_kmh } => {
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
            RecordKind::Change { op } => {
                self.valid += 1;
                *self.changes.entry(op).or_default() += 1;
            }
        }
    }
}

/// A generated event and what it holds.
pub struct Generated {
    pub event: serde_json::Value,
    pub expectation: Expectation,
}

const MODELS: &[&str] = &["Model-E", "Volt-X", "Ion-3", "Aero-S", "Pulse-7"];

/// How many recent valid readings a re-send may repeat (bounds memory on endless streams).
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
    Reading {
        late: bool,
        speed_kmh: i32,
    },
    /// A verbatim re-send of an earlier reading.
    Resend {
        speed_kmh: i32,
    },
    Corrupt,
    /// A CDC change, by operation code.
    Change {
        op: &'static str,
    },
}

/// One generated record: its key's id (vehicle or account) and its value.
#[derive(Debug, Clone)]
pub struct GeneratedRecord {
    pub id: i64,
    pub value: Vec<u8>,
    pub kind: RecordKind,
}

impl GeneratedRecord {
    /// The Kafka key: the vehicle or account id in decimal.
    pub fn key(&self) -> Vec<u8> {
        self.id.to_string().into_bytes()
    }
}

/// The endless record stream of one domain.
pub struct RecordStream {
    opts: RecordOptions,
    rng: SmallRng,
    /// cdc only.
    simulator: Option<CdcSimulator>,
    /// Recent readings (vehicle, value, speed), for verbatim re-sends.
    recent: VecDeque<(i64, Vec<u8>, i32)>,
    index: i64,
}

impl RecordStream {
    pub fn new(opts: &RecordOptions) -> Self {
        let simulator = (opts.domain == Domain::Cdc).then(|| {
            CdcSimulator::new(SimulatorOptions {
                accounts: opts.accounts,
                seed: opts.seed,
                first_seq: opts.first_seq,
                start_us: opts.start_ms * 1000,
                ..Default::default()
            })
        });
        Self { rng: SmallRng::seed_from_u64(opts.seed), opts: opts.clone(), simulator, recent: VecDeque::new(), index: 0 }
    }

    fn next_reading(&mut self, i: i64) -> GeneratedRecord {
        let (opts, rng) = (&self.opts, &mut self.rng);
        if !self.recent.is_empty() && rng.random_bool(0.002) {
            let (id, value, speed_kmh) = self.recent[rng.random_range(0..self.recent.len())].clone();
            return GeneratedRecord { id, value, kind: RecordKind::Resend { speed_kmh } };
        }
        if opts.corrupt && rng.random_bool(0.001) {
            let id = rng.random_range(0..opts.vehicles);
            return GeneratedRecord { id, value: corrupt_value(opts.source, rng), kind: RecordKind::Corrupt };
        }
        let vehicle = rng.random_range(0..opts.vehicles);
        let late = rng.random_bool(0.001);
        // Readings advance ~1 ms per record; a late one is an hour behind.
        let event_ms = opts.start_ms + i - if late { 3_600_000 } else { 0 };
        let reading = Reading {
            vehicle_id: vehicle,
            event_time_us: event_ms * 1000,
            model: MODELS[(vehicle as usize) % MODELS.len()].to_string(),
            speed_kmh: rng.random_range(0..180),
            soc_pct: rng.random_range(0..=100),
            odometer_km: 10_000 + vehicle * 7 + i / 100,
            charging: rng.random_bool(0.1),
        };
        let value = codec::encode(opts.source, &reading);
        if self.recent.len() == RESEND_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back((vehicle, value.clone(), reading.speed_kmh));
        GeneratedRecord { id: vehicle, value, kind: RecordKind::Reading { late, speed_kmh: reading.speed_kmh } }
    }
}

impl Iterator for RecordStream {
    type Item = GeneratedRecord;

    fn next(&mut self) -> Option<GeneratedRecord> {
        let i = self.index;
        self.index += 1;
        Some(match &mut self.simulator {
            Some(simulator) => {
                let change = simulator.next_change();
                GeneratedRecord {
                    id: change.account_id,
                    value: change.value(self.opts.cdc_format).into_bytes(),
                    kind: RecordKind::Change { op: change.op.code() },
                }
            }
            None => self.next_reading(i),
        })
    }
}

/// Generate one event.
pub fn generate(opts: &GeneratorOptions) -> Result<Generated> {
    let record_opts = &opts.record;
    let mut partitions: BTreeMap<TopicPartition, Vec<KafkaRecordIn>> = BTreeMap::new();
    let mut exp = Expectation::default();
    // The event's fixed part (source, ARN, servers, braces).
    let mut approx_bytes = 300usize;
    let target = if opts.max_bytes > 0 { usize::MAX } else { opts.records };
    for (i, generated) in RecordStream::new(record_opts).take(target).enumerate() {
        let spread_by = if record_opts.keyed { generated.id } else { i as i64 };
        let tp = TopicPartition { topic: record_opts.topic.clone(), partition: (spread_by % i64::from(opts.partitions)) as i32 };
        let offset = opts.start_offset + partitions.get(&tp).map_or(0, Vec::len) as i64;
        let record = KafkaRecordIn {
            offset,
            timestamp_ms: record_opts.start_ms + i as i64,
            timestamp_type: None,
            key: record_opts.keyed.then(|| generated.key().into()),
            value: Some(generated.value.clone().into()),
            value_error: None,
            headers: crate::model::event::Headers::from_iter([("producer", b"icestream-gen")]),
            value_schema: None,
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
    }
    let event = event_json("aws:kafka", LOCAL_CLUSTER_ARN, "127.0.0.1:9092", &partitions);
    exp.bytes = event.to_string().len();
    Ok(Generated { event, expectation: exp })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::parse_event;

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
    fn cdc_events_round_robin_and_check_the_format() {
        let opts = GeneratorOptions::from_args(["domain=cdc", "records=1000", "accounts=100"]).unwrap();
        let g = generate(&opts).unwrap();
        let parsed = parse_event(g.event.to_string().as_bytes()).unwrap();
        let sizes: Vec<usize> = parsed.partitions.values().map(Vec::len).collect();
        assert_eq!(sizes, [250, 250, 250, 250]);
        assert_eq!(g.expectation.changes.values().sum::<usize>(), 1000);
        let err = GeneratorOptions::from_args(["domain=cdc", "format=proto"]).unwrap_err().to_string();
        assert!(err.contains("`format`") && err.contains("csv|dms"), "{err}");
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
