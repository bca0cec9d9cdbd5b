//! A bank-account change feed like the reference's DMS source: inserts for new accounts,
//! updates and deletes of live ones, 80% of changes on 5% of the accounts (hot keys), and a
//! strictly increasing `seq`. Deterministic for a seed. Producers and `gen-event domain=cdc`
//! both take their changes from here; spreading them over partitions (keyed or round-robin)
//! is the caller's choice. Each change is written as the reference `accounts` pipeline reads
//! it: a CSV line (`envelope = "csv"`) or the DMS Kafka target's JSON (`envelope = "dms"`).

use chrono::{DateTime, SecondsFormat, Utc};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

pub use crate::modes::upsert::envelope::Op;

/// How a change's record value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CdcFormat {
    /// `operation,account_id,balance,last_updated,seq`.
    Csv,
    /// `{"data":{..},"metadata":{"operation":..}}`.
    Dms,
}

/// One change of one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub op: Op,
    pub account_id: i64,
    /// Integer cents; absent only on deletes.
    pub balance_cents: Option<i64>,
    pub last_updated_us: i64,
    /// Monotonic source sequence: orders changes of a key.
    pub seq: i64,
}

impl Change {
    /// The record value in `format`.
    pub fn value(&self, format: CdcFormat) -> String {
        match format {
            CdcFormat::Csv => self.to_csv(),
            CdcFormat::Dms => self.to_dms_json("seq"),
        }
    }

    /// The CSV line (no newline).
    pub fn to_csv(&self) -> String {
        format!(
            "{},{},{},{},{}",
            self.op.code(),
            self.account_id,
            self.balance_cents.map(|b| b.to_string()).unwrap_or_default(),
            format_time(self.last_updated_us),
            self.seq
        )
    }

    /// The DMS Kafka-target JSON, with the ordering column named `order_column`.
    pub fn to_dms_json(&self, order_column: &str) -> String {
        let operation = match self.op {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
        };
        let mut data = serde_json::Map::new();
        data.insert("account_id".into(), self.account_id.into());
        data.insert("balance".into(), self.balance_cents.map(Value::from).unwrap_or(Value::Null));
        data.insert("last_updated".into(), format_time(self.last_updated_us).into());
        data.insert(order_column.into(), self.seq.into());
        serde_json::json!({
            "data": data,
            "metadata": {
                "timestamp": format_time(self.last_updated_us),
                "record-type": "data",
                "operation": operation,
                "partition-key-type": "primary-key",
                "schema-name": "bank",
                "table-name": "accounts",
            }
        })
        .to_string()
    }
}

fn format_time(us: i64) -> String {
    DateTime::<Utc>::from_timestamp_micros(us).map(|t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true)).unwrap_or_else(|| us.to_string())
}

/// How the feed looks.
#[derive(Debug, Clone)]
pub struct SimulatorOptions {
    /// Distinct account ids (`0..accounts`).
    pub accounts: i64,
    pub seed: u64,
    /// `seq` of the first change.
    pub first_seq: i64,
    /// `last_updated` of the first change, epoch microseconds; later ones advance 1 ms each.
    pub start_us: i64,
    /// Share of changes that are deletes of live accounts.
    pub delete_ratio: f64,
}

impl Default for SimulatorOptions {
    fn default() -> Self {
        Self { accounts: 10_000, seed: 42, first_seq: 1, start_us: 1_764_460_800_000_000, delete_ratio: 0.1 }
    }
}

/// Share of changes that go to the hot accounts, and the share of accounts that are hot.
pub const HOT_CHANGE_SHARE: f64 = 0.8;
pub const HOT_ACCOUNT_SHARE: f64 = 0.05;

/// The change generator.
pub struct CdcSimulator {
    opts: SimulatorOptions,
    rng: SmallRng,
    live: Vec<bool>,
    next_seq: i64,
}

impl CdcSimulator {
    pub fn new(opts: SimulatorOptions) -> Self {
        let accounts = opts.accounts.max(1);
        Self {
            rng: SmallRng::seed_from_u64(opts.seed),
            live: vec![false; accounts as usize],
            next_seq: opts.first_seq,
            opts: SimulatorOptions { accounts, ..opts },
        }
    }

    /// The next change in source order.
    pub fn next_change(&mut self) -> Change {
        let hot = ((self.opts.accounts as f64 * HOT_ACCOUNT_SHARE).ceil() as i64).max(1);
        let account_id = if self.rng.random_bool(HOT_CHANGE_SHARE) {
            self.rng.random_range(0..hot)
        } else {
            self.rng.random_range(0..self.opts.accounts)
        };
        let live = &mut self.live[account_id as usize];
        let op = if !*live {
            Op::Insert
        } else if self.rng.random_bool(self.opts.delete_ratio) {
            Op::Delete
        } else {
            Op::Update
        };
        *live = op != Op::Delete;
        let seq = self.next_seq;
        self.next_seq += 1;
        Change {
            op,
            account_id,
            balance_cents: (op != Op::Delete).then(|| self.rng.random_range(-50_000..10_000_000)),
            last_updated_us: self.opts.start_us + (seq - self.opts.first_seq) * 1000,
            seq,
        }
    }

    /// The next `n` changes.
    pub fn take(&mut self, n: usize) -> Vec<Change> {
        (0..n).map(|_| self.next_change()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_keys_ops_and_seq() {
        let mut sim = CdcSimulator::new(SimulatorOptions { accounts: 1000, ..Default::default() });
        let changes = sim.take(20_000);
        assert!(changes.windows(2).all(|w| w[1].seq == w[0].seq + 1));
        let hot = changes.iter().filter(|c| c.account_id < 50).count();
        assert!((15_000..17_500).contains(&hot), "{hot} of 20000 on the hot 5%");
        let deletes = changes.iter().filter(|c| c.op == Op::Delete).count();
        assert!(deletes > 500, "{deletes}");
        // An account's first change, and its first after a delete, is an insert.
        let mut live = vec![false; 1000];
        for c in &changes {
            assert_eq!(c.op == Op::Insert, !live[c.account_id as usize], "{c:?}");
            live[c.account_id as usize] = c.op != Op::Delete;
        }
    }
}
