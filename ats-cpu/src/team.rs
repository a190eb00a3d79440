//! A fork-join team of threads whose idle members spin before they sleep.
//!
//! Decode runs a few hundred short parallel regions per token, a few
//! microseconds apart. A pool whose idle threads yield or sleep between
//! regions (rayon's `sched_yield` then futex wait) hands its core to any
//! other runnable process at every region and waits for a wake-up at the
//! next: beside a nice-19 process, two ATS threads ran at half llama.cpp's
//! speed (`docs/benchmarks.md`). A [`Team`]'s idle members spin on one
//! atomic word for [`SPIN`] after their last region, then park; the thread
//! that starts a region works in it too, so `n` threads means the caller
//! and `n - 1` members.
//!
//! Kernels find the team the way rayon's iterators find their pool: through
//! [`Team::install`], which makes it the calling thread's current team for a
//! closure. Without one, [`for_each`] runs on the calling thread alone. A
//! region started inside another region's task also runs on its thread
//! alone (no nested fan-out).

use std::any::Any;
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle member spins for the next region before it parks:
/// longer than the gaps between a round's regions (norms, RoPE, sampling:
/// microseconds), far shorter than a person notices as load.
pub const SPIN: Duration = Duration::from_micros(200);

/// Bits of the state word: members inside the current region (low 32),
/// whether it still admits members, and the region's number above.
const ACTIVE: u64 = (1 << 32) - 1;
const OPEN: u64 = 1 << 32;
const EPOCH_SHIFT: u32 = 33;

/// What one participant runs: its share of a region, given the region's
/// claims and its slot (the caller 0, member `i` slot `i`).
struct Job<'a>(&'a (dyn Fn(&Claims, usize) + Sync));

/// What the caller and the members share.
struct Shared {
    /// What idle members poll, alone on its cache lines.
    hot: Hot,
    /// Whether `panic` holds a payload (read by the caller every region,
    /// without the lock).
    panicked: AtomicBool,
    /// Members parked, and the lock and condition they park on.
    sleepers: AtomicUsize,
    park: Mutex<()>,
    wake: Condvar,
    /// The first panic of a member in the current region.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Threads, the caller included.
    threads: usize,
    /// One region at a time.
    region: Mutex<()>,
    /// The current region's claims, made once: allocating them (aligned)
    /// every region was a third of an empty region's time.
    claims: Claims,
}

/// The words idle members spin on, on cache lines of their own: a write
/// to anything beside them (a lock, a reference count) would make every
/// spinning member fetch the line again and the writer wait for it.
#[repr(align(128))]
struct Hot {
    /// Epoch, open flag and active count (see [`OPEN`]).
    state: AtomicU64,
    /// The open region's job, valid while the region is open or has members
    /// (what it holds after is never read: reading needs joining an open
    /// region).
    job: AtomicPtr<Job<'static>>,
    /// Set when the team is dropped.
    stop: AtomicBool,
}

/// One claim counter on cache lines of its own ([`Claims`]).
#[repr(align(128))]
struct Run(AtomicU64);

/// A fixed set of threads for fork-join regions (see the module docs).
pub struct Team {
    shared: Arc<Shared>,
    members: Vec<JoinHandle<()>>,
}

thread_local! {
    /// The team regions started on this thread use ([`Team::install`]).
    static CURRENT: RefCell<Option<Arc<Shared>>> = const { RefCell::new(None) };
}

impl Team {
    /// A team of `threads` threads (the caller and `threads - 1` members
    /// named `{name}-{i}`).
    pub fn new(threads: usize, name: &str) -> std::io::Result<Team> {
        let shared = Arc::new(Shared {
            hot: Hot {
                state: AtomicU64::new(0),
                job: AtomicPtr::new(std::ptr::null_mut()),
                stop: AtomicBool::new(false),
            },
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
            panic: Mutex::new(None),
            threads: threads.max(1),
            region: Mutex::new(()),
            claims: Claims::new(threads.max(1)),
        });
        let mut team = Team {
            shared,
            members: Vec::new(),
        };
        for i in 1..threads {
            let shared = Arc::clone(&team.shared);
            let handle = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || member(&shared, i))?;
            team.members.push(handle);
        }
        Ok(team)
    }

    /// Threads in the team, the caller included.
    pub fn threads(&self) -> usize {
        self.shared.threads
    }

    /// Runs `f` with this team as the calling thread's current team.
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        let previous = CURRENT.with(|c| c.replace(Some(Arc::clone(&self.shared))));
        let _restore = Restore(previous);
        f()
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.hot.stop.store(true, Ordering::SeqCst);
        self.shared.wake_all();
        for m in self.members.drain(..) {
            let _ = m.join();
        }
    }
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Team({} threads)", self.threads())
    }
}

