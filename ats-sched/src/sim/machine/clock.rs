//! The discrete-event clock of a modelled machine: the host thread's time,
//! the tails of the GPU's compute and transfer streams, events, and the
//! shared resources work competes for over time (the PCIe link per
//! direction, the host's memory bandwidth), all in virtual seconds.
//!
//! Work is timed as the executor issues it. A kernel starts when its stream
//! is free and the host has launched it; a copy when the transfer stream is
//! free; a wait moves a stream's tail to the event's time; a blocking call
//! moves the host to the work's end. A transfer's rate at each moment is the
//! least of its own, what the link has left and what host memory has left
//! (transfers issued earlier keep theirs: DMA is never slowed by what comes
//! after it); a CPU op's memory bandwidth is what PCIe traffic leaves of the
//! host's, and its cores what other programs leave. Scenario scripts change
//! rates at their steps, and every rate is integrated piecewise between
//! the moments anything changes, so durations are exact for the model and
//! the same on any machine.

use std::sync::{Mutex, MutexGuard};

use super::spec::MachineSpec;
use super::timing::{Work, cpu_fixed_secs, cpu_parts, gpu_secs};

/// A stream of the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamId {
    Compute,
    Transfer,
}

/// A copy's direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    H2d,
    D2h,
}

/// Use of a resource over time: segments of constant rate (bytes/s).
#[derive(Clone, Debug, Default)]
struct Lane {
    segs: Vec<(f64, f64, f64)>,
}

impl Lane {
    fn used(&self, t: f64) -> f64 {
        self.segs
            .iter()
            .filter(|s| s.0 <= t && t < s.1)
            .map(|s| s.2)
            .sum()
    }

    /// The first moment after `t` at which the use changes.
    fn next_change(&self, t: f64) -> f64 {
        self.segs
            .iter()
            .flat_map(|s| [s.0, s.1])
            .filter(|&x| x > t)
            .fold(f64::INFINITY, f64::min)
    }

    fn add(&mut self, from: f64, to: f64, rate: f64) {
        if to > from && rate > 0.0 {
            self.segs.push((from, to, rate));
        }
    }

    /// Forgets what ended before `t` (no new work can start earlier).
    fn prune(&mut self, t: f64) {
        self.segs.retain(|s| s.1 > t);
    }
}

/// Integrates `work` units from `start` at the rate `rate_at(t)` gives,
/// which holds until the returned moment; `seg` sees each piece. Returns
/// the end.
fn integrate(
    start: f64,
    work: f64,
    mut rate_at: impl FnMut(f64) -> (f64, f64),
    mut seg: impl FnMut(f64, f64, f64),
) -> f64 {
    let (mut t, mut left) = (start, work.max(0.0));
    if left == 0.0 {
        return t;
    }
    for _ in 0..1_000_000 {
        let (r, until) = rate_at(t);
        let r = r.max(1e-3);
        let end = t + left / r;
        if end <= until {
            seg(t, end, r);
            return end;
        }
        seg(t, until, r);
        left -= r * (until - t);
        t = until;
    }
    t + left / rate_at(t).0.max(1e-3)
}

/// What the model did, for reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelStats {
    /// GPU kernels run.
    pub kernels: u64,
    /// Their modelled seconds.
    pub kernel_secs: f64,
    /// Host-device copies (weights and activations).
    pub copies: u64,
    /// Bytes they moved.
    pub copy_bytes: u64,
    /// Their modelled seconds.
    pub copy_secs: f64,
    /// CPU ops run.
    pub cpu_ops: u64,
    /// Their modelled seconds.
    pub cpu_secs: f64,
}

struct State {
    host: f64,
    compute: f64,
    transfer: f64,
    h2d: Lane,
    d2h: Lane,
    /// Host memory bandwidth PCIe traffic uses.
    dma: Lane,
    /// Constant extra DMA traffic, GB/s (the profile's contended samples).
    background_dma: f64,
    /// Virtual time at which the scenario's clock reads 0.
    origin: f64,
    nodes: Vec<(usize, f64)>,
    copies: Vec<(u64, f64)>,
    stats: ModelStats,
}

/// A modelled machine's clock and resources, shared by its devices.
pub struct Model {
    pub(crate) spec: MachineSpec,
    state: Mutex<State>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Model({})", self.spec.name)
    }
}

