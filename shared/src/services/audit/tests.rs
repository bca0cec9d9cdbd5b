use super::*;

fn tp(p: i32) -> TopicPartition {
    TopicPartition { topic: "t".into(), partition: p }
}

fn held(entries: &[(i32, &[i64])]) -> HeldOffsets {
    let mut h = HeldOffsets::default();
    for (p, offsets) in entries {
        for o in *offsets {
            h.insert(&tp(*p), *o);
        }
    }
    h
}

fn marks(entries: &[(i32, i64)]) -> Watermarks {
    let mut w = Watermarks::default();
    for (p, o) in entries {
        w.advance(&tp(*p), *o);
    }
    w
}

fn run(data: &HeldOffsets, dead: &HeldOffsets, mark: &Watermarks, dead_mark: &Watermarks, replayed: &ReplayedOffsets) -> AuditReport {
    check(&Tables {
        data,
        dead_letters: dead,
        marks: mark,
        dead_letter_marks: dead_mark,
        replayed,
        skipped: &TakenGaps::default(),
        deduped: &Default::default(),
    })
}

/// Issue 51: the committer moved past a partition's first 331 offsets (and 10 more inside) with
/// no request bringing them. The tables alone cannot see the first ones; the records can.
/// Issue 46: the offsets the writer's dedup dropped are recorded with the commit; the audit
/// lists them as `deduplicated` (no broker asked) and the others stay unexplained.
#[test]
fn offsets_dedup_dropped_are_listed_as_deduplicated() {
    use crate::engine::commit::deduped::DedupedOffsets;
    let data = held(&[(0, &(0..10).chain(15..20).collect::<Vec<_>>())]);
    let mark = marks(&[(0, 19)]);
    let deduped = DedupedOffsets::of([(tp(0), 10), (tp(0), 11), (tp(0), 13)]);
    let none = HeldOffsets::default();
    let r = check(&Tables {
        data: &data,
        dead_letters: &none,
        marks: &mark,
        dead_letter_marks: &Watermarks::default(),
        replayed: &Default::default(),
        skipped: &Default::default(),
        deduped: &deduped,
    });
    let listed: Vec<(i64, i64, Option<GapCause>)> = r.gaps.iter().map(|g| (g.from, g.to, g.cause)).collect();
    let dedup = Some(GapCause::Deduplicated);
    assert_eq!(listed, [(10, 11, dedup), (12, 12, None), (13, 13, dedup), (14, 14, None)]);
    assert_eq!((r.verdict, r.gap_offsets), (Verdict::Pass, 5));
    assert!(r.verdict_line().contains("3 deduplicated, 2 unexplained"), "{}", r.verdict_line());
}

#[test]
fn offsets_the_committer_skipped_fail_the_audit_even_before_the_first_held_offset() {
    use crate::engine::commit::gaps::GapReason;
    let data = held(&[(0, &(331..400).chain(410..500).collect::<Vec<_>>())]);
    let mark = marks(&[(0, 499)]);
    let passes = run(&data, &HeldOffsets::default(), &mark, &Watermarks::default(), &Default::default());
    assert_eq!((passes.verdict, passes.gap_offsets), (Verdict::Pass, 10), "without the records the first batch is invisible: {passes:?}");
    let mut skipped = TakenGaps::default();
    skipped.take(&tp(0), 0, 330, GapReason::Patience, 1);
    skipped.take(&tp(0), 400, 404, GapReason::Patience, 1);
    let r = check(&Tables {
        data: &data,
        dead_letters: &HeldOffsets::default(),
        marks: &mark,
        dead_letter_marks: &Watermarks::default(),
        replayed: &Default::default(),
        skipped: &skipped,
        deduped: &Default::default(),
    });
    assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
    assert_eq!(r.gap_offsets, 331 + 10);
    let listed: Vec<(i64, i64, Option<GapCause>)> = r.gaps.iter().map(|g| (g.from, g.to, g.cause)).collect();
    assert_eq!(listed, [(0, 330, Some(GapCause::SkippedByCommitter)), (400, 404, Some(GapCause::SkippedByCommitter)), (405, 409, None)]);
    assert!(r.verdict_line().contains("336 skipped-by-committer"), "{}", r.verdict_line());
    // The broker shows them as transaction markers: explained, the audit passes.
    let mut explained = r.clone();
    explained.explain_gaps(|g| Ok(vec![Gap { cause: Some(GapCause::TransactionMarkers), ..g.clone() }])).unwrap();
    assert_eq!(explained.verdict, Verdict::Pass);
}

#[test]
fn every_offset_once_up_to_the_watermark_passes() {
    let r =
        run(&held(&[(0, &[0, 1, 3]), (1, &[5])]), &held(&[(0, &[2])]), &marks(&[(0, 3), (1, 5)]), &marks(&[(0, 3)]), &Default::default());
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    assert_eq!((r.rows, r.dead_letters, r.duplicate_offsets, r.gap_offsets), (4, 1, 0, 0));
    assert!(r.verdict_line().contains("PASS"));
}

