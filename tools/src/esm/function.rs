//! What the poller invokes: the library pipelines in-process, or a function behind the Lambda
//! invoke API (`cargo lambda watch`). Tests bring their own [`Function`]s.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use icestream::IngestPipeline;
use icestream::model::event::ParsedEvent;

use super::batch::Batch;

/// One invocation: the event JSON in, the function's JSON result out; `Err` = the function failed.
/// The poller calls it for several partitions at once (one call per partition at a time).
pub trait Function {
    fn invoke(&self, event: &[u8]) -> impl Future<Output = Result<serde_json::Value>>;

    /// Invoke with a cut batch. By default its event JSON goes to [`Self::invoke`]; a function
    /// in this process takes the records as its handler would have parsed them, without
    /// rendering and re-parsing the JSON ([`Batch::parsed_event`]).
    fn invoke_batch(&self, batch: &Batch) -> impl Future<Output = Result<serde_json::Value>> {
        self.invoke(batch.event().as_bytes())
    }
}

/// A library pipeline the poller can call in this process (ingest; tests bring their own).
pub trait Pipeline: Send + Sync + 'static {
    type Summary: serde::Serialize + Send + 'static;
    fn handle(&self, event: ParsedEvent, deadline: Instant) -> impl Future<Output = icestream::Result<Self::Summary>>;
    /// What stands in for the Lambda timeout.
    fn timeout_ms(&self) -> u64;
}

impl Pipeline for IngestPipeline {
    type Summary = icestream::Summary;
    fn handle(&self, event: ParsedEvent, deadline: Instant) -> impl Future<Output = icestream::Result<Self::Summary>> {
        IngestPipeline::handle(self, event, deadline)
    }
    fn timeout_ms(&self) -> u64 {
        self.config().commit_timeout_ms
    }
}

/// A pipeline called directly. Each invocation runs on a thread of its own, so concurrent ones
/// (one per partition) use every core, as separate Lambda instances would.
pub struct InProcess<P> {
    pub pipeline: Arc<P>,
}

/// The ingest pipeline in this process.
pub type InProcessIngest = InProcess<IngestPipeline>;

impl<P: Pipeline> InProcess<P> {
    pub fn new(pipeline: P) -> Self {
        Self { pipeline: Arc::new(pipeline) }
    }

    async fn run(&self, event: ParsedEvent) -> Result<serde_json::Value> {
        let pipeline = self.pipeline.clone();
        on_its_own_thread(move || async move { pipeline.handle(event, deadline(pipeline.timeout_ms())).await }.boxed_local()).await
    }
}

impl<P: Pipeline> Function for InProcess<P> {
    async fn invoke(&self, event: &[u8]) -> Result<serde_json::Value> {
        self.run(icestream::model::event::parse_event(event)?).await
    }

    async fn invoke_batch(&self, batch: &Batch) -> Result<serde_json::Value> {
        self.run(batch.parsed_event()?).await
    }
}

/// The Lambda timeout, from the function's `commit_timeout_ms`.
fn deadline(timeout_ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(timeout_ms)
}

/// Run one invocation on a thread of its own (the pipeline's futures are not all `Send`, so
/// not a spawned task); its summary as JSON. A panic fails the invocation. On a
/// single-threaded runtime (tests) it runs in place: there is no other core to use.
/// Boxed: the pipeline's future inline makes the caller's layout too deep for the compiler.
async fn on_its_own_thread<S: serde::Serialize + Send + 'static>(
    invocation: impl FnOnce() -> LocalBoxFuture<'static, icestream::Result<S>> + Send + 'static,
) -> Result<serde_json::Value> {
    let runtime = tokio::runtime::Handle::current();
    let summary = match runtime.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => invocation().await?,
        _ => tokio::task::spawn_blocking(move || runtime.block_on(invocation())).await.context("the invocation panicked")??,
    };
    Ok(serde_json::to_value(summary)?)
}

/// A function behind the Lambda invoke API, e.g.
/// `http://127.0.0.1:9000/2015-03-31/functions/ingest/invocations` under `cargo lambda watch`.
pub struct HttpFunction {
    pub url: String,
    client: reqwest::Client,
}

impl HttpFunction {
    pub fn new(url: String) -> Self {
        Self { url, client: reqwest::Client::new() }
    }
}

impl Function for HttpFunction {
    async fn invoke(&self, event: &[u8]) -> Result<serde_json::Value> {
        let response = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .body(event.to_vec())
            .send()
            .await
            .with_context(|| format!("invoking {}", self.url))?;
        let status = response.status();
        // Lambda reports a function error as 200 with this header; the body is the error.
        let function_error = response.headers().get("x-amz-function-error").map(|v| v.to_str().unwrap_or("?").to_string());
        let body = response.bytes().await.with_context(|| format!("reading the reply of {}", self.url))?;
        let text = String::from_utf8_lossy(&body);
        if !status.is_success() {
            bail!("{} answered {status}: {text}", self.url);
        }
        let value: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| anyhow!("{} answered non-JSON ({e}): {text}", self.url))?;
        let error_shaped = value.get("errorType").is_some() && value.get("errorMessage").is_some();
        if function_error.is_some() || error_shaped {
            bail!("function error ({}): {text}", function_error.unwrap_or_else(|| "Unhandled".into()));
        }
        Ok(value)
    }
}

/// The invoke API address of `function` for a runtime-API base URL (a bare `http://host:port`
/// gets the standard path; a full path is used as given).
pub fn invoke_url(base: &str, function: &str) -> String {
    let rest = base.trim_start_matches("http://");
    match rest.split_once('/') {
        Some((_, path)) if !path.is_empty() => base.to_string(),
        _ => format!("http://{}/2015-03-31/functions/{function}/invocations", rest.trim_end_matches('/')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_in_process_invocation_runs_on_a_thread_of_its_own_and_a_panic_fails_it() {
        let caller = format!("{:?}", std::thread::current().id());
        let ran_on = on_its_own_thread(|| async { Ok::<_, icestream::Error>(format!("{:?}", std::thread::current().id())) }.boxed_local());
        assert_ne!(ran_on.await.unwrap(), serde_json::json!(caller));
        fn crash() -> String {
            panic!("in the function")
        }
        let panicked = on_its_own_thread(|| async { Ok::<_, icestream::Error>(crash()) }.boxed_local());
        assert!(panicked.await.unwrap_err().to_string().contains("panicked"));
    }

    #[test]
    fn a_bare_base_url_gets_the_invoke_path() {
        let full = "http://127.0.0.1:9000/2015-03-31/functions/ingest/invocations";
        assert_eq!(invoke_url("http://127.0.0.1:9000", "ingest"), full);
        assert_eq!(invoke_url("http://127.0.0.1:9000/", "ingest"), full);
        assert_eq!(invoke_url(full, "cdc"), full);
    }
}
