//! The simulation's scheduler: actors (futures running real library code) take turns at every
//! catalog and storage call. Each call first waits at a gate; when every live actor is waiting
//! at one (or done), the scheduler picks, by the seed, which call goes next and what fault it
//! meets. Between two grants exactly one call is in flight, so a seed replays the same
//! interleaving however the blocking pool or SQLite happen to schedule.
//!
//! Code outside an actor (the invariant checks) passes the gates freely.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{Notify, oneshot};

tokio::task_local! {
    static ACTOR: usize;
}

/// What kind of call waits at a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// The actor's first step: nothing runs before the scheduler says so.
    Start,
    /// A table load (catalog lookup and metadata read).
    Load,
    /// A pointer swap (its own faults are chosen by the pointer).
    Swap,
    /// Any other catalog call.
    Catalog,
    Read,
    Write,
    Delete,
}

/// What happens to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Go,
    /// Refused before it does anything (throttled, a 503): a retryable error.
    Fail,
    /// Done, and its response lost: the caller sees an error.
    LostAfter,
    /// The actor's process dies before the call, or right after it is done.
    Crash,
    CrashAfter,
}

/// Per-call fault rates of a seed, in tenths of a percent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rates {
    pub fail: u32,
    pub lost_after: u32,
    pub crash: u32,
}

struct Waiter {
    actor: usize,
    call: Call,
    what: String,
    grant: oneshot::Sender<Verdict>,
}

struct State {
    rng: SmallRng,
    rates: Rates,
    /// Crashes allowed (off while the world quiesces).
    crashes: bool,
    next_ticket: u64,
    waiting: BTreeMap<u64, Waiter>,
    /// Calls granted and not finished, by actor.
    running: BTreeMap<usize, u32>,
    live: BTreeSet<usize>,
    crash: BTreeMap<usize, Arc<Notify>>,
    names: BTreeMap<usize, String>,
    next_actor: usize,
    /// The actor granted last.
    last: Option<usize>,
}

pub struct Sched {
    state: Mutex<State>,
    changed: Notify,
    log: Arc<Mutex<Vec<String>>>,
}

/// A call waiting at its gate, then granted and in flight, until dropped.
pub struct Guard<'s> {
    sched: &'s Sched,
    actor: usize,
    ticket: u64,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let mut st = self.sched.state.lock().unwrap();
        if st.waiting.remove(&self.ticket).is_none()
            && let Some(n) = st.running.get_mut(&self.actor)
        {
            *n = n.saturating_sub(1);
        }
        drop(st);
        self.sched.changed.notify_one();
    }
}

/// An actor: a name for the log, and its future.
pub type Actor<'a> = (String, Pin<Box<dyn Future<Output = ()> + 'a>>);

impl Sched {
    pub fn new(seed: u64, rates: Rates, log: Arc<Mutex<Vec<String>>>) -> Self {
        let state = State {
            rng: SmallRng::seed_from_u64(seed ^ 0x5c4ed),
            rates,
            crashes: true,
            next_ticket: 0,
            waiting: BTreeMap::new(),
            running: BTreeMap::new(),
            live: BTreeSet::new(),
            crash: BTreeMap::new(),
            names: BTreeMap::new(),
            next_actor: 0,
            last: None,
        };
        Self { state: Mutex::new(state), changed: Notify::new(), log }
    }

    pub fn set_crashes(&self, on: bool) {
        self.state.lock().unwrap().crashes = on;
    }

    pub fn set_rates(&self, rates: Rates) {
        self.state.lock().unwrap().rates = rates;
    }

    /// Whether the caller is an actor (inside [`Sched::run`]).
    pub fn in_actor() -> bool {
        ACTOR.try_with(|_| ()).is_ok()
    }

    /// Wait for the scheduler's turn; the verdict, and the guard that keeps the call in flight.
    /// A crash verdict never returns: the actor's future is dropped at this point.
    pub async fn gate(&self, call: Call, what: &str) -> (Verdict, Option<Guard<'_>>) {
        let Ok(actor) = ACTOR.try_with(|a| *a) else { return (Verdict::Go, None) };
        let (tx, rx) = oneshot::channel();
        let ticket = {
            let mut st = self.state.lock().unwrap();
            let ticket = st.next_ticket;
            st.next_ticket += 1;
            st.waiting.insert(ticket, Waiter { actor, call, what: what.to_string(), grant: tx });
            ticket
        };
        // From here the guard answers for the ticket: a caller dropped while it waits (a
        // sibling future failed) leaves neither a waiting ticket nor a running call behind.
        let guard = Guard { sched: self, actor, ticket };
        self.changed.notify_one();
        let verdict = rx.await.unwrap_or(Verdict::Crash);
        if verdict == Verdict::Crash {
            drop(guard);
            self.crash_now().await;
        }
        (verdict, Some(guard))
    }

    /// The calling actor's process dies here.
    pub async fn crash_now(&self) -> ! {
        if let Ok(actor) = ACTOR.try_with(|a| *a) {
            let notify = self.state.lock().unwrap().crash.get(&actor).cloned();
            if let Some(n) = notify {
                n.notify_one();
            }
        }
        std::future::pending().await
    }

