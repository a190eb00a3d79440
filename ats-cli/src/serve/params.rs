//! Request fields to generation settings: the server's defaults where a
//! field is unset, range checks and the `max_tokens` limit, and a clear 400
//! for features this server does not offer.

use ats_core::SamplerConfig;
use ats_sched::session::GenParams;

use super::errors::ApiError;
use super::wire::{Sampling, Stop};

/// Most stop strings per request.
const MAX_STOPS: usize = 16;

/// What a request's unset fields take, and the limits.
#[derive(Debug, Clone)]
pub struct Defaults {
    /// Sampling for unset fields (from the command line).
    pub sampler: SamplerConfig,
    /// Seed for requests without one; `None`: a fresh random seed each time.
    pub seed: Option<u64>,
    /// Largest `max_tokens` a request may ask for.
    pub max_tokens: usize,
}

/// The generation settings of a request; `default_max` applies when the
/// request names no token limit.
pub fn gen_params(
    s: &Sampling,
    max_tokens: Option<u64>,
    default_max: usize,
    d: &Defaults,
) -> Result<GenParams, ApiError> {
    if let Some(n) = s.n
        && n != 1
    {
        return Err(ApiError::unsupported("n", "only n=1 is served"));
    }
    if s.logit_bias.as_ref().is_some_and(|m| !m.is_empty()) {
        return Err(ApiError::unsupported(
            "logit_bias",
            "logit_bias is not served",
        ));
    }
    for (name, v) in [
        ("presence_penalty", s.presence_penalty),
        ("frequency_penalty", s.frequency_penalty),
    ] {
        if v.is_some_and(|v| v != 0.0) {
            // Clients often send these; say once per request that they do nothing.
            tracing::warn!("{name} is not applied (use repeat_penalty)");
        }
    }
    let mut sampler = d.sampler;
    if let Some(t) = s.temperature {
        sampler.temperature = check(t, "temperature", 0.0, f32::MAX, "0 or more")?;
    }
    if let Some(p) = s.top_p {
        sampler.top_p = check(p, "top_p", 0.0, 1.0, "between 0 and 1")?;
    }
    if let Some(p) = s.min_p {
        sampler.min_p = check(p, "min_p", 0.0, 1.0, "between 0 and 1")?;
    }
    if let Some(r) = s.repeat_penalty {
        sampler.repeat_penalty =
            check(r, "repeat_penalty", f32::MIN_POSITIVE, f32::MAX, "above 0")?;
    }
    if let Some(k) = s.top_k {
        sampler.top_k = usize::try_from(k).unwrap_or(usize::MAX);
    }
    // any integer is a seed, as in OpenAI's API
    sampler.seed = match (s.seed, d.seed) {
        (Some(seed), _) => seed as u64,
        (None, Some(seed)) => seed,
        (None, None) => rand::random(),
    };
    let max_tokens = match max_tokens {
        None => default_max.min(d.max_tokens),
        Some(0) => {
            return Err(ApiError::bad_param(
                "max_tokens",
                "max_tokens must be at least 1",
            ));
        }
        Some(n) if n > d.max_tokens as u64 => {
            return Err(ApiError::bad_param(
                "max_tokens",
                format!(
                    "max_tokens {n} is above this server's limit of {} (--max-tokens)",
                    d.max_tokens
                ),
            ));
        }
        Some(n) => n as usize,
    };
    let stop = match &s.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) => v.clone(),
    };
    if stop.len() > MAX_STOPS {
        return Err(ApiError::bad_param(
            "stop",
            format!("at most {MAX_STOPS} stop strings"),
        ));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::bad_param(
            "stop",
            "stop strings must not be empty",
        ));
    }
    Ok(GenParams {
        max_tokens,
        sampler,
        stop,
        ignore_eos: s.ignore_eos.unwrap_or(false),
    })
}

fn check(v: f32, name: &str, lo: f32, hi: f32, what: &str) -> Result<f32, ApiError> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(ApiError::bad_param(name, format!("{name} must be {what}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Defaults {
        Defaults {
            sampler: SamplerConfig::greedy(),
            seed: Some(7),
            max_tokens: 100,
        }
    }

    #[test]
    fn unset_fields_take_the_defaults() {
        let p = gen_params(&Sampling::default(), None, 1000, &defaults()).unwrap();
        assert_eq!(p.max_tokens, 100);
        assert_eq!(p.sampler.seed, 7);
        assert_eq!(p.sampler.temperature, SamplerConfig::greedy().temperature);
        assert!(p.stop.is_empty());
        let p = gen_params(&Sampling::default(), None, 16, &defaults()).unwrap();
        assert_eq!(p.max_tokens, 16);
    }

    #[test]
    fn fields_override_and_are_checked() {
        let s = Sampling {
            temperature: Some(0.5),
            top_k: Some(5),
            seed: Some(-1),
            stop: Some(Stop::Many(vec!["a".into(), "b".into()])),
            ..Default::default()
        };
        let p = gen_params(&s, Some(10), 16, &defaults()).unwrap();
        assert_eq!(p.sampler.temperature, 0.5);
        assert_eq!(p.sampler.top_k, 5);
        assert_eq!(p.sampler.seed, u64::MAX);
        assert_eq!(p.max_tokens, 10);
        assert_eq!(p.stop, ["a", "b"]);
        let bad = |s: Sampling, max: Option<u64>| {
            gen_params(&s, max, 16, &defaults())
                .unwrap_err()
                .param
                .unwrap()
        };
        assert_eq!(bad(Sampling::default(), Some(101)), "max_tokens");
        assert_eq!(bad(Sampling::default(), Some(0)), "max_tokens");
        let neg = Sampling {
            temperature: Some(-1.0),
            ..Default::default()
        };
        assert_eq!(bad(neg, None), "temperature");
        let top_p = Sampling {
            top_p: Some(1.5),
            ..Default::default()
        };
        assert_eq!(bad(top_p, None), "top_p");
        let n = Sampling {
            n: Some(2),
            ..Default::default()
        };
        assert_eq!(bad(n, None), "n");
        let empty_stop = Sampling {
            stop: Some(Stop::One(String::new())),
            ..Default::default()
        };
        assert_eq!(bad(empty_stop, None), "stop");
    }
}
