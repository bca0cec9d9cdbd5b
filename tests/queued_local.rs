//! Queued mode in process on the embedded catalog, against a real SQS API: moto's server on
//! 127.0.0.1 (the venv's `moto_server`; `make test` puts the venv on PATH). Its own test binary:
//! the AWS SDK finds the endpoint in the environment, set once here before anything runs.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use icestream::dev::generate::{GeneratorOptions, generate};
use icestream::engine::queue::sqs::CommitQueue;
use icestream::services::queued::batch::commit_batch;
use icestream_integration::broker::{free_port, venv, wait_for_port};
use icestream_integration::*;

/// moto's server, stopped when dropped.
struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start moto, point the AWS SDK at it and create a FIFO commit queue; returns its URL.
fn moto_with_queue() -> (Moto, String) {
    let bin = venv().join("bin");
    let port = free_port();
    // Owned by the guard from the start: a failed step below still stops it.
    let mut moto = Moto(
        Command::new(bin.join("moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server (run `make venv`)"),
    );
    wait_for_port(port, "moto_server", &mut moto.0);
    let endpoint = format!("http://127.0.0.1:{port}");
    // SAFETY: the only test of this binary sets these before it starts any thread of its own.
    unsafe {
        for (k, v) in [
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ] {
            std::env::set_var(k, v);
        }
    }
    let create = "import boto3, sys; print(boto3.client('sqs', endpoint_url=sys.argv[1]).create_queue(QueueName='commits.fifo', Attributes={'FifoQueue': 'true'})['QueueUrl'])";
    let out = Command::new(bin.join("python")).args(["-c", create, &endpoint]).output().expect("venv python");
    assert!(out.status.success(), "create queue: {}", String::from_utf8_lossy(&out.stderr));
    (moto, String::from_utf8(out.stdout).unwrap().trim().to_string())
}

/// A queued writer loads its tables once and reuses them: a warm invocation uploads every file
/// and staged manifest side by side (1), sends the dead letters' request (1), then the rows'
/// (1) = 3 sequential round trips (5 before; the cold one adds the load, 2). Every call is made
/// 20 ms slower, as over a network. Then the committer takes every request, one redelivered:
/// every record lands exactly once, in the table or as a dead letter.
#[tokio::test]
async fn a_warm_queued_writer_makes_three_round_trips_and_lands_every_record_once() {
    let (_moto, queue_url) = moto_with_queue();
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wh");
    let knobs = ["source=json", "dedup=none", "commit_mode=queued", &format!("commit_queue_url={queue_url}")];
    let p = icestream::IngestPipeline::new(config(&wh, &knobs)).await.unwrap();
    p.catalogs().call_counter().simulate_latency(Duration::from_millis(20));
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut valid, mut corrupt) = (0, 0);
    let mut used = vec![];
    for (seed, start) in [(1, 0), (2, 2000), (2, 2000)] {
        let args = [
            "records=2000".to_string(),
            "format=json".into(),
            "corrupt=true".into(),
            "partitions=1".into(),
            format!("seed={seed}"),
            format!("start_offset={start}"),
        ];
        let g = generate(&GeneratorOptions::from_args(args).unwrap()).unwrap();
        let before = p.catalogs().calls();
        let s = p.handle_json(g.event.to_string().as_bytes(), deadline).await.unwrap();
        let calls = p.catalogs().calls() - before;
        assert_eq!(s.round_trips, calls);
        assert!(s.dead_letter > 0 && s.written > 0, "{s:?}");
        assert_eq!((calls.swaps, calls.queue_sends), (0, 2), "{calls:?}");
        if used.len() < 2 {
            (valid, corrupt) = (valid + g.expectation.valid, corrupt + g.expectation.corrupt);
        }
        used.push(calls);
    }
    assert_eq!(used[0].loads, 2, "{:?}", used[0]);
    assert_eq!(used[0].sequential, 5, "{:?}", used[0]);
    for warm in &used[1..] {
        assert_eq!(warm.loads, 0, "{warm:?}");
        assert_eq!(warm.sequential, 3, "{warm:?}");
    }

    let queue = CommitQueue::connect(&queue_url).await;
    let config = p.config();
    for _ in 0..20 {
        let messages = queue.receive(10, 5).await.unwrap();
        if messages.is_empty() {
            break;
        }
        let report = commit_batch(p.catalogs(), config, &messages, deadline).await;
        assert!(report.batch_item_failures.is_empty(), "{report:?}");
        queue.delete(&messages.iter().collect::<Vec<_>>()).await.unwrap();
    }
    assert_eq!(telemetry_rows(&wh).await.len(), valid);
    assert_eq!(dead_letter_offsets(&wh).await.len(), corrupt);

    // Eight more writer invocations, then one committer batch folds ten of their requests (a
    // FIFO batch: five of the rows' table, five of the dead letters'): it reads the requests'
    // staged manifests and checks their files side by side, 22 sequential round trips; one
    // request after another they were 35. The rest are committed after.
    let mut more = 0;
    for batch in 0..8 {
        let args = [
            "records=200".to_string(),
            "format=json".into(),
            "partitions=1".into(),
            format!("seed={}", 10 + batch),
            "topic=more".into(),
            format!("start_offset={}", batch * 200),
        ];
        let g = generate(&GeneratorOptions::from_args(args).unwrap()).unwrap();
        p.handle_json(g.event.to_string().as_bytes(), deadline).await.unwrap();
        more += g.expectation.valid;
    }
    let messages = queue.receive(100, 30).await.unwrap();
    assert!(messages.len() >= 8, "{} requests", messages.len());
    let before = p.catalogs().calls();
    let report = commit_batch(p.catalogs(), config, &messages, deadline).await;
    let used = p.catalogs().calls() - before;
    assert!(report.batch_item_failures.is_empty() && report.tables.iter().map(|t| t.committed).sum::<usize>() >= 8, "{report:?}");
    assert!(used.sequential <= 25, "{used:?}");
    queue.delete(&messages.iter().collect::<Vec<_>>()).await.unwrap();
    for _ in 0..20 {
        let messages = queue.receive(10, 5).await.unwrap();
        if messages.is_empty() {
            break;
        }
        commit_batch(p.catalogs(), config, &messages, deadline).await;
        queue.delete(&messages.iter().collect::<Vec<_>>()).await.unwrap();
    }
    assert_eq!(telemetry_rows(&wh).await.len(), valid + more);
}
