//! The wall clock behind age decisions (hot partitions, snapshot and tombstone retention, the
//! orphan margin), injectable so tests decide "now" instead of depending on when they run.

use std::time::{Duration, SystemTime};

/// Where "now" comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Clock {
    #[default]
    System,
    /// A fixed instant (tests).
    Fixed(SystemTime),
}

impl Clock {
    /// A clock fixed at `ms` milliseconds after the epoch.
    pub fn at_ms(ms: i64) -> Self {
        Clock::Fixed(SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
    }

    pub fn now(&self) -> SystemTime {
        match self {
            Clock::System => SystemTime::now(),
            Clock::Fixed(t) => *t,
        }
    }

    /// Now as epoch microseconds (0 before the epoch).
    pub fn now_us(&self) -> i64 {
        self.now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
    }

    pub fn now_ms(&self) -> i64 {
        self.now_us() / 1000
    }
}
