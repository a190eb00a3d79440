//! Request fields to generation settings: the server's defaults where a
//! field is unset, range checks (the sampler's own, as for the command
//! line's flags) and the `max_tokens` limit, and a clear 400 for features
//! this server does not offer.

use ats_core::SamplerConfig;
use ats_core::sampling::SamplerField;
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
    /// The vocabulary's size: token ids a request may name (`logit_bias`).
    pub vocab: usize,
    /// The chat template's variables for every request
    /// (`--chat-template-kwargs`); a request's own win.
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
}

/// The generation settings of a request; `default_max` applies when the
/// request names no token limit.
pub fn gen_params(
    s: &Sampling,
    max_tokens: Option<u64>,
    default_max: usize,
    d: &Defaults,
) -> Result<GenParams, ApiError> {
    super::choices::check_n(s.n)?;
    let logit_bias = match &s.logit_bias {
        Some(m) => logit_bias(m, d.vocab)?,
        None => Vec::new(),
    };
    let mut sampler = d.sampler;
    for (field, value, slot) in [
        (
            SamplerField::Temperature,
            s.temperature,
            &mut sampler.temperature,
        ),
        (SamplerField::TopP, s.top_p, &mut sampler.top_p),
        (SamplerField::MinP, s.min_p, &mut sampler.min_p),
        (
            SamplerField::RepeatPenalty,
            s.repeat_penalty,
            &mut sampler.repeat_penalty,
        ),
        (
            SamplerField::FrequencyPenalty,
            s.frequency_penalty,
            &mut sampler.frequency_penalty,
        ),
        (
            SamplerField::PresencePenalty,
            s.presence_penalty,
            &mut sampler.presence_penalty,
        ),
    ] {
        if let Some(v) = value {
            *slot = field.check(v).map_err(|e| {
                ApiError::bad_param(field.api_name(), format!("{} {e}", field.api_name()))
            })?;
        }
    }
    if let Some(k) = s.top_k {
        sampler.top_k = usize::try_from(k).unwrap_or(usize::MAX);
    }
    if let Some(n) = s.repeat_last_n {
        sampler.repeat_last_n = usize::try_from(n).unwrap_or(usize::MAX);
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
        // set by the endpoint: these come from its own fields
        constraint: None,
        logprobs: None,
        logit_bias,
    })
}

/// Most entries of a `logit_bias` map (OpenAI's limit).
const MAX_BIASES: usize = 300;

/// OpenAI's `logit_bias`: token ids (as strings) to biases from -100 to 100.
fn logit_bias(
    m: &serde_json::Map<String, serde_json::Value>,
    vocab: usize,
) -> Result<Vec<(u32, f32)>, ApiError> {
    if m.len() > MAX_BIASES {
        return Err(ApiError::bad_param(
            "logit_bias",
            format!("at most {MAX_BIASES} biased tokens"),
        ));
    }
    m.iter()
        .map(|(k, v)| {
            let id = k
                .parse::<u32>()
                .ok()
                .filter(|&id| (id as usize) < vocab)
                .ok_or_else(|| {
                    ApiError::bad_param(
                        "logit_bias",
                        format!(
                            "{k:?} is not a token id of this model (0 to {})",
                            vocab.saturating_sub(1)
                        ),
                    )
                })?;
            let bias = v
                .as_f64()
                .filter(|b| (-100.0..=100.0).contains(b))
                .ok_or_else(|| {
                    ApiError::bad_param(
                        "logit_bias",
                        format!("the bias of token {k} must be a number from -100 to 100"),
                    )
                })?;
            Ok((id, bias as f32))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Defaults {
        Defaults {
            sampler: SamplerConfig::greedy(),
            seed: Some(7),
            max_tokens: 100,
            vocab: 1000,
            template_kwargs: Default::default(),
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
    fn logit_bias_names_token_ids_and_biases_in_range() {
        let with = |m: serde_json::Value| Sampling {
            logit_bias: m.as_object().cloned(),
            ..Default::default()
        };
        let p = gen_params(
            &with(serde_json::json!({"5": -100, "999": 2.5})),
            None,
            16,
            &defaults(),
        )
        .unwrap();
        let mut b = p.logit_bias;
        b.sort_by_key(|x| x.0);
        assert_eq!(b, [(5, -100.0), (999, 2.5)]);
        for bad in [
            serde_json::json!({"1000": 1}),
            serde_json::json!({"-1": 1}),
            serde_json::json!({"cat": 1}),
            serde_json::json!({"3": 100.5}),
            serde_json::json!({"3": "1"}),
        ] {
            let e = gen_params(&with(bad.clone()), None, 16, &defaults()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("logit_bias"), "{bad}");
        }
        let many: serde_json::Map<_, _> = (0..301).map(|i| (i.to_string(), 1.into())).collect();
        assert!(gen_params(&with(many.into()), None, 16, &defaults()).is_err());
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
        let huge = Sampling {
            temperature: Some(1e39),
            ..Default::default()
        };
        let e = gen_params(&huge, None, 16, &defaults()).unwrap_err();
        assert_eq!(
            e.message,
            "temperature must be a finite number of at least 0, not 1e39"
        );
        let penalty = Sampling {
            frequency_penalty: Some(1e30),
            ..Default::default()
        };
        assert_eq!(bad(penalty, None), "frequency_penalty");
        let applied = Sampling {
            frequency_penalty: Some(0.5),
            presence_penalty: Some(-1.0),
            repeat_last_n: Some(256),
            ..Default::default()
        };
        let p = gen_params(&applied, None, 16, &defaults()).unwrap();
        assert_eq!(
            (
                p.sampler.frequency_penalty,
                p.sampler.presence_penalty,
                p.sampler.repeat_last_n
            ),
            (0.5, -1.0, 256)
        );
        let n = Sampling {
            n: Some(17),
            ..Default::default()
        };
        assert_eq!(bad(n, None), "n");
        let n = Sampling {
            n: Some(0),
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
