//! [`InProcess`]: ranks that are threads of one process, meeting in shared
//! memory. Each collective is a round keyed by its call number: every rank
//! deposits its part, the last one to arrive computes the result (sums in
//! rank order), and each rank takes it. A rank that waits longer than the
//! timeout gets an error naming the ranks that did not arrive.

use super::{check_root, error, Collective, PendingReduce, Values};
use crate::Error;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// One rank of a group of threads (see the module documentation of
/// [`crate::distributed`]). Made by [`InProcess::group`], one handle per
/// rank, each moved to its thread.
pub struct InProcess {
    rank: usize,
    shared: Arc<Shared>,
    calls: AtomicU64,
    timeout: Duration,
}

struct Shared {
    world: usize,
    rounds: Mutex<HashMap<u64, Round>>,
    arrived: Condvar,
}

/// One collective call of every rank.
struct Round {
    op: &'static str,
    parts: Vec<Option<Part>>,
    outcome: Option<Result<Arc<Values>, String>>,
    taken: usize,
}

/// What a rank brings: its buffer (an all-reduce's, a broadcast root's) or
/// only its length (a broadcast's other ranks).
struct Part {
    len: usize,
    data: Option<Values>,
}

impl InProcess {
    /// `world` ranks (at least 1), numbered 0, 1, …, with a 60 s timeout.
    pub fn group(world: usize) -> Vec<InProcess> {
        let shared = Arc::new(Shared {
            world: world.max(1),
            rounds: Mutex::new(HashMap::new()),
            arrived: Condvar::new(),
        });
        (0..world.max(1))
            .map(|rank| InProcess {
                rank,
                shared: shared.clone(),
                calls: AtomicU64::new(0),
                timeout: Duration::from_secs(60),
            })
            .collect()
    }

    /// This rank with another timeout for each collective.
    pub fn with_timeout(mut self, timeout: Duration) -> InProcess {
        self.timeout = timeout;
        self
    }

    /// Deposits this rank's part of its next collective; the call number.
    fn deposit(&self, op: &'static str, part: Part) -> u64 {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let world = self.shared.world;
        let mut rounds = self.shared.rounds.lock().unwrap_or_else(|e| e.into_inner());
        let round = rounds.entry(call).or_insert_with(|| Round {
            op,
            parts: (0..world).map(|_| None).collect(),
            outcome: None,
            taken: 0,
        });
        if round.op != op && round.outcome.is_none() {
            round.outcome = Some(Err(format!(
                "call {call}: rank {} called {op} where another rank called {}",
                self.rank, round.op
            )));
        }
        round.parts[self.rank] = Some(part);
        if round.outcome.is_none() && round.parts.iter().all(Option::is_some) {
            round.outcome = Some(combine(round));
        }
        drop(rounds);
        self.shared.arrived.notify_all();
        call
    }

    /// Waits for call `call`'s result, up to the timeout.
    fn collect(&self, op: &'static str, call: u64) -> Result<Arc<Values>, Error> {
        let deadline = Instant::now() + self.timeout;
        let mut rounds = self.shared.rounds.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let round = rounds.get_mut(&call).expect("deposited before collected");
            if let Some(outcome) = round.outcome.clone() {
                round.taken += 1;
                if round.taken == self.shared.world {
                    rounds.remove(&call);
                }
                return outcome.map_err(|m| error(op, m));
            }
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<usize> = (0..self.shared.world)
                    .filter(|&r| round.parts[r].is_none())
                    .collect();
                return Err(error(
                    op,
                    format!(
                        "rank {} waited {:?} for call {call}; ranks {missing:?} did not arrive",
                        self.rank, self.timeout
                    ),
                ));
            }
            rounds = self
                .shared
                .arrived
                .wait_timeout(rounds, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The result of a round every rank has joined: the sum in rank order (an
/// all-reduce) or the one buffer given (a broadcast), or why there is none.
fn combine(round: &Round) -> Result<Arc<Values>, String> {
    let parts: Vec<&Part> = round.parts.iter().flatten().collect();
    let len = parts[0].len;
    if let Some(r) = parts.iter().position(|p| p.len != len) {
        return Err(format!(
            "{}: rank 0 gave {len} values, rank {r} {}",
            round.op, parts[r].len
        ));
    }
    let given: Vec<&Values> = parts.iter().filter_map(|p| p.data.as_ref()).collect();
    if round.op == "broadcast" {
        return given
            .first()
            .map(|d| Arc::new((*d).clone()))
            .ok_or_else(|| "broadcast: no rank is the root".to_string());
    }
    Values::sum(&given)
        .map(Arc::new)
        .map_err(|m| format!("{}: {m}", round.op))
}

impl Collective for InProcess {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.shared.world
    }

    fn all_reduce_sum_start(&self, buf: Values) -> Result<PendingReduce, Error> {
        let part = Part {
            len: buf.len(),
            data: Some(buf),
        };
        let call = self.deposit("all_reduce", part);
        let this = InProcess {
            rank: self.rank,
            shared: self.shared.clone(),
            calls: AtomicU64::new(0),
            timeout: self.timeout,
        };
        Ok(PendingReduce::new(move || {
            this.collect("all_reduce", call)
                .map(|s| Arc::try_unwrap(s).unwrap_or_else(|shared| (*shared).clone()))
        }))
    }

    fn broadcast(&self, buf: &mut [f64], root: usize) -> Result<(), Error> {
        check_root(root, self.shared.world)?;
        let data = (self.rank == root).then(|| Values::F64(buf.to_vec()));
        let call = self.deposit(
            "broadcast",
            Part {
                len: buf.len(),
                data,
            },
        );
        match &*self.collect("broadcast", call)? {
            Values::F64(v) => buf.copy_from_slice(v),
            Values::F32(_) => return Err(error("broadcast", "f32 values from the root".into())),
        }
        Ok(())
    }
}
