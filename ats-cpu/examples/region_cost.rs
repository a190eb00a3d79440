//! What handing work to the other threads costs, for the round analysis in
//! docs/benchmarks.md: an empty region of the team (`team::for_each` of
//! `TASKS` empty tasks, as every parallel op starts and ends) against a
//! spin barrier between threads that keep running (what a round whose
//! threads all walk its ops would pay per op instead).
//!
//! `cargo run --release -p ats-cpu --example region_cost -- [THREADS] [TASKS] [ROUNDS]`

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use ats_cpu::team::{self, Team};

#[path = "../benches/common/mod.rs"]
mod common;

use common::arg_or;

/// A sense-counting spin barrier for `n` threads.
struct SpinBarrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
    n: usize,
}

impl SpinBarrier {
    fn wait(&self) {
        let g = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.store(g + 1, Ordering::Release);
        } else {
            while self.generation.load(Ordering::Acquire) == g {
                std::hint::spin_loop();
            }
        }
    }
}

/// Nanoseconds per empty region of `tasks` tasks on a team of `threads`.
fn region_ns(threads: usize, tasks: usize, rounds: usize) -> f64 {
    let t = Team::new(threads, "region").expect("threads");
    t.install(|| {
        for _ in 0..rounds / 10 {
            team::for_each(tasks, |i| {
                black_box(i);
            });
        }
        let start = Instant::now();
        for _ in 0..rounds {
            team::for_each(tasks, |i| {
                black_box(i);
            });
        }
        start.elapsed().as_secs_f64() * 1e9 / rounds as f64
    })
}

/// Nanoseconds per barrier of `threads` threads.
fn barrier_ns(threads: usize, rounds: usize) -> f64 {
    let b = Arc::new(SpinBarrier {
        arrived: AtomicUsize::new(0),
        generation: AtomicUsize::new(0),
        n: threads,
    });
    let others: Vec<_> = (1..threads)
        .map(|_| {
            let b = Arc::clone(&b);
            std::thread::spawn(move || (0..rounds).for_each(|_| b.wait()))
        })
        .collect();
    let start = Instant::now();
    (0..rounds).for_each(|_| b.wait());
    let ns = start.elapsed().as_secs_f64() * 1e9 / rounds as f64;
    others
        .into_iter()
        .for_each(|h| h.join().expect("barrier thread"));
    ns
}

fn main() {
    let threads = arg_or(1, 2usize);
    let tasks = arg_or(2, 8usize);
    let rounds = arg_or(3, 200_000usize);
    for _ in 0..3 {
        println!(
            "{threads} threads: empty region of {tasks} tasks {:.0} ns, spin barrier {:.0} ns",
            region_ns(threads, tasks, rounds),
            barrier_ns(threads, rounds)
        );
    }
}
