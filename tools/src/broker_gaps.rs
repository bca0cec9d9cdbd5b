//! Why offsets are missing from a table, as the broker tells it (`icestream audit
//! bootstrap=...`): below the partition's log start offset they were deleted by retention (or
//! DeleteRecords) before anyone read them; a record the broker still serves was dropped by
//! dedup, or else lost; an offset the broker skips is compacted away (a compacted topic) or a
//! transaction marker / aborted record (any other topic).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use icestream::services::audit::{Gap, GapCause};
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

/// At most this many offsets of one gap are fetched to look at; the rest keep no cause.
pub const FETCH_MAX: i64 = 100_000;

const TIMEOUT: Duration = Duration::from_secs(10);

/// What the broker said about one partition.
pub struct BrokerFacts {
    /// The partition's log start offset (earliest offset still held).
    pub log_start: i64,
    /// Offsets up to this one were fetched; later ones keep no cause.
    pub looked_up_to: i64,
    /// Offsets the broker served (read-committed) in the range fetched.
    pub present: BTreeSet<i64>,
    /// The topic's `cleanup.policy` includes `compact`.
    pub compacted: bool,
    /// The table's pipeline drops repeats of its key.
    pub dedup: bool,
}

impl BrokerFacts {
    fn cause(&self, offset: i64) -> Option<GapCause> {
        if offset < self.log_start {
            Some(GapCause::DeletedByRetention)
        } else if offset > self.looked_up_to {
            None
        } else if self.present.contains(&offset) {
            Some(if self.dedup { GapCause::DroppedByDedup } else { GapCause::Lost })
        } else if self.compacted {
            Some(GapCause::CompactedAway)
        } else {
            Some(GapCause::TransactionMarkers)
        }
    }

    /// `gap` split into runs of one cause. Offset by offset only where the broker was asked
    /// (at most [`FETCH_MAX`]): below the log start and past the fetched range are one run each.
    pub fn split(&self, gap: &Gap) -> Vec<Gap> {
        let mut out: Vec<Gap> = Vec::new();
        let mut push = |from: i64, to: i64, cause: Option<GapCause>| match out.last_mut() {
            Some(last) if last.cause == cause && last.to + 1 == from => last.to = to,
            _ => out.push(Gap { topic: gap.topic.clone(), partition: gap.partition, from, to, cause }),
        };
        let (looked_from, looked_to) = (gap.from.max(self.log_start), gap.to.min(self.looked_up_to));
        if gap.from < self.log_start {
            push(gap.from, gap.to.min(self.log_start - 1), self.cause(gap.from));
        }
        for offset in looked_from..=looked_to {
            push(offset, offset, self.cause(offset));
        }
        if gap.to > self.looked_up_to.max(self.log_start - 1) {
            let from = looked_to.max(looked_from - 1) + 1;
            push(from, gap.to, None);
        }
        out
    }
}

/// Asks one broker about gaps.
pub struct BrokerGaps {
    consumer: BaseConsumer,
    admin: AdminClient<DefaultClientContext>,
    /// Whether the table's pipeline drops repeats of its key (then a record still on the
    /// broker was dropped by dedup, not lost).
    dedup: bool,
}

impl BrokerGaps {
    pub fn connect(bootstrap: &str, dedup: bool) -> Result<Self> {
        let mut config = crate::kafka::client_config(bootstrap);
        config
            .set("group.id", "icestream-audit")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", "read_committed");
        let consumer: BaseConsumer = config.create().with_context(|| format!("Kafka consumer for {bootstrap}"))?;
        let admin: AdminClient<DefaultClientContext> =
            crate::kafka::client_config(bootstrap).create().with_context(|| format!("Kafka admin client for {bootstrap}"))?;
        Ok(Self { consumer, admin, dedup })
    }

