//! The poller invoking the ingest function over the Lambda invoke API that `cargo lambda watch`
//! serves on 127.0.0.1 (cargo-lambda comes from the project's venv; `.ci/run` installs it).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use icestream_integration::broker::{Broker, free_port, venv, wait_for_port};
use icestream_integration::*;
use icestream_integration::esm::{drain, produce, words};
use icestream_tools::esm::function::{HttpFunction, invoke_url};

const TOPIC: &str = "vehicle-telemetry";

/// `CARGO_LAMBDA_BIN` (the Makefile sets it), else the venv's; missing is a failure.
fn cargo_lambda_bin() -> PathBuf {
    let path = std::env::var_os("CARGO_LAMBDA_BIN").map(PathBuf::from).unwrap_or_else(|| venv().join("bin/cargo-lambda"));
    assert!(path.exists(), "cargo-lambda not found at {}: set CARGO_LAMBDA_BIN or run `make venv` (pinned in scripts/requirements.txt)", path.display());
    path
}

/// `cmd` without the variables cargo sets for a test process. Build scripts track some of them
/// (ring's reruns on `CARGO_MANIFEST_DIR`, here `<checkout>/tests`): inherited by the nested
/// cargo, every checkout at a new path rebuilt the whole dependency chain of the `ingest`
/// variant (~15 min). `CARGO_HOME` and `CARGO_TARGET_DIR` are the user's and stay.
fn without_test_env(mut cmd: Command) -> Command {
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR") {
        cmd.env_remove(k);
    }
    cmd
}

/// `cargo lambda watch`, stopped with SIGTERM so it takes the function process down with it.
struct Watch(Child);

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn one_batch_invoked_through_cargo_lambda_watch_lands_in_the_table() {
    let cargo_lambda = cargo_lambda_bin();
    let broker = Broker::start(&[(TOPIC, 2)]);
    let bootstrap = broker.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let sent = produce(&bootstrap, &["count=1000", "format=proto", "seed=9"]);

    // Build the function exactly as `cargo lambda watch` will run it (`cargo run --bin ingest`
    // resolves features for that package alone, so its artifacts differ from the workspace
    // build): the invocation then finds it built instead of waiting on a cold compile.
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let built = without_test_env(Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())))
        .args(["build", "--manifest-path", "Cargo.toml", "--bin", "ingest"])
        .current_dir(&workspace)
        .status()
        .expect("cargo build --bin ingest");
    assert!(built.success(), "building the ingest function failed");

    let port = free_port();
    let log = std::fs::File::create(dir.path().join("watch.log")).unwrap();
    let path = format!("{}:{}", cargo_lambda.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = without_test_env(Command::new(&cargo_lambda));
    // The first invocation waits for `cargo run` (and its build lock, which other cargo
    // processes may hold): give it far more than the default invoke timeout.
    cmd.args(["lambda", "watch", "-A", "127.0.0.1", "-P", &port.to_string(), "--timeout", "1200", "--env-var"])
        .arg(format!("ICESTREAM_WAREHOUSE={}", wh.display()))
        .current_dir(&workspace)
        .env("PATH", path)
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("ICESTREAM_")) {
        cmd.env_remove(k);
    }
    let mut watch = Watch(cmd.spawn().expect("start cargo lambda watch"));
    wait_for_port(port, "cargo lambda watch", &mut watch.0);

    let url = invoke_url(&format!("http://127.0.0.1:{port}"), "ingest");
    // The first invocation waits while `cargo run` builds the function (already built by `make test`).
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
    assert_eq!((stats.batches, stats.records, stats.failed_batches), (1, 1000, 0), "{stats:?}\n{errors:?}\n{log}");
    assert_eq!(telemetry_rows(&wh).await.len(), sent.valid, "{log}");
}
