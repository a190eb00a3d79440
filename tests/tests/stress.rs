//! Invariants under stress, on the simulated GPU with a tiny synthetic model:
//! the ledger's peak never exceeds the budget over long randomized runs of
//! prefill and decode with re-planning (forced, and triggered by load changes
//! from the simulated GPU's slowdown scripts); the logits equal a CPU-only
//! run's throughout (the KV cache survives every re-plan); and generating
//! thousands of tokens past the context stops cleanly each time with no
//! memory growth beyond the KV cache.
//!
//! The tests take a lock so they run one at a time: the memory test reads the
//! process's resident set, which other tests in this binary would disturb.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use ats_core::device::{Device, KvType};
use ats_core::ledger::Region;
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthSpec;
use ats_cpu::CpuDevice;
use ats_sched::config::{Policy, RunConfig};
use ats_sched::planner::PlanError;
use ats_sched::rescheduler::{ReschedConfig, Tau};
use ats_sched::session::{GenParams, Session, SessionError, StopReason};
use ats_sched::sim::{SimGpu, SimGpuConfig, Slowdown};
use ats_tests::fuzz::Rng;
use ats_tests::{default_cost, engine_on, host_only, max_abs_diff, run_config, with_gpu};

fn serial() -> MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `tiny` synthetic preset (4 layers, Q4_K-like mixture, vocabulary 1024),
/// written once per test process.
fn tiny() -> Arc<ModelSpec> {
    static P: OnceLock<PathBuf> = OnceLock::new();
    let p = P.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ats-stress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("tiny.gguf");
        SynthSpec::preset("tiny").unwrap().write(&p, 11).unwrap();
        p
    });
    Arc::new(ModelSpec::open(p).unwrap())
}

fn sim_gpu(budget: u64, slow: &str) -> Arc<dyn Device> {
    let inner: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let script = |s: &str| {
        SimGpuConfig::parse(&format!("slow={s}"))
            .unwrap()
            .compute_slowdown
    };
    Arc::new(SimGpu::new(
        inner,
        SimGpuConfig {
            memory: budget,
            launch_us: 0.0,
            sync_us: 0.0,
            compute_slowdown: script(slow),
            copy_slowdown: Slowdown::steps(vec![(0.0, 1.0), (0.3, 4.0), (0.9, 1.0)]),
            ..SimGpuConfig::default()
        },
    ))
}

/// An engine on the CPU and a simulated GPU whose re-scheduler reacts to any
/// 5% deviation at once, so load changes re-plan as often as they can.
fn sim_engine(
    spec: &Arc<ModelSpec>,
    gpu: Arc<dyn Device>,
    policy: Policy,
    n_ctx: usize,
) -> Result<Session, SessionError> {
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let machine = with_gpu(cpu, gpu);
    let cost = default_cost(&machine);
    let run = RunConfig {
        resched: ReschedConfig {
            epsilon: 0.05,
            tau: Tau::Seconds(0.0),
            alpha: 0.5,
            hysteresis: 0.0,
            ..ReschedConfig::default()
        },
        ..run_config(spec, n_ctx, KvType::F32, policy, false)
    };
    Session::new(spec.clone(), machine, cost, run)
}

/// Random sessions of prefill chunks and decode steps with random forced
/// re-plans, under random budgets and policies and a load that changes over
/// time: the GPU ledger's peak stays within the budget (and the plan's own
/// estimate), and every logit equals the CPU-only engine's.
#[test]
fn randomized_prefill_decode_replan_keeps_budget_and_logits() {
    let _g = serial();
    let spec = tiny();
    let size = spec.gguf.file_len();
    let n_ctx = 96;
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let mut base = engine_on(
        spec.clone(),
        host_only(cpu),
        n_ctx,
        KvType::F32,
        Policy::Ats,
        false,
    );
    let mut rng = Rng::new(0xa75_5eed);
    let mut n = Counts::default();
    let scripts = ["0:1;0.1:3;0.4:1;0.7:6", "0:2;0.2:1;0.5:8", "0:1"];
    for trial in 0..9 {
        let budget = size * (10 + rng.below(100) as u64) / 100;
        let policy = [Policy::Ats, Policy::Tiers, Policy::Static][trial % 3];
        let gpu = sim_gpu(budget, scripts[trial % 3]);
        let (mut e, gpu, budget) = match sim_engine(&spec, gpu.clone(), policy, n_ctx) {
            Ok(e) => (e, gpu, budget),
            Err(SessionError::Plan(PlanError::BudgetTooSmall { minimum, .. })) => {
                assert!(minimum > budget);
                let gpu = sim_gpu(minimum, scripts[trial % 3]);
                let e = sim_engine(&spec, gpu.clone(), policy, n_ctx).expect("the minimum works");
                (e, gpu, minimum)
            }
            Err(e) => panic!("{e}"),
        };
        n.engines += 1;
        run_sessions(&mut rng, &mut e, &mut base, &gpu, budget, &mut n);
    }
    eprintln!(
        "stress: {} engines, {} rounds, {} forced re-plans, {} re-plans in all",
        n.engines, n.rounds, n.forced, n.replans
    );
    assert!(n.forced >= 20 && n.replans >= n.forced);
}

#[derive(Default)]
struct Counts {
    engines: usize,
    rounds: usize,
    forced: usize,
    replans: usize,
}

