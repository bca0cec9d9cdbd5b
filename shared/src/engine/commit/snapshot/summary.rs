//! The snapshot summary: the change's own properties, the files it adds and removes, and the
//! table's running totals.

use std::collections::HashMap;

use iceberg::spec::{SnapshotSummaryCollector, Summary, TableMetadata};

use crate::engine::commit::ChangeSet;

/// The summary of the snapshot `change` makes on `metadata`'s current one.
pub(super) fn summary(change: &ChangeSet, collector: SnapshotSummaryCollector, metadata: &TableMetadata) -> Summary {
    let mut properties = change.summary.clone();
    properties.extend(collector.build());
    with_totals(
        Summary { operation: change.operation.clone(), additional_properties: properties },
        metadata.current_snapshot().map(|s| s.summary()),
    )
}

/// Fill the `total-*` summary fields from the parent's totals plus this snapshot's changes
/// (iceberg-rust keeps its own version of this crate-private).
fn with_totals(mut summary: Summary, previous: Option<&Summary>) -> Summary {
    let prev = |key: &str| -> u64 { previous.and_then(|p| p.additional_properties.get(key)).and_then(|v| v.parse().ok()).unwrap_or(0) };
    let props = &mut summary.additional_properties;
    for (total, added, removed) in [
        ("total-data-files", "added-data-files", "deleted-data-files"),
        ("total-delete-files", "added-delete-files", "removed-delete-files"),
        ("total-records", "added-records", "deleted-records"),
        ("total-files-size", "added-files-size", "removed-files-size"),
        ("total-position-deletes", "added-position-deletes", "removed-position-deletes"),
        ("total-equality-deletes", "added-equality-deletes", "removed-equality-deletes"),
    ] {
        let get = |props: &HashMap<String, String>, k: &str| props.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let value = (prev(total) + get(props, added)).saturating_sub(get(props, removed));
        props.insert(total.to_string(), value.to_string());
    }
    summary
}