/// Puts back the previous current team when an install ends (or unwinds).
struct Restore(Option<Arc<Shared>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Threads of the calling thread's current team (1 without one).
pub fn current_threads() -> usize {
    CURRENT.with(|c| c.borrow().as_ref().map_or(1, |s| s.threads))
}

/// Calls `f(i)` for every `i` in `0..n` on the current team's threads,
/// each index once, in no set order; returns when all calls have.
pub fn for_each(n: usize, f: impl Fn(usize) + Sync) {
    for_each_init(n, || (), |_, i| f(i))
}

/// [`for_each`] with per-thread state: each thread that takes part calls
/// `init` once, before its first index, and passes the state to each `f`.
pub fn for_each_init<S>(n: usize, init: impl Fn() -> S + Sync, f: impl Fn(&mut S, usize) + Sync) {
    // The current team, taken out so that a region inside a task is serial.
    let restore = Restore(CURRENT.with(|c| c.borrow_mut().take()));
    let Some(shared) = restore.0.as_deref().filter(|t| n > 1 && t.threads > 1) else {
        let mut state = init();
        (0..n).for_each(|i| f(&mut state, i));
        return;
    };
    let share = |claims: &Claims, slot: usize| {
        let mut state = None;
        while let Some(i) = claims.next(slot) {
            f(state.get_or_insert_with(&init), i);
        }
    };
    shared.run(n, &share)
}

/// Who takes which index: slot `s` owns a contiguous run of indices and
/// takes them in order (a task's weights follow its predecessor's in
/// memory, so the prefetch streams run on from one to the next); a slot
/// whose run is done takes the last index of another's.
struct Claims {
    /// Per slot, the indices left: `lo << 32 | hi`.
    runs: Vec<Run>,
}

impl Claims {
    /// Claims for `slots` slots, with nothing to take.
    fn new(slots: usize) -> Claims {
        let runs = (0..slots).map(|_| Run(AtomicU64::new(0))).collect();
        Claims { runs }
    }

    /// Deals out `n` indices, a contiguous run a slot. Only while no
    /// region runs: members read the runs once the region that follows
    /// publishes them.
    fn deal(&self, n: usize) {
        assert!(n < 1 << 32, "{n} tasks in one region");
        let slots = self.runs.len();
        for (s, run) in self.runs.iter().enumerate() {
            let (lo, hi) = (n * s / slots, n * (s + 1) / slots);
            run.0
                .store(((lo as u64) << 32) | hi as u64, Ordering::Relaxed);
        }
    }

    /// The next index for `slot`: its own first, then another's.
    fn next(&self, slot: usize) -> Option<usize> {
        let slots = self.runs.len();
        let slot = slot % slots;
        self.take(slot, true)
            .or_else(|| (1..slots).find_map(|k| self.take((slot + k) % slots, false)))
    }

    /// Takes the first (`front`) or last index left in run `run`.
    fn take(&self, run: usize, front: bool) -> Option<usize> {
        let cell = &self.runs[run].0;
        let mut v = cell.load(Ordering::Relaxed);
        loop {
            let (lo, hi) = (v >> 32, v & u64::from(u32::MAX));
            if lo >= hi {
                return None;
            }
            let (next, taken) = if front {
                (((lo + 1) << 32) | hi, lo)
            } else {
                ((lo << 32) | (hi - 1), hi - 1)
            };
            match cell.compare_exchange_weak(v, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(taken as usize),
                Err(now) => v = now,
            }
        }
    }
}

/// [`for_each`] over the items of a slice, each lent mutably to one call.
pub fn for_each_mut<T: Send>(items: &mut [T], f: impl Fn(&mut T) + Sync) {
    for_each_mut_init(items, || (), |_, _, item| f(item))
}

/// [`for_each_mut`] over `data` cut into chunks of `chunk` items (the last
/// may be shorter): `f(i, chunk i)`.
pub fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let mut parts: Vec<(usize, &mut [T])> = data.chunks_mut(chunk.max(1)).enumerate().collect();
    for_each_mut(&mut parts, |(i, c)| f(*i, c));
}

