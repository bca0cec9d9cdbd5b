//! `icestream audit TABLE` and the maintenance action `audit`: exactly-once proved from the
//! table itself. Every Kafka offset must be in exactly one of the table and its dead-letter
//! table (a replayed dead letter, marked by [`crate::engine::commit::replayed`], is in both and counts
//! once), no row may sit above its partition's offset watermark (a redelivery would add it
//! again), and the offsets between a partition's first held offset and its watermark that
//! neither table holds are listed as gaps. Only the lineage columns are read.
//!
//! Offsets the writer's dedup dropped are recorded in the table with the commit
//! ([`crate::engine::commit::deduped`]) and listed as `deduplicated`. Other gaps' causes need
//! the broker (compacted away, transaction markers, deleted by retention before they were
//! read): the CLI asks it (`bootstrap=`) and fills them in with [`AuditReport::explain_gaps`].

pub mod offsets;

use std::collections::BTreeMap;
use std::time::Instant;

use iceberg::TableIdent;
use serde::Serialize;

use crate::base::error::{Error, Result};
use crate::engine::catalog::Catalogs;
use crate::engine::commit::Watermarks;
use crate::engine::commit::deduped::DedupedOffsets;
use crate::engine::commit::gaps::TakenGaps;
use crate::engine::commit::replayed::ReplayedOffsets;
use crate::model::event::TopicPartition;
use crate::model::pipeline::PipelineTables;
use crate::model::pipeline::upsert::changelog_name;
use crate::model::tables::dead_letter_name;
use offsets::{HeldOffsets, OffsetSet};

/// At most this many duplicates and gap ranges are listed (all are counted).
pub const LISTED_MAX: usize = 1000;

/// The audit of one table and its dead-letter table.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditReport {
    pub table: String,
    pub dead_letter_table: String,
    /// `pass` or `fail`: fail on a duplicate, a row above its watermark, a replay mark without
    /// its row, a gap the broker shows as lost, or one the queued committer skipped that the
    /// broker has not explained.
    pub verdict: Verdict,
    pub rows: u64,
    pub dead_letters: u64,
    /// Marked replayed: dead letters replayed into the table (held by both, counted once) and
    /// records of discarded batches recovered into it (`crate::services::recover`).
    pub replayed: u64,
    /// Offsets held more than once (data and dead letters together, replays excepted).
    pub duplicate_offsets: u64,
    pub duplicates: Vec<Duplicate>,
    /// Offsets in neither table between a partition's first held offset and its watermark.
    pub gap_offsets: u64,
    pub gaps: Vec<Gap>,
    /// Dead letters above the table's watermark but within the dead-letter table's: a crash
    /// between the two commits of one batch, settled by its redelivery. Not a failure.
    pub in_flight: u64,
    /// What else broke the rules, one sentence each.
    pub problems: Vec<String>,
    pub partitions: Vec<PartitionAudit>,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    #[default]
    Pass,
    Fail,
}

/// One topic-partition's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionAudit {
    pub topic_partition: String,
    pub first_offset: Option<i64>,
    pub highest_offset: Option<i64>,
    pub watermark: Option<i64>,
    pub dead_letter_watermark: Option<i64>,
    pub rows: u64,
    pub dead_letters: u64,
    pub replayed: u64,
    pub gap_offsets: u64,
}

/// An offset held more than once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Duplicate {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// Copies in the table and in the dead-letter table.
    pub in_table: u32,
    pub in_dead_letters: u32,
}

/// Offsets `from..=to` of a partition that neither table holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gap {
    pub topic: String,
    pub partition: i32,
    pub from: i64,
    pub to: i64,
    /// Why, where the broker could tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<GapCause>,
}

/// Why offsets are in neither table, as the broker tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GapCause {
    /// Below the partition's log start offset: retention (or DeleteRecords) removed them; the
    /// broker cannot say more.
    DeletedByRetention,
    /// The broker skips them on a compacted topic.
    CompactedAway,
    /// The broker skips them on a topic that is not compacted: transaction markers or records
    /// of aborted transactions, never delivered to consumers.
    TransactionMarkers,
    /// The broker holds the records and the pipeline dedups on its key: dropped as repeats.
    DroppedByDedup,
    /// The writer's dedup dropped them as repeats of a key, and recorded them in the table with
    /// the commit (no broker needed).
    Deduplicated,
    /// The broker holds the records and nothing explains their absence: lost. Fails the audit.
    Lost,
    /// The queued committer moved the watermark past them after waiting for a request that did
    /// not come (recorded in the table as an open gap, which a late request still fills). Not
    /// a proof that no record was there: fails the audit unless the broker explains them.
    SkippedByCommitter,
}

