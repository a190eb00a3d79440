//! A slowed-down device, for simulations: it stretches the wrapped device's
//! synchronous work by a factor (a slower CPU, time dilation so a simulated
//! GPU can be many times faster than it) and by a slowdown scripted over time
//! (CPU pressure from a game or a browser).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ats_core::device::{Buffer, Device, DeviceError, DeviceInfo, NodeArgs};
use ats_core::ledger::{Ledger, Region};

use super::config::Slowdown;

/// A device whose kernels take `dilation * slowdown(t)` times longer than the
/// wrapped device's (named as simulated in its info).
pub struct Throttled {
    inner: Arc<dyn Device>,
    info: DeviceInfo,
    dilation: f64,
    slowdown: Slowdown,
    start: Instant,
}

impl std::fmt::Debug for Throttled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Throttled({}, x{})", self.info.name, self.dilation)
    }
}

impl Throttled {
    /// Wraps `inner`; `dilation >= 1`.
    pub fn new(inner: Arc<dyn Device>, dilation: f64, slowdown: Slowdown) -> Throttled {
        let mut info = inner.info().clone();
        info.name = format!("{} (simulated x{dilation} slower)", info.name);
        Throttled {
            inner,
            info,
            dilation: dilation.max(1.0),
            slowdown,
            start: Instant::now(),
        }
    }

    /// Restarts the slowdown script's clock.
    pub fn restart_clock(&mut self) {
        self.start = Instant::now();
    }
}

impl Device for Throttled {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn ledger(&self) -> &Arc<Ledger> {
        self.inner.ledger()
    }

    fn alloc(&self, region: Region, bytes: usize, label: &str) -> Result<Buffer, DeviceError> {
        self.inner.alloc(region, bytes, label)
    }

    fn write(&self, dst: &Buffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        self.inner.write(dst, offset, src)
    }

    fn read(&self, src: &Buffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read(src, offset, dst)
    }

    fn run(&self, args: &NodeArgs<'_>) -> Result<(), DeviceError> {
        let t = Instant::now();
        self.inner.run(args)?;
        let took = t.elapsed().as_secs_f64();
        let factor = self.dilation * self.slowdown.at(self.start.elapsed().as_secs_f64());
        let extra = took * (factor - 1.0);
        if extra > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(extra));
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.inner.synchronize()
    }

    fn enter(&self, f: &mut (dyn FnMut() + Send)) {
        self.inner.enter(f)
    }
}
