//! Printing timings and memory like llama.cpp does, on standard error (as
//! log events with `--log-format json`).

use ats_core::ledger::Region;
use ats_sched::session::{Session, Timings};
use ats_sched::size::fmt_bytes;

/// The timings block printed after a run.
/// What the run's machine model is, when it runs on one (`--sim-machine`):
/// every timing it reports is the model's virtual time.
static SIMULATED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Records that the run is on a machine model (said with every timing).
pub fn set_simulated(summary: String) {
    let _ = SIMULATED.set(summary);
}

/// The machine model the run is on, if any.
pub fn simulated() -> Option<&'static str> {
    SIMULATED.get().map(String::as_str)
}

pub fn print_timings(load_ms: f64, t: &Timings) {
    if crate::logging::json() {
        tracing::info!(
            load_ms,
            prompt_tokens = t.prompt_tokens,
            prompt_ms = t.prompt_ms,
            prompt_tokens_per_s = t.prompt_tps(),
            gen_tokens = t.gen_tokens,
            decode_ms = t.decode_ms,
            gen_tokens_per_s = t.gen_tps(),
            ttft_ms = t.ttft_ms,
            "timings"
        );
        return;
    }
    let per = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
    eprintln!();
    if let Some(m) = simulated() {
        eprintln!(
            "ats: SIMULATED timings (virtual time of the machine model {m}; load time is wall time)"
        );
    }
    eprintln!("ats: load time       = {load_ms:10.2} ms");
    eprintln!(
        "ats: prompt eval     = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:8.2} tokens per second)",
        t.prompt_ms,
        t.prompt_tokens,
        per(t.prompt_ms, t.prompt_tokens),
        t.prompt_tps()
    );
    eprintln!(
        "ats: eval time       = {:10.2} ms / {:5} runs   ({:8.2} ms per token, {:8.2} tokens per second)",
        t.decode_ms,
        t.decode_rounds,
        per(t.decode_ms, t.decode_rounds),
        t.gen_tps()
    );
    eprintln!("ats: time to first token = {:.2} ms", t.ttft_ms);
}

/// One line of a chat turn's speed.
pub fn print_turn(t: &Timings) {
    if crate::logging::json() {
        print_timings(0.0, t);
        return;
    }
    eprintln!(
        "[prompt {} tokens ({} cached), {:.1} t/s | answer {} tokens, {:.1} t/s | first token {:.0} ms]",
        t.prompt_tokens,
        t.cached_tokens,
        t.prompt_tps(),
        t.gen_tokens,
        t.gen_tps(),
        t.ttft_ms
    );
}

/// What the decode audition measured, how often the plans changed, and
/// what failed in the re-planning loop (one summary line).
pub fn print_plan_changes(session: &Session) {
    let p = session.planner();
    let st = p.replan_stats();
    let mut replans = format!("re-plans = {} ({} moved weights)", st.replans, st.relayouts);
    if st.any_failure() {
        replans.push_str(&format!(
            "; {} re-plans failed, {} changes refused, {} measurements rejected (last: {})",
            st.failed,
            st.rejected,
            st.bad_observations,
            st.last_failure.as_deref().unwrap_or("-")
        ));
    }
    let Some(a) = p.last_audition() else {
        if st.replans > 0 || st.any_failure() {
            eprintln!("ats: {replans}");
        }
        return;
    };
    if crate::logging::json() {
        tracing::info!(
            audition = %serde_json::json!(a),
            replans = %serde_json::json!(st),
            "decode plans"
        );
        return;
    }
    let names = |k: &[ats_sched::planner::PlanKind]| -> String {
        k.iter().map(|k| k.name()).collect::<Vec<_>>().join("=")
    };
    let parts: Vec<String> = a
        .entries
        .iter()
        .map(|e| {
            format!(
                "{} {:.2} ms (est {:.2})",
                names(&e.kinds),
                e.measured_secs * 1e3,
                e.est_secs * 1e3
            )
        })
        .collect();
    eprintln!(
        "ats: decode audition: {} -> {}; {replans}",
        parts.join(", "),
        names(&a.entries[a.winner].kinds),
    );
}

/// One line per device: peak memory by region against its budget.
pub fn print_memory(session: &Session) {
    if crate::logging::json() {
        tracing::info!(memory = %memory_json(session), "peak memory");
        return;
    }
    for (_, d) in session.machine().iter() {
        let s = d.ledger().snapshot();
        let regions: Vec<String> = s
            .peak_by_region
            .iter()
            .filter(|(_, b)| *b > 0)
            .map(|(r, b)| format!("{} {}", r.name(), fmt_bytes(*b)))
            .collect();
        let budget = s.budget.map_or("no budget".to_string(), |b| {
            format!("budget {}", fmt_bytes(b))
        });
        eprintln!(
            "ats: memory {}: peak {} ({budget}){}{}",
            s.device,
            fmt_bytes(s.peak),
            if regions.is_empty() { "" } else { "; " },
            regions.join(", ")
        );
    }
}

/// Peak bytes per region of every device, for JSON reports.
pub fn memory_json(session: &Session) -> serde_json::Value {
    let devs: Vec<serde_json::Value> = session
        .machine()
        .iter()
        .map(|(_, d)| {
            let s = d.ledger().snapshot();
            let regions: serde_json::Map<String, serde_json::Value> = Region::ALL
                .iter()
                .map(|r| {
                    (
                        r.name().to_string(),
                        serde_json::json!(d.ledger().peak_in(*r)),
                    )
                })
                .collect();
            serde_json::json!({
                "device": s.device,
                "budget_bytes": s.budget,
                "peak_bytes": s.peak,
                "peak_by_region": regions,
            })
        })
        .collect();
    serde_json::Value::Array(devs)
}
