//! The poller invoking the ingest function over the Lambda invoke API that `cargo lambda watch
//! --only-lambda-apis` serves on 127.0.0.1, the function process polling its runtime API as on
//! Lambda (cargo-lambda comes from the project's venv; `.ci/run` installs it).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use icestream_integration::broker::{Broker, free_port, venv, wait_for_port};
use icestream_integration::esm::{drain, produce, words};
use icestream_integration::*;
use icestream_tools::esm::function::{HttpFunction, invoke_url};

const TOPIC: &str = "vehicle-telemetry";

/// `CARGO_LAMBDA_BIN` (the Makefile sets it), else the venv's; missing is a failure.
fn cargo_lambda_bin() -> PathBuf {
    let path = std::env::var_os("CARGO_LAMBDA_BIN").map(PathBuf::from).unwrap_or_else(|| venv().join("bin/cargo-lambda"));
    assert!(
        path.exists(),
        "cargo-lambda not found at {}: set CARGO_LAMBDA_BIN or run `make venv` (pinned in scripts/setup/requirements.txt)",
        path.display()
    );
    path
}

/// `cargo lambda watch` and the function process, stopped with SIGTERM when the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// The workspace's debug `ingest` binary, next to the `icestream` one (`make test` builds both
/// with one feature set: a nested `cargo run --bin ingest` would resolve features for that
/// package alone and rebuild the whole dependency chain).
fn ingest_bin() -> PathBuf {
    let bin = icestream_bin().with_file_name("ingest");
    assert!(bin.exists(), "{} missing: run `cargo build --workspace --all-targets` first", bin.display());
    bin
}

#[tokio::test]
async fn a_batch_per_partition_invoked_through_cargo_lambda_watch_lands_in_the_table() {
    let cargo_lambda = cargo_lambda_bin();
    const PARTITIONS: u32 = 2;
    let broker = Broker::start(&[(TOPIC, PARTITIONS)]);
    let bootstrap = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let sent = produce(&bootstrap, &["count=1000", "format=proto", "seed=9"]);

    // `cargo lambda watch --only-lambda-apis` serves the runtime and invoke APIs; the function
    // process is the workspace's own build, polling the runtime API as Lambda runs it.
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("watch.log")).unwrap();
    let path = format!("{}:{}", cargo_lambda.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut watch = Command::new(&cargo_lambda);
    watch
        .args(["lambda", "watch", "--only-lambda-apis", "-A", "127.0.0.1", "-P", &port.to_string(), "--timeout", "600"])
        .current_dir(&workspace)
        .env("PATH", path)
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log.try_clone().unwrap()));
    let mut watch = Killed(watch.spawn().expect("start cargo lambda watch"));
    wait_for_port(port, "cargo lambda watch", &mut watch.0);
    let mut function = Command::new(ingest_bin());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("ICESTREAM_") || k.starts_with("AWS_")) {
        function.env_remove(k);
    }
    function
        .env("AWS_LAMBDA_RUNTIME_API", format!("http://127.0.0.1:{port}/.rt"))
        .env("AWS_LAMBDA_FUNCTION_NAME", "_")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
        .env("ICESTREAM_WAREHOUSE", &wh)
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log));
    let _function = Killed(function.spawn().expect("start the ingest function"));

    // With --only-lambda-apis, the runtime serves the function named `_`.
    let url = invoke_url(&format!("http://127.0.0.1:{port}"), "_");
    let failed = dir.path().join("failed");
    let args = ["group=watch", "batch_size=10000", "batching_window_ms=300000", "retries=2"];
    let mut args = words(&args);
    args.push(format!("on_failure_dir={}", failed.display()));
    let stats = drain(&bootstrap, TOPIC, &HttpFunction::new(url), &args).await;
    let log = std::fs::read_to_string(dir.path().join("watch.log")).unwrap_or_default();
    let errors: Vec<String> = std::fs::read_dir(&failed)
        .into_iter()
        .flatten()
        .flatten()
        .map(|f| serde_json::from_slice::<serde_json::Value>(&std::fs::read(f.path()).unwrap()).unwrap()["responseContext"].to_string())
        .collect();
    // The mapping cuts batches per partition; both fit one batch each (10k records, window 5 min).
    assert_eq!((stats.batches, stats.records, stats.failed_batches), (PARTITIONS as u64, 1000, 0), "{stats:?}\n{errors:?}\n{log}");
    assert_eq!(telemetry_rows(&wh).await.len(), sent.valid, "{log}");
}