impl Gap {
    pub fn count(&self) -> u64 {
        (self.to - self.from + 1) as u64
    }
}

/// The tables an audit reads: the one that holds each Kafka record once, and the dead-letter
/// table beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditTarget {
    pub table: String,
    pub dead_letter: String,
}

impl AuditTarget {
    /// What auditing `table` reads, as the pipelines define it. An upsert table keeps one row
    /// per key (the changes it superseded are gone), so it is audited through its changelog,
    /// which keeps each record once; without a changelog it cannot be audited, and says so.
    pub fn of(pipelines: &[PipelineTables], table: &str) -> Result<Self> {
        for p in pipelines {
            if p.table == table && p.upsert {
                return match &p.changelog {
                    Some(changelog) => Ok(Self { table: changelog.clone(), dead_letter: p.dead_letter() }),
                    None => Err(Error::Config(format!(
                        "`{table}` is an upsert table: it keeps one row per key, so the Kafka records it took are not all in it; set `changelog = true` on pipeline `{table}` to audit it through `{}`",
                        changelog_name(table)
                    ))),
                };
            }
            if p.table == table || p.changelog.as_deref() == Some(table) {
                return Ok(Self { table: table.to_string(), dead_letter: p.dead_letter() });
            }
        }
        Ok(Self::plain(table))
    }

    /// `table` against `<table>_dead_letter`.
    pub fn plain(table: &str) -> Self {
        Self { table: table.to_string(), dead_letter: dead_letter_name(table) }
    }
}

/// Audit `table` (name in the catalog's namespace) against `<table>_dead_letter`.
pub async fn audit(catalogs: &Catalogs, table: &str) -> Result<AuditReport> {
    audit_of(catalogs, &AuditTarget::plain(table)).await
}

/// Audit `target.table` against `target.dead_letter`.
pub async fn audit_of(catalogs: &Catalogs, target: &AuditTarget) -> Result<AuditReport> {
    let started = Instant::now();
    let data_ident = catalogs.ident(&target.table);
    let dead_letter_ident: TableIdent = catalogs.ident(&target.dead_letter);
    let data = catalogs.load(&data_ident).await?;
    let dead_letter = catalogs.load(&dead_letter_ident).await?;
    let (held, held_dead) = futures::try_join!(HeldOffsets::read(&data), HeldOffsets::read(&dead_letter))?;
    let properties = data.metadata().properties();
    let tables = Tables {
        data: &held,
        dead_letters: &held_dead,
        marks: &Watermarks::from_properties(properties),
        dead_letter_marks: &Watermarks::from_properties(dead_letter.metadata().properties()),
        replayed: &ReplayedOffsets::from_properties(properties),
        skipped: &TakenGaps::from_properties(properties),
        deduped: &DedupedOffsets::from_properties(properties),
    };
    let mut report = check(&tables);
    report.table = data_ident.to_string();
    report.dead_letter_table = dead_letter_ident.to_string();
    report.duration_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// What the audit compares.
pub struct Tables<'a> {
    pub data: &'a HeldOffsets,
    pub dead_letters: &'a HeldOffsets,
    pub marks: &'a Watermarks,
    pub dead_letter_marks: &'a Watermarks,
    pub replayed: &'a ReplayedOffsets,
    /// Offsets the queued committer moved past without a request bringing them.
    pub skipped: &'a TakenGaps,
    /// Offsets the writer's dedup dropped.
    pub deduped: &'a DedupedOffsets,
}

