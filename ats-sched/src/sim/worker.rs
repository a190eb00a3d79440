//! A stream of the simulated GPU: one thread running jobs in order, with a
//! virtual timeline so that many tiny delays add up instead of each paying
//! the operating system's sleep granularity.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce(&mut Timeline) + Send>;

/// The simulated clock of one stream.
pub(crate) struct Timeline {
    /// When the stream's last job is due to finish, in simulated (wall) time.
    due: Instant,
}

impl Timeline {
    /// Accounts `busy` seconds of simulated work for a job that started at
    /// `start` and already took until now; sleeps when the stream runs ahead
    /// of its timeline by more than half a millisecond.
    pub fn advance(&mut self, start: Instant, busy: f64) {
        let begin = self.due.max(start);
        self.due = begin + Duration::from_secs_f64(busy.max(0.0));
        self.settle(Duration::from_micros(500));
    }

    /// Sleeps until the timeline is within `slack` of now.
    pub fn settle(&mut self, slack: Duration) {
        let now = Instant::now();
        if self.due > now + slack {
            std::thread::sleep(self.due - now);
        }
    }
}

/// A signal between streams and the host.
#[derive(Debug, Default)]
pub(crate) struct SimEvent {
    done: Mutex<bool>,
    cv: Condvar,
}

impl SimEvent {
    pub fn signal(&self) {
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }

    pub fn wait(&self) {
        let mut d = self.done.lock().unwrap_or_else(|p| p.into_inner());
        while !*d {
            d = self.cv.wait(d).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// One stream: a thread and its queue.
pub(crate) struct Worker {
    tx: Option<Sender<Job>>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    pub fn new(name: &str) -> Worker {
        let (tx, rx) = channel::<Job>();
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let mut tl = Timeline {
                    due: Instant::now(),
                };
                while let Ok(job) = rx.recv() {
                    job(&mut tl);
                }
            })
            .expect("spawning a simulator thread");
        Worker {
            tx: Some(tx),
            handle: Some(handle),
        }
    }

    /// Queues a job.
    pub fn submit(&self, job: impl FnOnce(&mut Timeline) + Send + 'static) {
        if let Some(tx) = &self.tx {
            // the receiver lives as long as the worker; a send error means the
            // thread died, which `fence` reports as a hang-free no-op
            let _ = tx.send(Box::new(job));
        }
    }

    /// Returns an event signalled when everything queued so far has run
    /// (and the timeline has caught up).
    pub fn marker(&self) -> Arc<SimEvent> {
        let ev = Arc::new(SimEvent::default());
        let e = ev.clone();
        self.submit(move |tl| {
            tl.settle(Duration::ZERO);
            e.signal();
        });
        ev
    }

    /// Blocks until everything queued so far has run.
    pub fn fence(&self) {
        if self.handle.as_ref().is_some_and(|h| !h.is_finished()) {
            self.marker().wait();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
