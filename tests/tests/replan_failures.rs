//! Failures in the re-planning loop are counted and said, never dropped:
//! when the executor refuses new plans (here: the GPU refuses one
//! allocation), the session goes back to its current plans, the planner
//! counts the refusal with its reason, and the answer is unchanged. The
//! change refused is a layout move, refused at each of its allocations in
//! turn (resident weights and KV caches half moved must all come back).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ats_core::device::{
    Buffer, Device, DeviceError, DeviceInfo, DeviceTimings, Event, HostBytes, HostMemory, KvType,
    NodeArgs, Stream,
};
use ats_core::graph::Graph;
use ats_core::ledger::{Ledger, Region};
use ats_core::round::Round;
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_sched::config::Policy;
use ats_tests::{cpu, engine_on, host_only, max_abs_diff, sim_machine, with_gpu};

/// A device that refuses its `n`-th next allocation once armed with `n`
/// (0: never), and is otherwise `inner`.
struct FailAlloc {
    inner: Arc<dyn Device>,
    countdown: AtomicUsize,
}

impl Device for FailAlloc {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn ledger(&self) -> &Arc<Ledger> {
        self.inner.ledger()
    }
    fn alloc(&self, region: Region, bytes: usize, label: &str) -> Result<Buffer, DeviceError> {
        let n = self.countdown.load(Ordering::SeqCst);
        if n > 0 {
            self.countdown.store(n - 1, Ordering::SeqCst);
        }
        if n == 1 {
            return Err(DeviceError::OutOfMemory {
                device: self.info().name.clone(),
                bytes: bytes as u64,
                label: format!("{label} (refused by the test)"),
            });
        }
        self.inner.alloc(region, bytes, label)
    }
    fn write(&self, dst: &Buffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        self.inner.write(dst, offset, src)
    }
    fn read(&self, src: &Buffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read(src, offset, dst)
    }
    fn run(&self, args: &NodeArgs<'_>) -> Result<(), DeviceError> {
        self.inner.run(args)
    }
    fn synchronize(&self) -> Result<(), DeviceError> {
        self.inner.synchronize()
    }
    fn node_scratch_bytes(&self, graph: &Graph, node: usize, round: &Round) -> u64 {
        self.inner.node_scratch_bytes(graph, node, round)
    }
    fn supports_async(&self) -> bool {
        self.inner.supports_async()
    }
    fn copy_async(&self, dst: &Buffer, offset: usize, src: &HostBytes) -> Result<(), DeviceError> {
        self.inner.copy_async(dst, offset, src)
    }
    fn copy_routed_async(
        &self,
        dst: &Buffer,
        src: &HostBytes,
        per_expert: usize,
        routing: &Buffer,
        rows: usize,
        top_k: usize,
    ) -> Result<(), DeviceError> {
        self.inner
            .copy_routed_async(dst, src, per_expert, routing, rows, top_k)
    }
    fn record_event(&self, stream: Stream) -> Result<Event, DeviceError> {
        self.inner.record_event(stream)
    }
    fn wait_event(&self, stream: Stream, event: &Event) -> Result<(), DeviceError> {
        self.inner.wait_event(stream, event)
    }
    fn sync_event(&self, event: &Event) -> Result<(), DeviceError> {
        self.inner.sync_event(event)
    }
    fn pin_host(&self, mem: &Arc<dyn HostMemory>) -> Result<bool, DeviceError> {
        self.inner.pin_host(mem)
    }
    fn drain_timings(&self) -> DeviceTimings {
        self.inner.drain_timings()
    }
    fn now(&self) -> f64 {
        self.inner.now()
    }
    fn virtual_time(&self) -> bool {
        self.inner.virtual_time()
    }
}

/// The `tiny` synthetic model with 16 layers (about 9 MB of Q4_K/Q6_K):
/// enough layers that streaming layouts fit half of it.
fn synthetic(dir: &std::path::Path) -> Arc<ModelSpec> {
    let spec = SynthSpec {
        n_layer: 16,
        n_ff: 768,
        tied: false,
        ..SynthSpec::preset("tiny").unwrap()
    };
    let path = dir.join("synthetic.gguf");
    spec.write(&path, 11).unwrap();
    Arc::new(ModelSpec::open(&path).unwrap())
}

/// Decodes 8 tokens after a 16-token prompt; before the 4th a re-plan is
/// asked for with the GPU's `n`-th allocation from then on refused.
/// Returns whether the change was refused, and the refused change's kind.
fn replan_refused_at(spec: &Arc<ModelSpec>, n: usize) -> (bool, String) {
    let ids: Vec<u32> = (0..32).map(|i| (i * 53 + 3) % 1024).collect();
    // a machine model in virtual time: the audition's choices are the same every run
    let vm = sim_machine("rtx3060-laptop", 2, Some(spec.gguf.file_len() / 2));
    let gpu = Arc::new(FailAlloc {
        inner: vm.machine().gpu().unwrap().clone(),
        countdown: AtomicUsize::new(0),
    });
    let machine = with_gpu(vm.machine().host().clone(), gpu.clone());
    let mut e = engine_on(spec.clone(), machine, 64, KvType::F32, Policy::Ats, false);
    assert!(
        e.plan_set().layout.streaming,
        "premise: a layout with temp slots, which every change re-makes"
    );
    let mut base = engine_on(
        spec.clone(),
        host_only(cpu(2)),
        64,
        KvType::F32,
        Policy::Ats,
        false,
    );
    let (prompt, rest) = ids.split_at(16);
    let mut got = e.prefill(prompt, false).unwrap();
    let mut want = base.prefill(prompt, false).unwrap();
    let mut refused = (false, String::new());
    for (k, &t) in rest.iter().take(8).enumerate() {
        assert!(
            max_abs_diff(&got, &want) < 1e-4,
            "refusal at {n}: round {k}"
        );
        if k == 3 {
            gpu.countdown.store(n, Ordering::SeqCst);
            let applied = e.force_replan().unwrap();
            let st = e.planner().replan_stats();
            let why = st.last_failure.clone().unwrap_or_default();
            if !applied {
                assert_eq!((st.rejected, st.replans), (1, 0), "{st:?}");
                assert!(why.contains("refused by the test"), "{why}");
                assert!(st.any_failure());
                assert_eq!(
                    gpu.countdown.load(Ordering::SeqCst),
                    0,
                    "the refusal happened"
                );
            }
            gpu.countdown.store(0, Ordering::SeqCst);
            refused = (!applied, why);
        }
        got = e.decode(t).unwrap();
        want = base.decode(t).unwrap();
        assert!(gpu.ledger().peak() <= spec.gguf.file_len() / 2);
    }
    assert!(max_abs_diff(&got, &want) < 1e-4, "refusal at {n}");
    refused
}

#[test]
fn a_layout_move_refused_at_any_allocation_leaves_the_answer_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let spec = synthetic(dir.path());
    let mut refusals = 0;
    for n in 1.. {
        let (refused, why) = replan_refused_at(&spec, n);
        if !refused {
            break;
        }
        assert!(
            why.contains("Relayout"),
            "the change refused moves the layout: {why}"
        );
        refusals += 1;
    }
    eprintln!("{refusals} allocations of the move refused in turn");
    // weights uploaded and KV caches moved before the refusal, at each step
    assert!(refusals >= 4, "{refusals} allocations refused");
}