/// [`for_each_init`] over the items of a slice: `f(state, index, item)`.
pub fn for_each_mut_init<T: Send, S>(
    items: &mut [T],
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize, &mut T) + Sync,
) {
    // Each index is taken once, so each lock is taken once, uncontended.
    let cells: Vec<Mutex<&mut T>> = items.iter_mut().map(Mutex::new).collect();
    for_each_init(cells.len(), init, |state, i| {
        let mut item = cells[i].lock().unwrap_or_else(PoisonError::into_inner);
        f(state, i, &mut item)
    })
}

impl Shared {
    /// Opens a region of `n` indices running `share` on every member that
    /// joins, runs it here too (slot 0), and returns once every member that
    /// joined has left.
    fn run(&self, n: usize, share: &(dyn Fn(&Claims, usize) + Sync)) {
        let _one = self.region.lock().unwrap_or_else(PoisonError::into_inner);
        // the last region waited for its members to leave: none reads these
        self.claims.deal(n);
        let job = Job(share);
        self.hot.job.store(
            (&job as *const Job<'_>).cast_mut().cast(),
            Ordering::Relaxed,
        );
        let epoch = (self.hot.state.load(Ordering::Relaxed) >> EPOCH_SHIFT) + 1;
        // No member is inside: the last region waited for them all.
        self.hot
            .state
            .store((epoch << EPOCH_SHIFT) | OPEN, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.wake_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| share(&self.claims, 0)));
        self.hot.state.fetch_and(!OPEN, Ordering::SeqCst);
        let mut spins = 0u32;
        while self.hot.state.load(Ordering::Acquire) & ACTIVE != 0 {
            backoff(&mut spins);
        }
        // a member's panic is published by its leaving, which we saw
        let theirs = if self.panicked.load(Ordering::Relaxed) {
            self.panicked.store(false, Ordering::Relaxed);
            let mut slot = self.panic.lock().unwrap_or_else(PoisonError::into_inner);
            slot.take()
        } else {
            None
        };
        if let Err(p) = mine {
            resume_unwind(p);
        }
        if let Some(p) = theirs {
            resume_unwind(p);
        }
    }

    /// Joins the region of `state` in `slot` if it still admits members.
    fn join(&self, mut state: u64, slot: usize) {
        let epoch = state >> EPOCH_SHIFT;
        loop {
            if state & OPEN == 0 || state >> EPOCH_SHIFT != epoch {
                return;
            }
            match self.hot.state.compare_exchange_weak(
                state,
                state + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        let job = self.hot.job.load(Ordering::Relaxed);
        // SAFETY: joining succeeded while the region was open, after its
        // caller stored `job` (the SeqCst store of the state publishes it),
        // and that caller does not return, so `job` and what it borrows stay
        // alive, until this member's leaving (the fetch_sub below) brings
        // the active count to zero.
        let share = unsafe { (*job).0 };
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| share(&self.claims, slot))) {
            let mut slot = self.panic.lock().unwrap_or_else(PoisonError::into_inner);
            slot.get_or_insert(p);
            self.panicked.store(true, Ordering::Relaxed);
        }
        self.hot.state.fetch_sub(1, Ordering::Release);
    }

