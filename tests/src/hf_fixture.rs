//! The checks every repository fixture made by Hugging Face transformers
//! and converted by llama.cpp goes through (`tests/fixtures/<arch>`, made
//! by `scripts/fixtures/make-<arch>.sh`): logits, greedy continuation and
//! KV cache on the CPU, the sampler, the same logits on a simulated GPU at
//! every policy under tight budgets, and random placements.

use std::path::PathBuf;
use std::sync::Arc;

use ats_core::device::{Device, HostMemory, KvType};
use ats_core::round::Round;
use ats_core::sampling::SamplerConfig;
use ats_core::spec::ModelSpec;
use ats_cpu::CpuDevice;
use ats_sched::config::Policy;
use ats_sched::exec::{ExecConfig, ExecPlan, Executor, WeightHome};
use ats_sched::session::GenParams;
use ats_sched::sim::{SimGpu, SimGpuConfig};

use crate::{
    Reference, XorShift, argmax, cpu_engine, engine_on, gpu_if, host_only, max_abs_diff,
    repo_fixtures, with_gpu,
};

/// The fixtures' tolerance on logits (as `../shared/fixtures` recommends for f32).
pub const ATOL: f32 = 1e-3;

/// A fixture in `tests/fixtures/<dir>`: `<file>` and its references.
pub struct HfFixture {
    /// The fixture's directory.
    pub dir: PathBuf,
    /// The GGUF file.
    pub gguf: PathBuf,
}

impl HfFixture {
    /// `tests/fixtures/<dir>/<file>`.
    pub fn new(dir: &str, file: &str) -> HfFixture {
        let dir = repo_fixtures().join(dir);
        HfFixture {
            gguf: dir.join(file),
            dir,
        }
    }

    /// `reference.safetensors`.
    pub fn reference(&self) -> Reference {
        Reference::open_path(&self.dir.join("reference.safetensors"))
    }