impl Model {
    /// A machine at virtual time 0.
    pub(crate) fn new(spec: MachineSpec) -> Model {
        Model {
            spec,
            state: Mutex::new(State {
                host: 0.0,
                compute: 0.0,
                transfer: 0.0,
                h2d: Lane::default(),
                d2h: Lane::default(),
                dma: Lane::default(),
                background_dma: 0.0,
                origin: 0.0,
                nodes: Vec::new(),
                copies: Vec::new(),
                stats: ModelStats::default(),
            }),
        }
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The host thread's time.
    pub(crate) fn now(&self) -> f64 {
        self.st().host
    }

    /// Seconds on the scenario's clock.
    pub(crate) fn scenario_time(&self) -> f64 {
        let st = self.st();
        st.host - st.origin
    }

    /// Starts the scenario's clock now (its scripts count from here).
    pub(crate) fn start_scenario(&self) {
        let mut st = self.st();
        st.origin = st.host;
    }

    /// Keeps `gbps` of modelled DMA traffic on host memory (0: none).
    pub(crate) fn set_background_dma(&self, gbps: f64) {
        self.st().background_dma = gbps.max(0.0);
    }

    pub(crate) fn stats(&self) -> ModelStats {
        self.st().stats.clone()
    }

    pub(crate) fn reset_stats(&self) {
        self.st().stats = ModelStats::default();
    }

    /// The kernel and copy times logged since the last call.
    pub(crate) fn drain(&self) -> ats_core::device::DeviceTimings {
        let mut st = self.st();
        ats_core::device::DeviceTimings {
            nodes: std::mem::take(&mut st.nodes),
            copies: std::mem::take(&mut st.copies),
        }
    }

    /// Advances the host by `secs` of its own work.
    pub(crate) fn host_busy(&self, secs: f64) {
        let mut st = self.st();
        st.host += secs.max(0.0);
    }

    /// A memory copy on the host (staging, activations between buffers).
    pub(crate) fn host_memcpy(&self, bytes: usize) {
        let secs = bytes as f64 / (self.spec.host.mem_gbps * 1e9);
        self.host_busy(secs);
    }

    /// Cores ATS's `threads` threads get at scenario time `t`.
    fn cores_at(&self, threads: usize, t: f64) -> f64 {
        let free = self.spec.host.cores as f64 * (1.0 - self.spec.scenario.cpu_load.at(t));
        (threads as f64)
            .min(free)
            .min(self.spec.host.cores as f64)
            .max(0.25)
    }

    /// Runs op `w` on the host's `threads` threads: the host is busy until
    /// it ends. Returns its modelled seconds.
    pub(crate) fn cpu_op(&self, w: &Work, threads: usize) -> f64 {
        let (core_secs, bytes) = cpu_parts(&self.spec.host, w);
        let h = &self.spec.host;
        let sc = &self.spec.scenario;
        let mut st = self.st();
        let start = st.host + cpu_fixed_secs(h, w);
        let origin = st.origin;
        let bg = st.background_dma * 1e9;
        let mem = h.mem_gbps * 1e9;
        let dma = &st.dma;
        let end = integrate(
            start,
            1.0,
            |t| {
                let ts = t - origin;
                let cores = self.cores_at(threads, ts);
                let compute = core_secs / (cores * sc.cpu_clock.at(ts));
                let left = (mem - dma.used(t) - bg).max(0.1 * mem);
                let bw = (cores * h.core_gbps * 1e9).min(left);
                let secs = compute.max(bytes / bw).max(1e-12);
                let until = dma
                    .next_change(t)
                    .min(sc.cpu_load.next_after(ts) + origin)
                    .min(sc.cpu_clock.next_after(ts) + origin);
                (1.0 / secs, until)
            },
            |_, _, _| {},
        );
        let secs = end - st.host;
        st.host = end;
        st.stats.cpu_ops += 1;
        st.stats.cpu_secs += secs;
        let now = st.host;
        st.prune(now);
        secs
    }

    /// Launches kernel `w` (graph node `node`, if it is one) on the compute
    /// stream. Returns its modelled seconds.
    pub(crate) fn gpu_kernel(&self, node: Option<usize>, w: &Work) -> f64 {
        let nominal = gpu_secs(&self.spec.gpu, w);
        let mut st = self.st();
        st.host += self.spec.gpu.launch_us * 1e-6;
        let start = st.compute.max(st.host);
        let end = self.gpu_time(&st, start, nominal);
        st.compute = end;
        st.stats.kernels += 1;
        st.stats.kernel_secs += end - start;
        if let Some(n) = node {
            st.nodes.push((n, end - start));
        }
        end - start
    }

    /// The end of `nominal` seconds of GPU work starting at `start`, under
    /// the scenario's GPU load and clock.
    fn gpu_time(&self, st: &State, start: f64, nominal: f64) -> f64 {
        let sc = &self.spec.scenario;
        let origin = st.origin;
        integrate(
            start,
            nominal,
            |t| {
                let ts = t - origin;
                let rate = (1.0 - sc.gpu_load.at(ts)) * sc.gpu_clock.at(ts);
                let until = (sc.gpu_load.next_after(ts).min(sc.gpu_clock.next_after(ts))) + origin;
                (rate, until)
            },
            |_, _, _| {},
        )
    }

    /// A transfer of `bytes` in `dir` from `start` at most `own` bytes/s
    /// (less under GPU load when `sm` drives it), sharing the link and host
    /// memory with earlier transfers. Returns its end.
    fn transfer(
        &self,
        st: &mut State,
        start: f64,
        bytes: f64,
        dir: Dir,
        own: f64,
        sm: bool,
    ) -> f64 {
        let l = &self.spec.link;
        let sc = &self.spec.scenario;
        let origin = st.origin;
        let link_cap = match dir {
            Dir::H2d => l.h2d_gbps,
            Dir::D2h => l.d2h_gbps,
        } * 1e9;
        let mem = self.spec.host.mem_gbps * 1e9;
        let bg = st.background_dma * 1e9;
        let mut pieces = Vec::new();
        let end = {
            let lane = match dir {
                Dir::H2d => &st.h2d,
                Dir::D2h => &st.d2h,
            };
            let dma = &st.dma;
            integrate(
                start,
                bytes,
                |t| {
                    let ts = t - origin;
                    let slow = sc.pcie_slow.at(ts);
                    let mut mine = own / slow;
                    if sm {
                        mine *= (1.0 - sc.gpu_load.at(ts)) * sc.gpu_clock.at(ts);
                    }
                    let link_left = link_cap / slow - lane.used(t);
                    let mem_left = mem - dma.used(t) - bg;
                    let r = mine.min(link_left).min(mem_left).max(0.05 * mine);
                    let mut until = lane
                        .next_change(t)
                        .min(dma.next_change(t))
                        .min(sc.pcie_slow.next_after(ts) + origin);
                    if sm {
                        until = until
                            .min(sc.gpu_load.next_after(ts) + origin)
                            .min(sc.gpu_clock.next_after(ts) + origin);
                    }
                    (r, until)
                },
                |a, b, r| pieces.push((a, b, r)),
            )
        };
        for (a, b, r) in pieces {
            match dir {
                Dir::H2d => st.h2d.add(a, b, r),
                Dir::D2h => st.d2h.add(a, b, r),
            }
            st.dma.add(a, b, r);
        }
        st.stats.copies += 1;
        st.stats.copy_bytes += bytes as u64;
        st.stats.copy_secs += end - start;
        end
    }

    /// An activation copy by an SM copy kernel over mapped host memory, on
    /// the compute stream; with `host_waits` (a read) the host blocks until
    /// it is done.
    pub(crate) fn sm_copy(&self, bytes: usize, dir: Dir, host_waits: bool) {
        let g = &self.spec.gpu;
        let mut st = self.st();
        st.host += g.launch_us * 1e-6;
        let start = st.compute.max(st.host) + g.kernel_us * 1e-6;
        let own = self.spec.link.sm_copy_gbps * 1e9;
        let end = self.transfer(&mut st, start, bytes as f64, dir, own, true);
        st.compute = end;
        if host_waits {
            st.host = st.host.max(end) + g.sync_us * 1e-6;
            let now = st.host;
            st.prune(now);
        }
    }

    /// A copy-engine copy on the transfer stream of `bytes` (after the
    /// compute stream's earlier work when `after_compute`; from pageable
    /// memory when `pageable`). With `host_waits` the host blocks until it
    /// is done and the compute stream is ordered after it; `log` records
    /// it among the weight copies the executor reads.
    pub(crate) fn engine_copy(
        &self,
        bytes: usize,
        pageable: bool,
        after_compute: bool,
        host_waits: bool,
        log: bool,
    ) {
        let l = &self.spec.link;
        let mut st = self.st();
        st.host += l.copy_us * 1e-6;
        let mut start = st.transfer.max(st.host);
        if after_compute {
            start = start.max(st.compute);
        }
        let own = if pageable {
            l.pageable_gbps
        } else {
            l.h2d_gbps
        } * 1e9;
        let end = self.transfer(&mut st, start, bytes as f64, Dir::H2d, own, false);
        st.transfer = end;
        if log {
            st.copies.push((bytes as u64, end - start));
        }
        if host_waits {
            st.compute = st.compute.max(end);
            st.host = st.host.max(end) + self.spec.gpu.sync_us * 1e-6;
            let now = st.host;
            st.prune(now);
        }
    }

    /// The routed-expert copy kernel on the transfer stream: `experts`
    /// experts of `bytes` in all, SMs reading mapped host memory at a rate
    /// that grows with the experts copied at once. Not logged among the
    /// weight copies (the CUDA backend cannot time it as a copy of a known
    /// number of bytes either).
    pub(crate) fn routed_copy(&self, bytes: usize, experts: usize) {
        let g = &self.spec.gpu;
        let mut st = self.st();
        st.host += g.launch_us * 1e-6;
        let start = st.transfer.max(st.host) + g.kernel_us * 1e-6;
        let own = (g.routed_expert_gbps * experts.max(1) as f64).min(g.routed_max_gbps) * 1e9;
        let end = self.transfer(&mut st, start, bytes as f64, Dir::H2d, own, true);
        st.transfer = end;
    }

    /// An event after the work submitted so far to `s`: the moment the
    /// stream reaches it.
    pub(crate) fn record(&self, s: StreamId) -> f64 {
        let mut st = self.st();
        st.host += 0.5e-6;
        let tail = match s {
            StreamId::Compute => st.compute,
            StreamId::Transfer => st.transfer,
        };
        tail.max(st.host)
    }

    /// Later work on `s` waits for time `t`.
    pub(crate) fn wait(&self, s: StreamId, t: f64) {
        let mut st = self.st();
        st.host += 0.5e-6;
        match s {
            StreamId::Compute => st.compute = st.compute.max(t),
            StreamId::Transfer => st.transfer = st.transfer.max(t),
        }
    }

    /// The host blocks until time `t`.
    pub(crate) fn host_wait(&self, t: f64) {
        let mut st = self.st();
        st.host = st.host.max(t) + self.spec.gpu.sync_us * 1e-6;
        let now = st.host;
        st.prune(now);
    }

    /// The host blocks until both streams are idle.
    pub(crate) fn synchronize(&self) {
        let t = {
            let st = self.st();
            st.compute.max(st.transfer)
        };
        self.host_wait(t);
    }
}

impl State {
    fn prune(&mut self, t: f64) {
        self.h2d.prune(t);
        self.d2h.prune(t);
        self.dma.prune(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::machine::timing::Class;

    fn model(extra: &str) -> Model {
        let spec = MachineSpec::parse(&format!("rtx3060-laptop{extra}")).unwrap();
        Model::new(spec)
    }

    fn matvec(bytes: f64) -> Work {
        Work {
            class: Class::MatMul,
            flops: 2.0 * bytes,
            bytes,
            tokens: 1.0,
            expert_products: 0.0,
            expert_tokens: 0.0,
            decode_flops: 0.0,
            decode_raw_flops: 0.0,
        }
    }

    #[test]
    fn a_cpu_op_is_slower_while_a_copy_streams() {
        let m = model("");
        let alone = m.cpu_op(&matvec(64e6), 8);
        let m = model("");
        // a 1 GB weight copy is issued first and runs under the op
        m.engine_copy(1 << 30, false, false, false, true);
        let shared = m.cpu_op(&matvec(64e6), 8);
        assert!(shared > alone * 1.3, "{alone} vs {shared}");
    }

    #[test]
    fn copies_share_the_link_and_streams_order_work() {
        let m = model("");
        let gb = 1usize << 30;
        m.engine_copy(gb, false, false, false, true);
        let ev = m.record(StreamId::Transfer);
        let one = ev;
        // the compute stream waits for the copy: the kernel starts after it
        m.wait(StreamId::Compute, ev);
        let k = m.gpu_kernel(Some(3), &matvec(1e6));
        m.synchronize();
        assert!(m.now() >= one + k, "{} {one} {k}", m.now());
        let t = m.drain();
        assert_eq!(t.nodes.len(), 1);
        assert_eq!(t.copies.len(), 1);
        // two copies at once take about twice as long as one alone
        let m2 = model("");
        m2.engine_copy(gb, false, false, false, true);
        m2.sm_copy(gb, Dir::H2d, true);
        assert!(m2.now() > one * 1.5, "{} vs {one}", m2.now());
    }

    #[test]
    fn scenarios_slow_work_from_their_step() {
        let base = model("");
        let t0 = base.cpu_op(&matvec(64e6), 8);
        let loaded = model(",cpuload=0:0.75");
        let t1 = loaded.cpu_op(&matvec(64e6), 8);
        // a memory-bound product: two cores left draw 2/3 of the bandwidth
        assert!(t1 > 1.4 * t0, "{t0} {t1}");
        // a thermal wall at 1 ms: kernels after it run at half speed
        let hot = model(",thermal=0.001:0.5");
        let a = hot.gpu_kernel(None, &matvec(1e6));
        hot.host_busy(0.002);
        let b = hot.gpu_kernel(None, &matvec(1e6));
        assert!((b / a - 2.0).abs() < 1e-9, "{a} {b}");
    }
}
