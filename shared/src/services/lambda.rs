//! The Lambda functions' runtime: each invocation's event read from its raw body by
//! [`crate::model::event::parse_event`], the parser the CLI, the esm and `make bench` use.
//!
//! `lambda_runtime` would deserialize the event into the handler's type itself, with serde_json
//! under `serde_path_to_error`, which copies every object key it passes into a new `String` (ten
//! a Kafka record) and checks UTF-8 string by string. [`RawEventLayer`] takes the body first: the
//! runtime deserializes a `null` in its place, and the handler gets the bytes.

use std::cell::RefCell;
use std::future::Future;
use std::task::{Context as TaskContext, Poll};

use bytes::Bytes;
use lambda_runtime::tower::{Layer, Service};
use lambda_runtime::{Context, Error, LambdaEvent, LambdaInvocation, Runtime, layers::TracingLayer, service_fn};

tokio::task_local! {
    /// The body of the invocation being handled, until the handler takes it.
    static RAW_EVENT: RefCell<Option<Bytes>>;
}

/// Run `handler` on each invocation's event bytes (and its context) until the runtime stops:
/// `lambda_runtime::run` with [`RawEventLayer`] outside its tracing layer.
pub async fn run<F, Fut, R>(handler: F) -> Result<(), Error>
where
    F: Fn(Bytes, Context) -> Fut + Clone,
    Fut: Future<Output = Result<R, Error>>,
    R: serde::Serialize,
{
    let service = service_fn(move |event: LambdaEvent<()>| {
        let handler = handler.clone();
        // Taken when the handler's future first runs: that is inside the layer's scope, while
        // the runtime builds the future before it.
        async move {
            let body = take_raw_event().ok_or("the invocation's event body was not handed over (no RawEventLayer)")?;
            handler(body, event.context).await
        }
    });
    Runtime::new(service).layer(TracingLayer::new()).layer(RawEventLayer).run().await
}

/// The current invocation's event bytes, once; `None` outside an invocation under
/// [`RawEventLayer`], or when already taken.
pub fn take_raw_event() -> Option<Bytes> {
    RAW_EVENT.try_with(|slot| slot.borrow_mut().take()).ok().flatten()
}

/// What the runtime deserializes in the event's place: a `null`, the handler's `()`.
const PLACEHOLDER: &[u8] = b"null";

/// A tower layer over the runtime's invocations that keeps each body for [`take_raw_event`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RawEventLayer;

impl<S> Layer<S> for RawEventLayer {
    type Service = RawEvent<S>;
    fn layer(&self, inner: S) -> RawEvent<S> {
        RawEvent { inner }
    }
}

/// The service [`RawEventLayer`] makes.
#[derive(Clone, Debug)]
pub struct RawEvent<S> {
    inner: S,
}

impl<S: Service<LambdaInvocation>> Service<LambdaInvocation> for RawEvent<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = tokio::task::futures::TaskLocalFuture<RefCell<Option<Bytes>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut invocation: LambdaInvocation) -> Self::Future {
        let body = std::mem::replace(&mut invocation.body, Bytes::from_static(PLACEHOLDER));
        RAW_EVENT.scope(RefCell::new(Some(body)), self.inner.call(invocation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invocation(body: &'static [u8]) -> LambdaInvocation {
        let (parts, ()) = hyper::Response::new(()).into_parts();
        LambdaInvocation { parts, body: Bytes::from_static(body), context: Context::default() }
    }

    #[tokio::test]
    async fn the_handler_takes_the_raw_body_once_and_the_runtime_sees_null() {
        let inner = service_fn(|invocation: LambdaInvocation| async move {
            let seen_by_runtime = invocation.body.clone();
            let first = take_raw_event();
            let second = take_raw_event();
            Ok::<_, Error>((seen_by_runtime, first, second))
        });
        let mut service = RawEventLayer.layer(inner);
        let (runtime, first, second) = service.call(invocation(br#"{"records":{}}"#)).await.unwrap();
        assert_eq!(&runtime[..], b"null", "the runtime deserializes the placeholder, not the event");
        assert_eq!(first.as_deref(), Some(&br#"{"records":{}}"#[..]));
        assert_eq!(second, None, "the body is handed over once");
        assert_eq!(take_raw_event(), None, "nothing outside an invocation");
    }

    #[tokio::test]
    async fn concurrent_invocations_each_get_their_own_body() {
        let inner = service_fn(|_: LambdaInvocation| async move {
            tokio::task::yield_now().await;
            Ok::<_, Error>(take_raw_event())
        });
        let mut service = RawEventLayer.layer(inner);
        let (a, b) = tokio::join!(service.clone().call(invocation(b"[1]")), service.call(invocation(b"[2]")));
        assert_eq!(a.unwrap().as_deref(), Some(&b"[1]"[..]));
        assert_eq!(b.unwrap().as_deref(), Some(&b"[2]"[..]));
    }
}