    /// `reference.json`.
    pub fn manifest(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.dir.join("reference.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// The model, opened.
    pub fn spec(&self) -> ModelSpec {
        ModelSpec::open(&self.gguf).unwrap()
    }

    /// On the CPU: the prompt's logits, the greedy continuation through the
    /// KV cache, the full sequence token by token, in one round and in
    /// chunks, all within [`ATOL`]; with an f16 cache, within `f16_tol` of
    /// transformers' logits with keys and values rounded to f16.
    pub fn check_logits_and_cache(&self, f16_tol: f32) {
        let r = self.reference();
        let ids = r.ids("input_ids");
        let (want, _) = r.f32("logits");
        let mut e = cpu_engine(&self.gguf, 64, KvType::F32);
        let vocab = e.spec().hp.n_vocab;
        let d = max_abs_diff(&e.eval(&ids).unwrap(), &want);
        eprintln!("prompt logits: max |ats - hf| = {d:.2e}");
        assert!(d < ATOL, "prompt logits differ by {d}");

        let (g_logits, _) = r.f32("greedy_logits");
        e.reset();
        let mut logits = e.prefill(&ids, false).unwrap();
        for (k, &want_id) in r.ids("greedy_ids").iter().enumerate() {
            let d = max_abs_diff(&logits, &g_logits[k * vocab..(k + 1) * vocab]);
            assert!(d < ATOL, "greedy step {k} logits differ by {d}");
            assert_eq!(argmax(&logits) as u32, want_id, "greedy step {k}");
            logits = e.decode(want_id).unwrap();
        }

        let full = r.ids("full_ids");
        let (full_logits, _) = r.f32("full_logits");
        let row = |p: usize| &full_logits[p * vocab..(p + 1) * vocab];
        e.reset();
        for (p, &t) in full.iter().enumerate() {
            let d = max_abs_diff(&e.decode(t).unwrap(), row(p));
            assert!(d < ATOL, "token-by-token position {p} differs by {d}");
        }
        let d = max_abs_diff(&e.eval(&full).unwrap(), &full_logits);
        eprintln!("full logits: max |ats - hf| = {d:.2e}");
        assert!(d < ATOL, "batched full logits differ by {d}");
        e.reset();
        let mut at = 0;
        for chunk in [5usize, 9, 3, full.len() - 17] {
            let l = e.prefill(&full[at..at + chunk], true).unwrap();
            let d = max_abs_diff(&l, &full_logits[at * vocab..(at + chunk) * vocab]);
            assert!(d < ATOL, "chunk at {at} differs by {d}");
            at += chunk;
        }

        let (f16_logits, _) = r.f32("full_logits_f16kv");
        let mut e16 = cpu_engine(&self.gguf, 64, KvType::F16);
        let d = max_abs_diff(&e16.eval(&full).unwrap(), &f16_logits);
        eprintln!("f16 KV: max |ats - hf with f16 keys and values| = {d:.2e}");
        assert!(d < f16_tol, "f16 KV logits differ by {d}");
    }

    /// Greedy generation through the sampler gives transformers' greedy ids.
    pub fn check_greedy_generation(&self) {
        let r = self.reference();
        let greedy = r.ids("greedy_ids");
        let mut e = cpu_engine(&self.gguf, 64, KvType::F32);
        let params = GenParams {
            max_tokens: greedy.len(),
            sampler: SamplerConfig {
                temperature: 0.0,
                ..SamplerConfig::default()
            },
            stop: vec![],
            ignore_eos: true,
            ..GenParams::default()
        };
        let g = e
            .generate(&r.ids("input_ids"), &params, &mut |_| true)
            .unwrap();
        assert_eq!(g.tokens, greedy);
    }

    /// Each policy on a simulated GPU from a tenth of the model to all of
    /// it: the full logits within [`ATOL`], 6 greedy steps, the budget kept.
    pub fn check_policies_on_a_simulated_gpu(&self, policies: &[Policy]) {
        let spec = Arc::new(self.spec());
        let r = self.reference();
        let ids = r.ids("full_ids");
        let (want, _) = r.f32("full_logits");
        let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
        let model_bytes = spec.gguf.file_len();
        for &policy in policies {
            for pct in [10u64, 35, 60, 150] {
                let budget = model_bytes * pct / 100 + (1 << 20);
                let gpu = sim_gpu(budget);
                let machine = with_gpu(cpu.clone(), gpu.clone());
                let mut e = engine_on(spec.clone(), machine, 64, KvType::F32, policy, true);
                let d = max_abs_diff(&e.eval(&ids).unwrap(), &want);
                assert!(d < ATOL, "{policy:?} at {pct}%: logits differ by {d}");
                e.reset();
                let mut logits = e.prefill(&r.ids("input_ids"), false).unwrap();
                for &want_id in &r.ids("greedy_ids")[..6] {
                    assert_eq!(argmax(&logits) as u32, want_id, "{policy:?} at {pct}%");
                    logits = e.decode(want_id).unwrap();
                }
                let peak = gpu.ledger().peak();
                assert!(peak <= budget, "{policy:?}: peak {peak} over {budget}");
            }
        }
    }

    /// Random node and weight placements on a simulated GPU give the CPU's
    /// logits (within 1e-4) for a prompt and two decode rounds.
    pub fn check_random_placements(&self, seed: u64) {
        let spec = self.spec();
        let graph = spec.graph().clone();
        let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
        let ids = self.reference().ids("full_ids");
        let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
        let (a, b) = ids.split_at(ids.len() - 2);
        let rounds = [
            Round::text(a.to_vec(), 0, true),
            Round::text(vec![b[0]], a.len(), true),
            Round::text(vec![b[1]], a.len() + 1, true),
        ];
        let executor = |machine, plan| {
            Executor::new(graph.clone(), host.clone(), machine, exec_config(), plan).unwrap()
        };
        let mut base = executor(host_only(cpu.clone()), ExecPlan::all_cpu(&graph));
        let want: Vec<Vec<f32>> = rounds
            .iter()
            .map(|r| base.run(&Arc::new(r.clone())).unwrap().to_vec())
            .collect();
        let mut rng = XorShift(seed);
        for trial in 0..12 {
            let plan = random_plan(&graph, trial, &mut rng);
            let mut ex = executor(with_gpu(cpu.clone(), sim_gpu(1 << 30)), plan);
            for (k, r) in rounds.iter().enumerate() {
                let d = max_abs_diff(ex.run(&Arc::new(r.clone())).unwrap(), &want[k]);
                assert!(d < 1e-4, "trial {trial} round {k}: differs by {d}");
            }
        }
    }
}

/// Trial 0: all on the CPU; 1: every node on the GPU, weights streamed;
/// then half the nodes and 40% of the weights resident, at random. Each
/// KV cache lives where its attention runs.
fn random_plan(graph: &ats_core::graph::Graph, trial: usize, rng: &mut XorShift) -> ExecPlan {
    let mut plan = ExecPlan::all_cpu(graph);
    for d in plan.node_device.iter_mut() {
        *d = gpu_if(trial == 1 || (trial > 1 && rng.coin(50)));
    }
    for h in plan.weight_home.iter_mut() {
        *h = if trial > 1 && rng.coin(40) {
            WeightHome::Resident
        } else {
            WeightHome::Host
        };
    }
    crate::caches_follow_attention(graph, &mut plan);
    plan
}

/// A 64-token f32 cache, two temp slots per role.
fn exec_config() -> ExecConfig {
    ExecConfig {
        kv_capacity: 64,
        kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
        kv_type: KvType::F32,
        slots_per_role: 2,
        region: None,
    }
}

/// A simulated GPU of `budget` bytes on one CPU thread, with a fast link
/// and no launch or sync costs (these checks are about values).
fn sim_gpu(budget: u64) -> Arc<dyn Device> {
    let inner: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let cfg = SimGpuConfig {
        memory: budget,
        copy_gbps: 50.0,
        launch_us: 0.0,
        sync_us: 0.0,
        ..SimGpuConfig::default()
    };
    Arc::new(SimGpu::new(inner, cfg))
}

/// The four [`HfFixture`] checks as tests of an architecture's test file:
/// `hf_fixture_tests!(fixture(), f16_tol: 5e-3, policies: [Layers, Ats], placement_seed: 7)`.
#[macro_export]
macro_rules! hf_fixture_tests {
    ($fixture:expr, f16_tol: $tol:expr, policies: [$($p:ident),+ $(,)?], placement_seed: $seed:expr $(,)?) => {
        #[test]
        fn logits_greedy_and_kv_cache_match_hf() {
            $fixture.check_logits_and_cache($tol);
        }

        #[test]
        fn greedy_generation_through_the_sampler_reproduces_hf() {
            $fixture.check_greedy_generation();
        }

        #[test]
        fn every_policy_on_a_simulated_gpu_under_tight_budgets_matches_hf() {
            $fixture.check_policies_on_a_simulated_gpu(&[
                $(ats_sched::config::Policy::$p),+
            ]);
        }

        #[test]
        fn random_placements_give_the_cpu_logits() {
            $fixture.check_random_placements($seed);
        }
    };
}

/// The messages of one of a manifest's conversations (`chat`,
/// `chat_tools`): role and content, with `reasoning_content` and
/// `tool_calls` where a message has them.
pub fn chat_messages(case: &serde_json::Value) -> Vec<ats_core::ChatMessage> {
    let messages = case["messages"].as_array().unwrap().iter();
    messages
        .map(|m| {
            let text = m["content"].as_str().unwrap();
            let mut msg = ats_core::ChatMessage::text(m["role"].as_str().unwrap(), text);
            msg.reasoning = m["reasoning_content"].as_str().map(String::from);
            let calls = m["tool_calls"].as_array().into_iter().flatten();
            msg.tool_calls = calls
                .enumerate()
                .map(|(i, c)| ats_core::chat::ToolCall {
                    id: format!("call_{i}"),
                    name: c["function"]["name"].as_str().unwrap().into(),
                    arguments: c["function"]["arguments"].clone(),
                })
                .collect();
            msg
        })
        .collect()
}

/// A manifest's array of token ids.
pub fn ids_of(v: &serde_json::Value) -> Vec<u32> {
    let ids = v.as_array().unwrap().iter();
    ids.map(|x| x.as_u64().unwrap() as u32).collect()
}