    fn note(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }

    /// Run `actors` to completion, interleaved call by call; for each, whether it finished
    /// (false: it crashed).
    pub async fn run(&self, actors: Vec<Actor<'_>>) -> Vec<bool> {
        let mut ids = Vec::new();
        {
            let mut st = self.state.lock().unwrap();
            for (name, _) in &actors {
                let id = st.next_actor;
                st.next_actor += 1;
                st.live.insert(id);
                st.crash.insert(id, Arc::new(Notify::new()));
                st.names.insert(id, name.clone());
                ids.push(id);
            }
        }
        let wrapped = actors.into_iter().zip(ids.iter().copied()).map(|((_, fut), id)| {
            let crash = self.state.lock().unwrap().crash[&id].clone();
            ACTOR.scope(id, async move {
                let finished = async {
                    self.gate(Call::Start, "start").await;
                    fut.await;
                };
                let done = tokio::select! {
                    () = finished => true,
                    () = crash.notified() => false,
                };
                self.finish(id);
                done
            })
        });
        let (_, done) = futures::join!(self.drive(), futures::future::join_all(wrapped));
        done
    }

    fn finish(&self, id: usize) {
        let mut st = self.state.lock().unwrap();
        st.live.remove(&id);
        st.running.remove(&id);
        st.crash.remove(&id);
        // Calls of a crashed actor still waiting die with it.
        st.waiting.retain(|_, w| w.actor != id);
        drop(st);
        self.changed.notify_one();
    }

    async fn drive(&self) {
        let mut last_progress = Instant::now();
        loop {
            let granted = {
                let mut st = self.state.lock().unwrap();
                if st.live.is_empty() {
                    return;
                }
                let settled =
                    st.live.iter().all(|a| st.running.get(a).copied().unwrap_or(0) == 0 && st.waiting.values().any(|w| w.actor == *a));
                if settled {
                    self.grant(&mut st);
                }
                settled
            };
            if granted {
                last_progress = Instant::now();
                continue;
            }
            if tokio::time::timeout(Duration::from_millis(500), self.changed.notified()).await.is_ok() {
                continue;
            }
            // An actor neither at a gate nor in a call for this long waits on another one (a
            // lock it holds across a call): let the waiting ones go on.
            let mut st = self.state.lock().unwrap();
            if st.running.values().all(|n| *n == 0) && !st.waiting.is_empty() && last_progress.elapsed() < Duration::from_secs(60) {
                self.note("  (an actor waits on another: the waiting calls go on)".into());
                self.grant(&mut st);
                continue;
            }
            drop(st);
            if last_progress.elapsed() > Duration::from_secs(60) {
                let st = self.state.lock().unwrap();
                panic!(
                    "sim scheduler stuck: live {:?}, running {:?}, waiting {:?}",
                    st.live,
                    st.running,
                    st.waiting.values().map(|w| (w.actor, w.call, w.what.clone())).collect::<Vec<_>>()
                );
            }
        }
    }

    /// Grant one waiting call: the actor that ran last, or (one time in `SWITCH`, or when it
    /// waits for nothing) another chosen by the seed; its oldest call; a verdict. Runs of one
    /// actor make the long interleavings likely (another actor's whole commit between two calls
    /// of one), as a priority scheduler does, where switching at every call would not.
    fn grant(&self, st: &mut State) {
        const SWITCH: u32 = 6;
        let actors: Vec<usize> = st.live.iter().copied().filter(|a| st.waiting.values().any(|w| w.actor == *a)).collect();
        let stay = st.last.filter(|a| actors.contains(a) && st.rng.random_range(0..SWITCH) != 0);
        let actor = stay.unwrap_or_else(|| actors[st.rng.random_range(0..actors.len())]);
        st.last = Some(actor);
        let ticket = *st.waiting.iter().find(|(_, w)| w.actor == actor).map(|(t, _)| t).expect("a waiting call");
        let waiter = st.waiting.remove(&ticket).expect("ticket");
        let verdict = Self::verdict(st, waiter.call);
        if verdict != Verdict::Go {
            let name = st.names.get(&actor).cloned().unwrap_or_default();
            self.note(format!("  {name}: {:?} {} -> {verdict:?}", waiter.call, waiter.what));
        }
        if verdict != Verdict::Crash {
            *st.running.entry(actor).or_default() += 1;
        }
        let _ = waiter.grant.send(verdict);
    }

    fn verdict(st: &mut State, call: Call) -> Verdict {
        if matches!(call, Call::Start | Call::Swap) {
            return Verdict::Go;
        }
        let roll = st.rng.random_range(0..1000);
        let r = st.rates;
        let crash = if st.crashes { r.crash } else { 0 };
        let lost = if matches!(call, Call::Write | Call::Delete) { r.lost_after } else { 0 };
        if roll < r.fail {
            Verdict::Fail
        } else if roll < r.fail + lost {
            Verdict::LostAfter
        } else if roll < r.fail + lost + crash {
            if matches!(call, Call::Write | Call::Delete) && roll % 2 == 0 { Verdict::CrashAfter } else { Verdict::Crash }
        } else {
            Verdict::Go
        }
    }
}
