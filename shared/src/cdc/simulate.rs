//! A bank-account change feed like the reference's DMS source: inserts for new accounts,
//! updates and deletes of live ones, 80% of changes on 5% of the accounts (hot keys), and a
//! strictly increasing `seq`. Deterministic for a seed. Producers and `gen-event domain=cdc`
//! both take their changes from here; spreading them over partitions (keyed or round-robin)
//! is the caller's choice.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::change::{Change, Op};

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
