//! The commit queue (SQS's semantics) and the Kafka feed (the event-source mapping's) the
//! simulation's actors see.

use icestream::engine::queue::Message;
use rand::Rng;
use rand::rngs::SmallRng;

/// Visibility timeout of the commit queue, in steps.
pub const VISIBILITY: u64 = 10;
pub const MAX_RECEIVES: u32 = 5;

// ------------------------------------------------------------------------------------ queue

#[derive(Debug, Clone)]
pub struct Queued {
    id: String,
    body: String,
    receives: u32,
    /// Step from which it can be received; in flight while above now after a receive.
    visible_at: u64,
}

/// SQS as the committer sees it: at-least-once, visibility timeouts, receive counts, a
/// dead-letter queue after `MAX_RECEIVES`; FIFO keeps order and blocks the (single) group
/// while one of its messages is in flight.
#[derive(Debug, Default)]
pub struct SimQueue {
    pub fifo: bool,
    pub messages: Vec<Queued>,
    pub dead: Vec<Queued>,
    pub sent: u64,
}

impl SimQueue {
    pub fn send(&mut self, body: String, now: u64) {
        self.sent += 1;
        self.messages.push(Queued { id: format!("m{}", self.sent), body, receives: 0, visible_at: now });
    }

    pub fn receive(&mut self, rng: &mut SmallRng, now: u64, max: usize) -> Vec<Message> {
        let mut order: Vec<usize> = (0..self.messages.len()).collect();
        if self.fifo {
            if self.messages.iter().any(|m| m.receives > 0 && m.visible_at > now) {
                return vec![]; // the group is blocked while a message is in flight
            }
        } else {
            for i in (1..order.len()).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
        }
        let mut taken = Vec::new();
        let mut to_dead = Vec::new();
        for i in order {
            if taken.len() >= max {
                break;
            }
            let m = &mut self.messages[i];
            if m.visible_at > now {
                if self.fifo {
                    break;
                }
                continue;
            }
            if m.receives >= MAX_RECEIVES {
                to_dead.push(i);
                continue;
            }
            m.receives += 1;
            m.visible_at = now + VISIBILITY;
            taken.push(Message { id: m.id.clone(), body: m.body.clone(), receive_count: m.receives, receipt: None });
        }
        to_dead.sort_unstable();
        for i in to_dead.into_iter().rev() {
            let m = self.messages.remove(i);
            self.dead.push(m);
        }
        taken
    }

    pub fn delete(&mut self, id: &str) {
        self.messages.retain(|m| m.id != id);
    }

    pub fn show_again_at(&mut self, id: &str, at: u64) {
        if let Some(m) = self.messages.iter_mut().find(|m| m.id == id) {
            m.visible_at = at;
        }
    }

    /// An operator's redrive: the dead-letter queue's messages back, counts reset.
    pub fn redrive(&mut self, now: u64) {
        for mut m in self.dead.drain(..) {
            m.receives = 0;
            m.visible_at = now;
            self.messages.push(m);
        }
    }
}

// ------------------------------------------------------------------------------------ feed

/// One partition's records (offsets; the missing ones are transaction markers) and the
/// mapping's position: batches from `cursor` until one succeeds.
#[derive(Debug)]
pub struct Partition {
    pub offsets: Vec<i64>,
    pub cursor: usize,
}

impl Partition {
    pub fn new(rng: &mut SmallRng, records: usize) -> Self {
        let mut offsets = Vec::with_capacity(records);
        let mut next = 0i64;
        for _ in 0..records {
            if rng.random_range(0..10) == 0 {
                next += 1; // a transaction marker
            }
            offsets.push(next);
            next += 1;
        }
        Self { offsets, cursor: 0 }
    }

    pub fn done(&self) -> bool {
        self.cursor >= self.offsets.len()
    }

    /// The next batch: from the cursor (sometimes from before it: a redelivery of what was
    /// already handled), of a size the seed picks (re-cut on every retry).
    pub fn batch(&self, rng: &mut SmallRng) -> (usize, usize) {
        let back = if rng.random_range(0..6) == 0 { rng.random_range(0..=self.cursor.min(6)) } else { 0 };
        let start = self.cursor - back;
        let size = if rng.random_range(0..5) == 0 { rng.random_range(0..40) } else { rng.random_range(0..8) };
        let end = (self.cursor.max(start + 1) + size).min(self.offsets.len());
        (start, end.max(start + 1).min(self.offsets.len()))
    }
}