/// The audit's rules on held offsets, watermarks and replay marks.
pub fn check(t: &Tables<'_>) -> AuditReport {
    let mut report = AuditReport::default();
    let mut partitions: Vec<&TopicPartition> = t
        .data
        .0
        .keys()
        .chain(t.dead_letters.0.keys())
        .chain(t.marks.0.keys())
        .chain(t.replayed.0.keys())
        .chain(t.skipped.0.keys())
        .collect();
    partitions.sort();
    partitions.dedup();
    let empty = OffsetSet::default();
    for tp in partitions {
        let data = t.data.0.get(tp).unwrap_or(&empty);
        let dead = t.dead_letters.0.get(tp).unwrap_or(&empty);
        let (mark, dead_mark) = (t.marks.get(tp), t.dead_letter_marks.get(tp));
        let mut p = PartitionAudit {
            topic_partition: tp.to_string(),
            first_offset: None,
            highest_offset: None,
            watermark: mark,
            dead_letter_watermark: dead_mark,
            rows: data.rows(),
            dead_letters: dead.rows(),
            replayed: 0,
            gap_offsets: 0,
        };
        let mut previous: Option<i64> = None;
        // Offsets in neither table, before the committer's records are laid over them.
        let mut missing: Vec<(i64, i64)> = Vec::new();
        // Offsets held above the watermark (or without one): a redelivery would add them again.
        let mut above: Vec<i64> = Vec::new();
        for (offset, in_table, in_dead) in merge_counts(data, dead) {
            p.first_offset.get_or_insert(offset);
            p.highest_offset = Some(offset);
            let replayed = t.replayed.contains(tp, offset);
            // A replayed dead letter is in both tables; a recovered discarded batch's record
            // (`crate::services::recover`) only in the table: marked, each counts once.
            if replayed && in_table == 1 && in_dead <= 1 {
                p.replayed += 1;
            } else if in_table + in_dead > 1 {
                report.duplicate_offsets += 1;
                if report.duplicates.len() < LISTED_MAX {
                    report.duplicates.push(Duplicate {
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                        offset,
                        in_table,
                        in_dead_letters: in_dead,
                    });
                }
            }
            match mark {
                Some(w) if offset > w && in_table == 0 && dead_mark.is_some_and(|d| offset <= d) => report.in_flight += 1,
                Some(w) if offset > w => above.push(offset),
                None if in_table > 0 => above.push(offset),
                _ => {}
            }
            if let Some(prev) = previous
                && offset > prev + 1
                && mark.is_some_and(|w| prev < w)
            {
                missing.push((prev + 1, (offset - 1).min(mark.unwrap_or(offset - 1))));
            }
            previous = Some(offset);
        }
        // The tail: the watermark covers records that neither table holds.
        if let (Some(prev), Some(w)) = (previous, mark)
            && w > prev
        {
            missing.push((prev + 1, w));
        }
        // The committer's records also name what lies before the first held offset, which no
        // read of the tables can see (a partition's first batch skipped).
        let skipped: Vec<(i64, i64)> = t.skipped.0.get(tp).into_iter().flatten().map(|g| (g.first, g.last)).collect();
        let before_first = p.first_offset.unwrap_or(i64::MAX);
        missing.extend(skipped.iter().filter(|(from, _)| *from < before_first).map(|(from, to)| (*from, (*to).min(before_first - 1))));
        missing.sort_unstable();
        let deduped = t.deduped.0.get(tp).map_or(&[][..], Vec::as_slice);
        for (from, to) in missing {
            for (from, to, by_committer) in split_by(from, to, &skipped) {
                if by_committer {
                    p.gap_offsets += add_gap(&mut report, tp, from, to, Some(GapCause::SkippedByCommitter));
                    continue;
                }
                for (from, to, by_dedup) in split_by(from, to, deduped) {
                    p.gap_offsets += add_gap(&mut report, tp, from, to, by_dedup.then_some(GapCause::Deduplicated));
                }
            }
        }
        if let (Some(first), Some(last)) = (above.first(), above.last()) {
            let watermark = mark.map_or("no watermark".to_string(), |w| format!("the watermark {w}"));
            report.problems.push(format!(
                "{tp}: {} offset(s) from {first} to {last} are held above {watermark}: a redelivery would add them again",
                above.len()
            ));
        }
        let unheld: Vec<&i64> = t.replayed.0.get(tp).into_iter().flatten().filter(|o| !data.contains(**o)).collect();
        if let (Some(first), Some(last)) = (unheld.first(), unheld.last()) {
            report.problems.push(format!(
                "{tp}: {} offset(s) from {first} to {last} are marked replayed but the table does not hold them",
                unheld.len()
            ));
        }
        report.rows += p.rows;
        report.dead_letters += p.dead_letters;
        report.replayed += p.replayed;
        report.partitions.push(p);
    }
    report.problems.dedup();
    report.verdict = verdict(&report);
    report
}

