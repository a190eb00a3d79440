//! The two streams of a device and the events that order them.
//!
//! The compute stream runs kernels and moves activations (SM copies over
//! mapped host memory); the transfer stream moves weights with the copy
//! engine. cudarc's per-allocation event tracking is off: the executor
//! orders the streams explicitly with [`GpuEvent`]s.

use std::sync::Arc;

use ats_core::device::{Event, Stream};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, sys};

use crate::CudaError;
use crate::memory::drv;

/// An event recorded on one of the device's streams (the payload of an
/// [`ats_core::device::Event`]).
#[derive(Debug)]
pub struct GpuEvent(pub CudaEvent);

/// The compute and transfer streams.
#[derive(Debug)]
pub struct Streams {
    /// Kernels and activation copies.
    pub compute: Arc<CudaStream>,
    /// Weight copies.
    pub transfer: Arc<CudaStream>,
}

impl Streams {
    /// Creates both streams (non-blocking: they never wait on the legacy
    /// default stream). Event tracking must already be off.
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Streams, CudaError> {
        Ok(Streams {
            compute: drv("creating the compute stream", ctx.new_stream())?,
            transfer: drv("creating the transfer stream", ctx.new_stream())?,
        })
    }

    /// The stream for `s`.
    pub fn get(&self, s: Stream) -> &Arc<CudaStream> {
        match s {
            Stream::Compute => &self.compute,
            Stream::Transfer => &self.transfer,
        }
    }

    /// An event (no timing) after the work queued so far on `s`.
    pub fn record(&self, s: Stream) -> Result<CudaEvent, CudaError> {
        drv("recording an event", self.get(s).record_event(None))
    }

    /// A timing event after the work queued so far on `s`, reusing one of
    /// `pool` (events whose spans were read) when there is one: two events
    /// per node, created and destroyed each time, were host work on every
    /// launch.
    pub fn record_timed(
        &self,
        s: Stream,
        pool: &mut Vec<CudaEvent>,
    ) -> Result<CudaEvent, CudaError> {
        let stream = self.get(s);
        let ev = match pool.pop() {
            Some(ev) => ev,
            None => drv(
                "creating a timing event",
                stream
                    .context()
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)),
            )?,
        };
        drv("recording a timing event", ev.record(stream))?;
        Ok(ev)
    }

    /// Makes later work on `waiter` wait for the work queued so far on `on`.
    pub fn order(&self, waiter: Stream, on: Stream) -> Result<(), CudaError> {
        let ev = self.record(on)?;
        drv("waiting on an event", self.get(waiter).wait(&ev))
    }
}

/// The [`GpuEvent`] inside an ATS event, if it is one.
pub fn gpu_event(e: &Event) -> Option<&GpuEvent> {
    e.0.downcast_ref::<GpuEvent>()
}

/// Kernel or copy spans recorded with timing events, read back later.
#[derive(Debug, Default)]
pub struct Spans {
    /// `(node id, start, end)` on the compute stream.
    pub nodes: Vec<(usize, CudaEvent, CudaEvent)>,
    /// `(bytes, start, end)` on the transfer stream.
    pub copies: Vec<(u64, CudaEvent, CudaEvent)>,
    /// Events whose spans were read, for [`Streams::record_timed`] to reuse.
    pub pool: Vec<CudaEvent>,
}

/// Spans kept when nobody drains them (oldest dropped first).
const MAX_SPANS: usize = 1 << 16;

impl Spans {
    /// Drops the oldest spans beyond `MAX_SPANS` (timings nobody reads).
    pub fn bound(&mut self) {
        if self.nodes.len() > MAX_SPANS {
            self.nodes.drain(..self.nodes.len() - MAX_SPANS / 2);
        }
        if self.copies.len() > MAX_SPANS {
            self.copies.drain(..self.copies.len() - MAX_SPANS / 2);
        }
    }

    /// Seconds between two completed events (waits for the end).
    pub fn secs(start: &CudaEvent, end: &CudaEvent) -> Result<f64, CudaError> {
        drv("waiting for a timing event", end.synchronize())?;
        let ms = drv("reading a timing event", start.elapsed_ms(end))?;
        Ok(f64::from(ms) / 1e3)
    }
}
