//! A fault-injecting [`PointerSwap`] for tests: wraps a real catalog's swap and plays a script
//! of the rare outcomes a production catalog shows (lost races, throttling, lost responses),
//! or runs a hook before the first swap (another writer's whole commit), so a race test makes
//! its race happen instead of hoping for it. Compiled for unit tests and, with the
//! `fault-injection` feature, for the integration tests; never in the functions.

use std::collections::VecDeque;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use iceberg::spec::Operation;
use iceberg::{Catalog, MetadataLocation, TableIdent};

use super::{ChangeSet, PointerSwap, SwapError, snapshot};
use crate::base::error::{Error, Result};

/// What the next swap does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Another writer commits first; our swap then runs for real and loses.
    Conflict,
    /// The catalog throttles: nothing swapped, a retryable error.
    Throttled,
    /// Our swap lands but the response is lost (a timeout).
    AmbiguousLanded,
    /// The request is lost before it lands (a timeout).
    AmbiguousLost,
    /// Our swap lands, the response is lost and another writer commits on top before we reload.
    LandedThenOvertaken,
    /// Our swap lands, its response is lost and a retry of the same request (an AWS SDK's own
    /// retry) is refused because the version moved: a conflict answered for a swap that landed.
    LandedThenConflict,
    /// The request's response is lost and the table does not show it yet; it lands just before
    /// the next swap reaches the catalog (a delayed request), so that swap then conflicts.
    LostThenLandsLater,
    /// The catalog refuses for good (access denied); nothing swapped.
    Denied,
}

/// Plays `script` one fault per swap; then `after` for every further swap (None = swap for real).
pub struct FaultyPointer {
    inner: Arc<dyn PointerSwap>,
    catalog: Arc<dyn Catalog>,
    script: Mutex<VecDeque<Fault>>,
    after: Option<Fault>,
    /// Swaps asked for, and conflicts returned (so race tests can assert the race happened).
    pub swaps: AtomicU32,
    pub conflicts: AtomicU32,
    /// Commits made by the simulated other writer.
    pub overtakes: AtomicU32,
    /// Runs (once) before the first swap goes to the catalog.
    before_first_swap: Mutex<Option<BoxFuture<'static, ()>>>,
    /// A swap answered as lost that lands before the next one: (table, expected, new location).
    delayed: Mutex<Option<(TableIdent, String, String)>>,
}

impl std::fmt::Debug for FaultyPointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyPointer").field("inner", &self.inner).field("after", &self.after).finish_non_exhaustive()
    }
}

impl FaultyPointer {
    pub fn new(committer: &super::Committer, script: impl IntoIterator<Item = Fault>, after: Option<Fault>) -> Arc<Self> {
        Arc::new(Self {
            inner: committer.pointer().clone(),
            catalog: committer.catalog().clone(),
            script: Mutex::new(script.into_iter().collect()),
            after,
            swaps: AtomicU32::new(0),
            conflicts: AtomicU32::new(0),
            overtakes: AtomicU32::new(0),
            before_first_swap: Mutex::new(None),
            delayed: Mutex::new(None),
        })
    }

    /// A pointer that swaps for real, after running `hook` before the first swap.
    pub fn before_first_swap(committer: &super::Committer, hook: BoxFuture<'static, ()>) -> Arc<Self> {
        let pointer = Self::new(committer, [], None);
        *pointer.before_first_swap.lock().unwrap() = Some(hook);
        pointer
    }

    /// Another writer's commit: a property bump on top of whatever is current.
    async fn other_writer_commits(&self, ident: &TableIdent) -> Result<()> {
        let n = self.overtakes.fetch_add(1, Ordering::SeqCst) + 1;
        let table = self.catalog.load_table(ident).await?;
        let mut change = ChangeSet::new(Operation::Append);
        change.properties.insert("test.other-writer".into(), n.to_string());
        let mut staged = snapshot::stage(&table, &change).await?;
        let current = table.metadata_location_result()?;
        let next = MetadataLocation::from_str(current)?.with_next_version().with_new_metadata(&staged.build.metadata);
        staged.write(table.file_io(), &next).await?;
        match self.inner.swap(ident, current, &next.to_string()).await {
            Ok(()) => Ok(()),
            Err(SwapError::Conflict(reason)) => Err(Error::Invariant(format!("test writer lost a race: {reason}"))),
            Err(SwapError::Ambiguous(e)) => Err(e),
        }
    }
}

fn timeout() -> SwapError {
    SwapError::Ambiguous(Error::Aws { message: "UpdateTable: response lost (timeout)".into(), retryable: true })
}

#[async_trait::async_trait]
impl PointerSwap for FaultyPointer {
    async fn swap(&self, ident: &TableIdent, expected: &str, new_location: &str) -> Result<(), SwapError> {
        self.swaps.fetch_add(1, Ordering::SeqCst);
        let hook = self.before_first_swap.lock().unwrap().take();
        if let Some(hook) = hook {
            hook.await;
        }
        let delayed = self.delayed.lock().unwrap().take();
        if let Some((table, from, to)) = delayed {
            // Whatever the catalog answers the late request, nobody hears it.
            let _ = self.inner.swap(&table, &from, &to).await;
        }
        let fault = self.script.lock().unwrap().pop_front().or(self.after);
        let setup = |e: Error| SwapError::Ambiguous(Error::Invariant(format!("fault setup failed: {e}")));
        let outcome = match fault {
            None => self.inner.swap(ident, expected, new_location).await,
            Some(Fault::Conflict) => {
                self.other_writer_commits(ident).await.map_err(setup)?;
                self.inner.swap(ident, expected, new_location).await
            }
            Some(Fault::Throttled) => Err(SwapError::Ambiguous(Error::Aws {
                message: "glue:UpdateTable failed: ThrottlingException Rate exceeded".into(),
                retryable: true,
            })),
            Some(Fault::AmbiguousLanded) => {
                self.inner.swap(ident, expected, new_location).await?;
                Err(timeout())
            }
            Some(Fault::AmbiguousLost) => Err(timeout()),
            Some(Fault::LostThenLandsLater) => {
                *self.delayed.lock().unwrap() = Some((ident.clone(), expected.to_string(), new_location.to_string()));
                Err(timeout())
            }
            Some(Fault::LandedThenOvertaken) => {
                self.inner.swap(ident, expected, new_location).await?;
                self.other_writer_commits(ident).await.map_err(setup)?;
                Err(timeout())
            }
            Some(Fault::LandedThenConflict) => {
                self.inner.swap(ident, expected, new_location).await?;
                self.inner.swap(ident, expected, new_location).await
            }
            Some(Fault::Denied) => Err(SwapError::Ambiguous(Error::Aws {
                message: "access denied: the role needs `glue:UpdateTable`".into(),
                retryable: false,
            })),
        };
        if matches!(outcome, Err(SwapError::Conflict(_))) {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
        }
        outcome
    }

    fn round_trips(&self, ident: &TableIdent, expected: &str) -> u64 {
        self.inner.round_trips(ident, expected)
    }

    async fn load(&self, ident: &TableIdent) -> Option<iceberg::Result<iceberg::table::Table>> {
        self.inner.load(ident).await
    }
}