    /// The gap split into sub-ranges with their causes.
    pub async fn explain(&self, gap: &Gap) -> Result<Vec<Gap>> {
        let (low, _high) = self
            .consumer
            .fetch_watermarks(&gap.topic, gap.partition, TIMEOUT)
            .with_context(|| format!("log start offset of {}-{}", gap.topic, gap.partition))?;
        let compacted = self.compacted(&gap.topic).await;
        let fetch_to = gap.to.min(gap.from.max(low) + FETCH_MAX - 1);
        let present = if fetch_to >= gap.from.max(low) { self.present(gap, gap.from.max(low), fetch_to)? } else { BTreeSet::new() };
        let facts = BrokerFacts { log_start: low, looked_up_to: fetch_to, present, compacted, dedup: self.dedup };
        Ok(facts.split(gap))
    }

    /// The offsets in `from..=to` the broker serves (read-committed).
    fn present(&self, gap: &Gap, from: i64, to: i64) -> Result<BTreeSet<i64>> {
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&gap.topic, gap.partition, Offset::Offset(from))?;
        self.consumer.assign(&assignment)?;
        let mut present = BTreeSet::new();
        let started = Instant::now();
        while started.elapsed() < TIMEOUT {
            match self.consumer.poll(Duration::from_millis(200)) {
                Some(Ok(message)) => {
                    if message.offset() > to {
                        break;
                    }
                    present.insert(message.offset());
                }
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) => return Err(e).with_context(|| format!("fetching {}-{} from offset {from}", gap.topic, gap.partition)),
                None => {
                    // Nothing more within the poll interval: the partition end is reached when
                    // the position has passed the range or the log has no more records.
                    let (_, high) = self.consumer.fetch_watermarks(&gap.topic, gap.partition, TIMEOUT)?;
                    if present.last().is_some_and(|l| *l + 1 >= high) || high <= from {
                        break;
                    }
                }
            }
        }
        Ok(present)
    }

    /// Whether the topic's `cleanup.policy` includes `compact` (unknown counts as not).
    async fn compacted(&self, topic: &str) -> bool {
        let resources = [ResourceSpecifier::Topic(topic)];
        let Ok(results) = self.admin.describe_configs(&resources, &AdminOptions::new().request_timeout(Some(TIMEOUT))).await else {
            return false;
        };
        results
            .into_iter()
            .flatten()
            .any(|config| config.get("cleanup.policy").and_then(|e| e.value.as_deref()).is_some_and(|v| v.contains("compact")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_offset_gets_the_cause_the_broker_facts_give() {
        let gap = Gap { topic: "t".into(), partition: 0, from: 5, to: 16, cause: None };
        let facts = |compacted, dedup| BrokerFacts { log_start: 8, looked_up_to: 14, present: [10, 11].into(), compacted, dedup };
        let runs = |f: BrokerFacts| f.split(&gap).into_iter().map(|g| (g.from, g.to, g.cause)).collect::<Vec<_>>();
        use GapCause::*;
        assert_eq!(
            runs(facts(false, false)),
            [
                (5, 7, Some(DeletedByRetention)),
                (8, 9, Some(TransactionMarkers)),
                (10, 11, Some(Lost)),
                (12, 14, Some(TransactionMarkers)),
                (15, 16, None)
            ]
        );
        assert_eq!(runs(facts(true, true))[1..3], [(8, 9, Some(CompactedAway)), (10, 11, Some(DroppedByDedup))]);
        // A billion missing offsets: only the fetched ones are looked at one by one.
        let huge = Gap { topic: "t".into(), partition: 0, from: 0, to: 1_000_000_000, cause: None };
        let facts = BrokerFacts { log_start: 999_999_990, looked_up_to: 999_999_995, present: [].into(), compacted: false, dedup: false };
        let runs: Vec<_> = facts.split(&huge).into_iter().map(|g| (g.from, g.to, g.cause)).collect();
        assert_eq!(
            runs,
            [
                (0, 999_999_989, Some(DeletedByRetention)),
                (999_999_990, 999_999_995, Some(TransactionMarkers)),
                (999_999_996, 1_000_000_000, None)
            ]
        );
    }
}