fn run_sessions(
    rng: &mut Rng,
    e: &mut Session,
    base: &mut Session,
    gpu: &Arc<dyn Device>,
    budget: u64,
    n: &mut Counts,
) {
    let n_ctx = e.n_ctx();
    let n_vocab = e.spec().hp.n_vocab;

    for _session in 0..3 {
        e.reset();
        base.reset();
        while e.past() < n_ctx {
            let room = n_ctx - e.past();
            if rng.one_in(4) && e.force_replan().unwrap() {
                n.forced += 1;
            }
            let (a, b) = if rng.one_in(3) {
                // a prefill chunk, sometimes more than the room left
                let k = 1 + rng.below(40);
                let ids: Vec<u32> = (0..k).map(|_| rng.below(n_vocab) as u32).collect();
                if k > room {
                    assert!(matches!(
                        e.prefill(&ids, false),
                        Err(SessionError::Input(_))
                    ));
                    break;
                }
                (
                    e.prefill(&ids, false).unwrap(),
                    base.prefill(&ids, false).unwrap(),
                )
            } else {
                let t = rng.below(n_vocab) as u32;
                (e.decode(t).unwrap(), base.decode(t).unwrap())
            };
            n.rounds += 1;
            let d = max_abs_diff(&a, &b);
            assert!(d <= 1e-5, "round {}: logits differ by {d}", n.rounds);
            let peak = gpu.ledger().peak();
            assert!(peak <= budget, "peak {peak} > budget {budget}");
            let planned = e.planner().peak_planned();
            assert!(peak <= planned, "peak {peak} > the plans' {planned}");
        }
    }
    n.replans += e.planner().replan_stats().replans;
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// 16 sessions decoding into a 256-token context until it is full (3968
/// tokens in all). Each ends with the context full (ATS stops; it does not shift
/// the cache), a decode past the end is refused without changing the
/// session, and neither the GPU ledger nor the process grows after the first.
#[test]
fn long_generation_past_the_context_stops_cleanly_without_growth() {
    let _g = serial();
    let spec = tiny();
    let n_ctx = 256;
    let gpu = sim_gpu(spec.gguf.file_len() / 2, "0:1");
    let mut e = sim_engine(&spec, gpu.clone(), Policy::Ats, n_ctx).unwrap();
    // the synthetic model has no tokenizer: drive the loop by ids
    let prompt: Vec<u32> = (1..=8).collect();
    let mut total = 0usize;
    let (mut fixed_after_first, mut rss_after_first) = (None, 0);
    let mut moves_before = 0;
    for round in 0..16 {
        e.reset();
        e.prefill(&prompt, false).unwrap();
        let mut t = 1u32;
        loop {
            match e.decode(t) {
                Ok(l) => {
                    t = ats_tests::argmax(&l) as u32;
                    total += 1;
                }
                Err(SessionError::Input(msg)) => {
                    assert!(msg.contains("do not fit the context"), "{msg}");
                    break;
                }
                Err(err) => panic!("{err}"),
            }
        }
        assert_eq!(
            e.past(),
            n_ctx,
            "the refused decode left the session as it was"
        );
        assert_eq!(e.history().len(), n_ctx);
        // re-plans move streamed weights between slots, so what is in use
        // varies with the plan; the KV cache and resident weights change
        // only when a re-plan moves them, and the total stays within what
        // the plan promised
        let l = gpu.ledger();
        let fixed = (l.used_in(Region::Kv), l.used_in(Region::Resident));
        assert!(l.used() <= e.plan_set().layout.peak_bytes().max(1));
        let moves = e.planner().replan_stats().relayouts;
        if round == 1 {
            rss_after_first = rss_bytes();
        }
        if round >= 1
            && moves == moves_before
            && let Some(f) = fixed_after_first
        {
            assert_eq!(fixed, f, "round {round}: KV or resident bytes changed");
        }
        if round >= 1 {
            fixed_after_first = Some(fixed);
            moves_before = moves;
        }
    }
    let growth = rss_bytes().saturating_sub(rss_after_first);
    eprintln!(
        "long generation: {total} tokens in 16 sessions of {n_ctx}; GPU KV and resident {:?} B, peak {} B, {} layout moves; RSS growth after the first sessions {growth} B",
        fixed_after_first,
        gpu.ledger().peak(),
        e.planner().replan_stats().relayouts
    );
    assert!(total >= 16 * (n_ctx - 8));
    // 14 sessions of 248 tokens; a per-token leak of one logits vector alone
    // (4 KB) would be 14 MB
    assert!(growth < 8 << 20, "resident memory grew by {growth} bytes");
    assert!(gpu.ledger().peak() <= spec.gguf.file_len() / 2);
}

/// `generate` with an unbounded `max_tokens` ends at the context with
/// `ContextFull` on the simulated GPU too, using every slot.
#[test]
fn generate_with_unbounded_max_tokens_ends_at_the_context() {
    let _g = serial();
    let spec =
        Arc::new(ModelSpec::open(ats_tests::fixtures().join("llama/llama-f32.gguf")).unwrap());
    let n_ctx = 200;
    let gpu = sim_gpu(spec.gguf.file_len() / 3, "0:1;0.05:4;0.2:1");
    let mut e = sim_engine(&spec, gpu.clone(), Policy::Ats, n_ctx).unwrap();
    let prompt = e
        .tokenizer()
        .unwrap()
        .encode("Once upon a time", true, false)
        .unwrap();
    let params = GenParams {
        max_tokens: usize::MAX,
        ignore_eos: true,
        ..GenParams::default()
    };
    let g = e.generate(&prompt, &params, &mut |_| true).unwrap();
    assert_eq!(g.stop, StopReason::ContextFull);
    assert_eq!(g.tokens.len(), n_ctx - prompt.len() + 1);
    assert!(gpu.ledger().peak() <= spec.gguf.file_len() / 3);
}
