//! One CloudWatch Embedded Metric Format line per invocation: CloudWatch turns it into metrics
//! (namespace `icestream`, dimension `Function`) with no API call from the function.

use serde_json::json;

use crate::ingest::Summary;

/// Metric namespace the alarms and dashboard read.
pub const NAMESPACE: &str = "icestream";

/// The EMF JSON line for one invocation of `function`.
pub fn emf_line(function: &str, summary: &Summary) -> String {
    let metrics = vec![
        ("Records", "Count", summary.records as f64),
        ("Written", "Count", summary.written as f64),
        ("DeadLettered", "Count", summary.dead_letter as f64),
        ("SkippedReplays", "Count", summary.skipped_replay as f64),
        ("Duplicates", "Count", summary.duplicates as f64),
        ("CommitAttempts", "Count", f64::from(summary.commit_attempts)),
        ("CommitTime", "Milliseconds", summary.commit_ms as f64),
        ("Bytes", "Bytes", summary.bytes as f64),
        ("Duration", "Milliseconds", summary.duration_ms as f64),
        ("MaxRecordAge", "Milliseconds", summary.max_record_age_ms as f64),
    ];
    emf_line_of(function, &metrics)
}

/// The EMF JSON line for one invocation of `function` with `(name, unit, value)` metrics.
pub fn emf_line_of(function: &str, metrics: &[(&str, &str, f64)]) -> String {
    let mut line = json!({
        "_aws": {
            "Timestamp": chrono::Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Function"]],
                "Metrics": metrics.iter().map(|(n, u, _)| json!({"Name": n, "Unit": u})).collect::<Vec<_>>(),
            }],
        },
        "Function": function,
    });
    for (name, _, value) in metrics {
        line[*name] = json!(value);
    }
    line.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_declares_every_value_it_carries() {
        let s = Summary { records: 10, dead_letter: 2, ..Default::default() };
        let v: serde_json::Value = serde_json::from_str(&emf_line("ingest", &s)).unwrap();
        let declared = v["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap();
        for m in declared {
            let name = m["Name"].as_str().unwrap();
            assert!(v[name].is_number(), "{name} declared but missing");
        }
        assert_eq!(v["DeadLettered"], 2.0);
        assert_eq!(v["Function"], "ingest");
    }
}