    /// Waits for a region newer than `epoch`: spins for [`SPIN`], then parks.
    /// Returns the state word, or `None` when the team stops.
    fn wait(&self, epoch: u64) -> Option<u64> {
        let fresh = |s: u64| s >> EPOCH_SHIFT != epoch;
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let s = self.hot.state.load(Ordering::Acquire);
            if self.hot.stop.load(Ordering::Relaxed) {
                return None;
            }
            if fresh(s) {
                return Some(s);
            }
            std::hint::spin_loop();
            spins += 1;
            if spins.is_multiple_of(64) && start.elapsed() > SPIN {
                break;
            }
        }
        let mut guard = self.park.lock().unwrap_or_else(PoisonError::into_inner);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        loop {
            let s = self.hot.state.load(Ordering::SeqCst);
            if self.hot.stop.load(Ordering::SeqCst) || fresh(s) {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return (!self.hot.stop.load(Ordering::SeqCst)).then_some(s);
            }
            guard = self
                .wake
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Wakes every parked member.
    fn wake_all(&self) {
        let _g = self.park.lock().unwrap_or_else(PoisonError::into_inner);
        self.wake.notify_all();
    }
}

/// A member's life: wait for a region, join it, repeat until the team stops.
fn member(shared: &Shared, slot: usize) {
    let mut epoch = 0;
    while let Some(s) = shared.wait(epoch) {
        epoch = s >> EPOCH_SHIFT;
        shared.join(s, slot);
    }
}

/// Waiting for members to leave: spin, then yield the core now and then
/// (a member may have been preempted in its last task).
fn backoff(spins: &mut u32) {
    *spins += 1;
    if spins.is_multiple_of(4096) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_runs_once() {
        let team = Team::new(3, "t").unwrap();
        let hits: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        for _ in 0..50 {
            team.install(|| for_each(hits.len(), |i| _ = hits[i].fetch_add(1, Ordering::Relaxed)));
        }
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 50));
    }

    #[test]
    fn members_run_tasks_beside_the_caller() {
        // Each of the three tasks waits for the others to start: only three
        // threads at once finish them before the deadline.
        let team = Team::new(3, "t").unwrap();
        for _ in 0..20 {
            let started = AtomicUsize::new(0);
            let threads = Mutex::new(std::collections::HashSet::new());
            team.install(|| {
                for_each(3, |_| {
                    threads.lock().unwrap().insert(std::thread::current().id());
                    started.fetch_add(1, Ordering::SeqCst);
                    let deadline = Instant::now() + Duration::from_secs(20);
                    while started.load(Ordering::SeqCst) < 3 && Instant::now() < deadline {
                        std::thread::yield_now();
                    }
                })
            });
            assert_eq!(threads.lock().unwrap().len(), 3);
        }
    }

    #[test]
    fn parked_members_wake_for_the_next_region() {
        let team = Team::new(2, "t").unwrap();
        for _ in 0..3 {
            std::thread::sleep(SPIN * 5);
            let sum = AtomicUsize::new(0);
            team.install(|| for_each(100, |i| _ = sum.fetch_add(i, Ordering::Relaxed)));
            assert_eq!(sum.into_inner(), 4950);
        }
    }

    #[test]
    fn state_is_per_thread_and_made_once() {
        let team = Team::new(2, "t").unwrap();
        let inits = AtomicUsize::new(0);
        let total = AtomicUsize::new(0);
        team.install(|| {
            for_each_init(
                64,
                || {
                    inits.fetch_add(1, Ordering::Relaxed);
                    0usize
                },
                |count, _| {
                    *count += 1;
                    total.fetch_add(1, Ordering::Relaxed);
                },
            )
        });
        assert_eq!(total.into_inner(), 64);
        assert!((1..=2).contains(&inits.into_inner()));
    }

    #[test]
    fn a_region_inside_a_task_runs_serially() {
        let team = Team::new(2, "t").unwrap();
        let sum = AtomicUsize::new(0);
        team.install(|| {
            for_each(4, |_| {
                assert_eq!(current_threads(), 1);
                for_each(10, |j| _ = sum.fetch_add(j, Ordering::Relaxed));
            })
        });
        assert_eq!(sum.into_inner(), 4 * 45);
        assert_eq!(team.install(current_threads), 2);
        assert_eq!(current_threads(), 1);
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_and_the_team_goes_on() {
        let team = Team::new(2, "t").unwrap();
        for _ in 0..10 {
            let r = catch_unwind(AssertUnwindSafe(|| {
                team.install(|| for_each(8, |i| assert!(i != 5, "task 5")))
            }));
            assert!(r.is_err());
            let sum = AtomicUsize::new(0);
            team.install(|| for_each(8, |i| _ = sum.fetch_add(i, Ordering::Relaxed)));
            assert_eq!(sum.into_inner(), 28);
        }
    }

    #[test]
    fn two_callers_share_one_team() {
        let team = Team::new(2, "t").unwrap();
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let sum = AtomicUsize::new(0);
                        team.install(|| for_each(16, |i| _ = sum.fetch_add(i, Ordering::Relaxed)));
                        assert_eq!(sum.into_inner(), 120);
                    }
                });
            }
        });
    }
}
