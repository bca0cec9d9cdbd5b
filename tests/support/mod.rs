//! Helpers for the integration tests: the `icestream` binary, tables read back through
//! iceberg-rust, and event construction.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use icestream::Config;
use icestream::dev::codec::{Reading, readings};
use icestream::engine::catalog::Catalogs;

pub mod broker;
pub mod esm;
pub mod sim;

/// The workspace's `icestream` binary (built by `cargo test --workspace` / `make test`).
pub fn icestream_bin() -> PathBuf {
    if let Ok(p) = std::env::var("ICESTREAM_BIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/<test-binary> -> target/<profile>/icestream
    let exe = std::env::current_exe().expect("test binary path");
    let bin = exe.parent().and_then(Path::parent).expect("target dir").join("icestream");
    assert!(bin.exists(), "{} missing: run `cargo build --bin icestream` first", bin.display());
    bin
}

/// `icestream ARGS` without this process's `ICESTREAM_*` variables: the CLI reads every one as
/// a knob (and refuses names that are none, such as `ICESTREAM_BIN`), so a developer's exported
/// configuration would change what a test runs.
pub fn icestream_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(icestream_bin());
    cmd.args(args);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with(icestream::model::config::ENV_PREFIX)) {
        cmd.env_remove(k);
    }
    cmd.env("RUST_LOG", "warn");
    cmd
}

/// Run `icestream ARGS` with a clean ICESTREAM_* environment plus `env`.
pub fn icestream(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = icestream_command(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run icestream")
}

/// The JSON summary on the last line of a successful `icestream ingest`.
pub fn summary_of(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "icestream failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("a summary line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("summary {last:?}: {e}"))
}

/// Config for a warehouse directory, plus extra key=value words.
pub fn config(warehouse: &Path, extra: &[&str]) -> Config {
    let mut args = vec![format!("warehouse={}", warehouse.display())];
    args.extend(extra.iter().map(|s| s.to_string()));
    Config::from_args(&args).expect("config")
}

/// Every row of a table, read through an iceberg-rust scan.
pub async fn scan(warehouse: &Path, table: &str) -> Vec<RecordBatch> {
    let cfg = config(warehouse, &[]);
    let catalogs = Catalogs::connect(&cfg).await.expect("catalog");
    let table = catalogs.catalog().load_table(&catalogs.ident(table)).await.expect("table");
    if table.metadata().current_snapshot().is_none() {
        return vec![];
    }
    table.scan().select_all().build().unwrap().to_arrow().await.unwrap().try_collect().await.unwrap()
}

/// Telemetry rows with their lineage `(partition, offset)`, sorted by lineage.
pub async fn telemetry_rows(warehouse: &Path) -> Vec<((i32, i64), Reading)> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type};
    let mut out = Vec::new();
    for b in scan(warehouse, "vehicle_telemetry").await {
        let parts = b.column_by_name("kafka_partition").unwrap().as_primitive::<Int32Type>().clone();
        let offs = b.column_by_name("kafka_offset").unwrap().as_primitive::<Int64Type>().clone();
        for (i, r) in readings(&b).unwrap().into_iter().enumerate() {
            out.push(((parts.value(i), offs.value(i)), r));
        }
    }
    out.sort_by_key(|(k, _)| *k);
    out
}

/// Dead-letter `(partition, offset)`s, sorted.
pub async fn dead_letter_offsets(warehouse: &Path) -> Vec<(i32, i64)> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type};
    let mut out = Vec::new();
    for b in scan(warehouse, "vehicle_telemetry_dead_letter").await {
        let parts = b.column_by_name("kafka_partition").unwrap().as_primitive::<Int32Type>();
        let offs = b.column_by_name("kafka_offset").unwrap().as_primitive::<Int64Type>();
        out.extend((0..b.num_rows()).map(|i| (parts.value(i), offs.value(i))));
    }
    out.sort();
    out
}

/// Offset watermarks of a table, as `topic-partition -> offset`.
pub async fn watermarks(warehouse: &Path, table: &str) -> BTreeMap<String, i64> {
    let cfg = config(warehouse, &[]);
    let catalogs = Catalogs::connect(&cfg).await.expect("catalog");
    let table = catalogs.catalog().load_table(&catalogs.ident(table)).await.expect("table");
    icestream::services::report::report(&table).await.unwrap().watermarks
}

/// Write a generated event to `dir/name` and return its path.
pub fn write_event(dir: &Path, name: &str, event: &serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, event.to_string()).unwrap();
    path
}

/// An Avro order record: `id`, `note`.
pub const ORDER_V1: &str = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":"string"}]}"#;
/// The producer's newer writer schema: one optional field more. Values written with it do not
/// decode with V1 (bytes left over), so they are dead letters until the pipeline has V2 (then the
/// table gains the column, at start or in the replay's commit).
pub const ORDER_V2: &str = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":"string"},{"name":"extra","type":["null","long"],"default":null}]}"#;

/// An order's Avro value: V1, or V2 when `extra` is given.
pub fn avro_order(id: i64, note: &str, extra: Option<i64>) -> Vec<u8> {
    let mut out = Vec::new();
    avro_long(&mut out, id);
    avro_long(&mut out, note.len() as i64);
    out.extend_from_slice(note.as_bytes());
    if let Some(extra) = extra {
        // The union's second branch (long), then the value.
        avro_long(&mut out, 1);
        avro_long(&mut out, extra);
    }
    out
}

/// Avro binary encoding of a long (zigzag varint), appended to `out`.
pub fn avro_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let byte = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
}