#[test]
fn an_offset_held_twice_fails_and_is_listed_in_either_table() {
    let r = run(&held(&[(0, &[0, 1, 1, 2])]), &held(&[(0, &[2])]), &marks(&[(0, 2)]), &marks(&[(0, 2)]), &Default::default());
    assert_eq!(r.verdict, Verdict::Fail);
    assert_eq!(r.duplicate_offsets, 2);
    assert_eq!(r.duplicates[0], Duplicate { topic: "t".into(), partition: 0, offset: 1, in_table: 2, in_dead_letters: 0 });
    assert_eq!((r.duplicates[1].offset, r.duplicates[1].in_table, r.duplicates[1].in_dead_letters), (2, 1, 1));
    assert!(r.verdict_line().contains("FAIL"));
}

#[test]
fn a_replayed_dead_letter_counts_once_and_a_mark_without_its_row_fails() {
    let mut replayed = ReplayedOffsets::default();
    replayed.insert(&tp(0), 2);
    let r = run(&held(&[(0, &[0, 1, 2])]), &held(&[(0, &[2])]), &marks(&[(0, 2)]), &marks(&[(0, 2)]), &replayed);
    assert_eq!((r.verdict, r.replayed, r.duplicate_offsets), (Verdict::Pass, 1, 0), "{r:?}");
    // Replayed twice into the table: a duplicate even though it is marked.
    let r = run(&held(&[(0, &[0, 1, 2, 2])]), &held(&[(0, &[2])]), &marks(&[(0, 2)]), &marks(&[(0, 2)]), &replayed);
    assert_eq!((r.verdict, r.duplicate_offsets), (Verdict::Fail, 1));
    // Marked, but the row is not there.
    replayed.insert(&tp(0), 1);
    let r = run(&held(&[(0, &[0, 2])]), &held(&[(0, &[1, 2])]), &marks(&[(0, 2)]), &marks(&[(0, 2)]), &replayed);
    assert_eq!(r.verdict, Verdict::Fail);
    assert!(r.problems.iter().any(|p| p.contains("1 offset(s) from 1 to 1 are marked replayed")), "{:?}", r.problems);
}

#[test]
fn a_recovered_record_held_by_the_table_alone_counts_as_replayed() {
    // Offsets 1-2 of a discarded batch, recovered below the watermark 3 with their marks.
    let mut replayed = ReplayedOffsets::default();
    replayed.insert(&tp(0), 1);
    replayed.insert(&tp(0), 2);
    let r = run(&held(&[(0, &[0, 1, 2, 3])]), &held(&[]), &marks(&[(0, 3)]), &marks(&[]), &replayed);
    assert_eq!((r.verdict, r.replayed, r.rows, r.gap_offsets), (Verdict::Pass, 2, 4, 0), "{r:?}");
}

#[test]
fn gaps_between_first_offset_and_watermark_are_listed_and_explained() {
    let r = run(&held(&[(0, &[0, 1, 5, 6])]), &held(&[]), &marks(&[(0, 9)]), &marks(&[]), &Default::default());
    assert_eq!(r.verdict, Verdict::Pass, "a gap alone proves nothing lost");
    assert_eq!(r.gap_offsets, 6);
    let ranges: Vec<(i64, i64)> = r.gaps.iter().map(|g| (g.from, g.to)).collect();
    assert_eq!(ranges, [(2, 4), (7, 9)]);
    let mut explained = r.clone();
    explained
        .explain_gaps(|g| {
            let cause = if g.from == 2 { GapCause::DeletedByRetention } else { GapCause::Lost };
            Ok(vec![Gap { cause: Some(cause), ..g.clone() }])
        })
        .unwrap();
    assert_eq!(explained.verdict, Verdict::Fail, "records the broker still holds are lost");
    assert!(explained.verdict_line().contains("3 deleted-by-retention"), "{}", explained.verdict_line());
}

#[test]
fn rows_above_the_watermark_fail_and_dead_letters_of_a_half_committed_batch_are_in_flight() {
    let r = run(&held(&[(0, &[0, 1, 7])]), &held(&[]), &marks(&[(0, 5)]), &marks(&[(0, 5)]), &Default::default());
    assert_eq!(r.verdict, Verdict::Fail);
    assert_eq!(r.problems, ["t-0: 1 offset(s) from 7 to 7 are held above the watermark 5: a redelivery would add them again"]);
    let r = run(&held(&[(0, &[0, 1])]), &held(&[(0, &[2])]), &marks(&[(0, 1)]), &marks(&[(0, 3)]), &Default::default());
    assert_eq!((r.verdict, r.in_flight), (Verdict::Pass, 1), "{r:?}");
}
