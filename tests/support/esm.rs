//! Driving the producer and the event source mapping in-process against a test broker.

use std::sync::atomic::AtomicBool;

use std::path::Path;

use icestream::dev::generate::Expectation;
use icestream_tools::esm::function::InProcessIngest;
use icestream_tools::esm::{EsmOptions, EsmStats, Function, Poller};
use icestream_tools::produce::produce as produce_records;

/// The ingest function in process: JSON values, no dedup (so a test counts every row it lands).
pub async fn json_ingest_function(warehouse: &Path) -> InProcessIngest {
    let config = super::config(warehouse, &["source=json", "dedup=none"]);
    InProcessIngest::new(icestream::IngestPipeline::new(config).await.expect("pipeline"))
}

/// `icestream produce bootstrap=.. start_ms=<fixed> ARGS` in-process; what was sent.
pub fn produce(bootstrap: &str, args: &[&str]) -> Expectation {
    let mut all = vec![format!("bootstrap={bootstrap}"), "start_ms=1700000000000".to_string()];
    all.extend(args.iter().map(|s| s.to_string()));
    produce_records(&all, &AtomicBool::new(false)).expect("produce").1
}

/// Run a poller on `topic` with `drain=true` plus `args` to the end; what it did.
pub async fn drain<F: Function>(bootstrap: &str, topic: &str, function: &F, args: &[String]) -> EsmStats {
    let mut all = vec![
        format!("bootstrap={bootstrap}"),
        format!("topic={topic}"),
        "drain=true".to_string(),
        // Tansu answers a new group's join after half the session timeout: 2 s makes it a 1 s join.
        "session_timeout_ms=2000".to_string(),
    ];
    all.extend(args.iter().cloned());
    let (opts, rest) = EsmOptions::from_args(&all).expect("options");
    assert!(rest.is_empty(), "function words {rest:?}: the test builds its function itself");
    let poller = Poller::connect(opts).expect("connect");
    // A guard against a hang, generous on a loaded 2-core machine; not a timing assertion.
    tokio::time::timeout(std::time::Duration::from_secs(1200), poller.run(function, std::future::pending()))
        .await
        .expect("the drain never finished")
        .expect("poller")
}

/// `key=value` words as owned strings.
pub fn words(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}
