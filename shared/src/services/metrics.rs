//! One CloudWatch Embedded Metric Format line per invocation: CloudWatch turns it into metrics
//! (namespace `icestream`, dimension `Function` = the deployed function's name) with no API
//! call from the function. The lines go to standard output outside `tracing`, so no log filter
//! of ours drops them; Lambda's own log-level filter counts a line without `level` as INFO, so
//! the deployment must not filter application logs above INFO (infra/terraform sets TRACE and
//! filters with RUST_LOG instead).

use serde_json::json;

/// Metric namespace the alarms and dashboard read.
pub const NAMESPACE: &str = "icestream";

/// The one dimension of every metric.
pub const DIMENSION: &str = "Function";

/// The second dimension of the per-table lines ([`table_emf_lines`]).
pub const TABLE_DIMENSION: &str = "Table";

/// Where the dimension's value comes from under Lambda: the deployed function's name, so two
/// deployments in one account and region keep apart. Outside Lambda (the CLI) it is the
/// function's role name (`ingest`, `committer`).
pub const FUNCTION_NAME_ENV: &str = "AWS_LAMBDA_FUNCTION_NAME";

/// The `Function` dimension value for `function`: the Lambda function name when running there.
fn dimension_value(function: &str) -> String {
    std::env::var(FUNCTION_NAME_ENV).ok().filter(|n| !n.is_empty()).unwrap_or_else(|| function.to_string())
}

/// One metric of an invocation: name, CloudWatch unit, value.
pub type Metric = (&'static str, &'static str, f64);

/// What an invocation reports, as metrics: the one seam between the services and CloudWatch
/// (each service's outcome implements it; this module knows no service).
pub trait Metered {
    /// The function that reports it (`ingest`, `committer`): the `Function` dimension outside Lambda.
    fn function(&self) -> &'static str;
    /// The invocation's metrics.
    fn metrics(&self) -> Vec<Metric>;
    /// Per table the invocation fed: its name and its metrics (lines with dimensions `Function`
    /// and `Table`; the dashboard and the freshness and dead-letter alarms read these).
    fn table_metrics(&self) -> Vec<(String, Vec<Metric>)> {
        Vec::new()
    }
}

/// The EMF JSON lines of one invocation: its own line, then one per table it fed.
pub fn emf_lines(outcome: &dyn Metered) -> Vec<String> {
    let function = outcome.function();
    let mut lines = vec![emf_line_of(function, &outcome.metrics())];
    for (table, metrics) in outcome.table_metrics() {
        let mut line: serde_json::Value = serde_json::from_str(&emf_line_of(function, &metrics)).unwrap_or_default();
        line["_aws"]["CloudWatchMetrics"][0]["Dimensions"] = json!([[DIMENSION, TABLE_DIMENSION]]);
        line[TABLE_DIMENSION] = json!(table);
        lines.push(line.to_string());
    }
    lines
}

/// `count` per GB (10^9 bytes) of record payload: what the cost model prices files by.
pub fn per_gb(count: usize, payload_bytes: u64) -> f64 {
    if payload_bytes == 0 { 0.0 } else { count as f64 * 1e9 / payload_bytes as f64 }
}

/// The EMF JSON line for one invocation of `function` with `(name, unit, value)` metrics.
pub fn emf_line_of(function: &str, metrics: &[(&str, &str, f64)]) -> String {
    emf_line_with(&dimension_value(function), metrics)
}

/// The metric names an EMF line declares (the deployment's alarms may use only these).
pub fn declared_metrics(line: &str) -> Vec<String> {
    let parsed: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
    let declared = parsed["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().cloned().unwrap_or_default();
    declared.iter().filter_map(|m| m["Name"].as_str().map(str::to_string)).collect()
}

/// The metric names each function's EMF lines declare, from `samples` (outcomes with every
/// figure and at least one table): `{"ingest": [...], "ingest_per_table": [...], "committer": [...],
/// "maintenance": []}` (maintenance emits none), for `icestream contract`.
pub fn emitted_metrics(samples: &[&dyn Metered]) -> serde_json::Value {
    let mut out = json!({ "maintenance": [] });
    for sample in samples {
        let lines = emf_lines(*sample);
        out[sample.function()] = json!(declared_metrics(&lines[0]));
        if let Some(table_line) = lines.get(1) {
            out[format!("{}_per_table", sample.function())] = json!(declared_metrics(table_line));
        }
    }
    out
}

fn emf_line_with(dimension: &str, metrics: &[(&str, &str, f64)]) -> String {
    let mut line = json!({
        "_aws": {
            "Timestamp": chrono::Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [[DIMENSION]],
                "Metrics": metrics.iter().map(|(n, u, _)| json!({"Name": n, "Unit": u})).collect::<Vec<_>>(),
            }],
        },
        DIMENSION: dimension,
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
    fn dimension_is_the_deployed_function_name() {
        let v: serde_json::Value = serde_json::from_str(&emf_line_with("prod-ingest", &[("Records", "Count", 1.0)])).unwrap();
        assert_eq!(v["Function"], "prod-ingest");
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["Function"]]));
    }
}