fn add_gap(report: &mut AuditReport, tp: &TopicPartition, from: i64, to: i64, cause: Option<GapCause>) -> u64 {
    let gap = Gap { topic: tp.topic.clone(), partition: tp.partition, from, to, cause };
    let count = gap.count();
    report.gap_offsets += count;
    if report.gaps.len() < LISTED_MAX {
        report.gaps.push(gap);
    }
    count
}

/// `from..=to` cut at the edges of `ranges` (sorted, disjoint): each piece says whether it lies
/// in one of them.
fn split_by(from: i64, to: i64, ranges: &[(i64, i64)]) -> Vec<(i64, i64, bool)> {
    let mut out = Vec::new();
    let mut at = from;
    for &(first, last) in ranges.iter().filter(|(first, last)| *first <= to && from <= *last) {
        if at < first {
            out.push((at, first - 1, false));
        }
        let (start, end) = (at.max(first), to.min(last));
        out.push((start, end, true));
        at = end + 1;
    }
    if at <= to {
        out.push((at, to, false));
    }
    out
}

fn verdict(report: &AuditReport) -> Verdict {
    let unproven = report.gaps.iter().any(|g| matches!(g.cause, Some(GapCause::Lost | GapCause::SkippedByCommitter)));
    if report.duplicate_offsets > 0 || !report.problems.is_empty() || unproven { Verdict::Fail } else { Verdict::Pass }
}

/// Distinct offsets of two sets in ascending order, with their number of copies in each.
fn merge_counts<'a>(a: &'a OffsetSet, b: &'a OffsetSet) -> impl Iterator<Item = (i64, u32, u32)> + 'a {
    let (mut a, mut b) = (a.iter().peekable(), b.iter().peekable());
    std::iter::from_fn(move || {
        let next = match (a.peek(), b.peek()) {
            (None, None) => return None,
            (Some(x), None) => x.0,
            (None, Some(y)) => y.0,
            (Some(x), Some(y)) => x.0.min(y.0),
        };
        let in_a = a.next_if(|x| x.0 == next).map_or(0, |x| x.1);
        let in_b = b.next_if(|y| y.0 == next).map_or(0, |y| y.1);
        Some((next, in_a, in_b))
    })
}

impl AuditReport {
    /// Replace each listed gap by the sub-ranges `explain` gives with their causes (the broker's
    /// view), then judge again: a gap the broker shows as lost fails the audit.
    pub fn explain_gaps<F>(&mut self, mut explain: F) -> Result<()>
    where
        F: FnMut(&Gap) -> Result<Vec<Gap>>,
    {
        let mut explained = Vec::with_capacity(self.gaps.len());
        for gap in &self.gaps {
            explained.extend(explain(gap)?);
        }
        self.gaps = explained;
        self.verdict = verdict(self);
        Ok(())
    }

    /// One sentence for people: the verdict and the figures behind it.
    pub fn verdict_line(&self) -> String {
        let mut causes: BTreeMap<String, u64> = BTreeMap::new();
        for gap in &self.gaps {
            let cause = gap.cause.and_then(|c| serde_json::to_value(c).ok()).and_then(|v| v.as_str().map(str::to_string));
            *causes.entry(cause.unwrap_or_else(|| "unexplained".into())).or_default() += gap.count();
        }
        let causes: Vec<String> = causes.iter().map(|(c, n)| format!("{n} {c}")).collect();
        format!(
            "audit {}: {} — {} rows, {} dead letters ({} replayed), {} partitions, {} duplicate offsets, {} gap offsets{}{}",
            self.table,
            if self.verdict == Verdict::Pass { "PASS" } else { "FAIL" },
            self.rows,
            self.dead_letters,
            self.replayed,
            self.partitions.len(),
            self.duplicate_offsets,
            self.gap_offsets,
            if causes.is_empty() { String::new() } else { format!(" ({})", causes.join(", ")) },
            if self.problems.is_empty() { String::new() } else { format!("; {}", self.problems.join("; ")) },
        )
    }
}

#[cfg(test)]
mod tests;
