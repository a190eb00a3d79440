//! The one range check of every sampler setting, for the command line's
//! flags, a server's defaults and a request's fields alike: each front end
//! names the field its own way ([`SamplerField::api_name`], or a flag), the
//! ranges and messages are these.

/// A sampler setting that takes a number in a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SamplerField {
    /// [`SamplerConfig::temperature`](super::SamplerConfig::temperature).
    Temperature,
    /// [`SamplerConfig::top_p`](super::SamplerConfig::top_p).
    TopP,
    /// [`SamplerConfig::min_p`](super::SamplerConfig::min_p).
    MinP,
    /// [`SamplerConfig::repeat_penalty`](super::SamplerConfig::repeat_penalty).
    RepeatPenalty,
    /// [`SamplerConfig::frequency_penalty`](super::SamplerConfig::frequency_penalty).
    FrequencyPenalty,
    /// [`SamplerConfig::presence_penalty`](super::SamplerConfig::presence_penalty).
    PresencePenalty,
}

/// A sampler setting outside its range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("must be {expected}, not {value}")]
pub struct SamplerError {
    /// The setting.
    pub field: SamplerField,
    /// The value given, as written for people.
    pub value: String,
    /// The range, in words.
    pub expected: &'static str,
}

impl SamplerField {
    /// The name in OpenAI's API (and llama.cpp's extensions of it).
    pub fn api_name(self) -> &'static str {
        match self {
            SamplerField::Temperature => "temperature",
            SamplerField::TopP => "top_p",
            SamplerField::MinP => "min_p",
            SamplerField::RepeatPenalty => "repeat_penalty",
            SamplerField::FrequencyPenalty => "frequency_penalty",
            SamplerField::PresencePenalty => "presence_penalty",
        }
    }

    /// The accepted range: (low, high, whether low itself is accepted, words).
    fn range(self) -> (f64, f64, bool, &'static str) {
        let max = f64::from(f32::MAX);
        match self {
            SamplerField::Temperature => (0.0, max, true, "a finite number of at least 0"),
            SamplerField::TopP => (0.0, 1.0, true, "between 0 and 1"),
            SamplerField::MinP => (0.0, 1.0, true, "between 0 and 1"),
            SamplerField::RepeatPenalty => (0.0, max, false, "a finite number above 0"),
            SamplerField::FrequencyPenalty | SamplerField::PresencePenalty => {
                (-2.0, 2.0, true, "between -2 and 2")
            }
        }
    }

    /// `v` as the setting's value when it is in range. Values arrive as f64
    /// (JSON numbers, parsed flags), so one too large for f32 is named as
    /// given rather than as infinity.
    pub fn check(self, v: f64) -> Result<f32, SamplerError> {
        let (lo, hi, lo_ok, expected) = self.range();
        let above_lo = if lo_ok { v >= lo } else { v > lo };
        if v.is_finite() && above_lo && v <= hi {
            Ok(v as f32)
        } else {
            Err(SamplerError {
                field: self,
                value: show(v),
                expected,
            })
        }
    }
}

/// A number for messages: plain when short, in exponent form when not.
fn show(v: f64) -> String {
    let a = v.abs();
    if v.is_finite() && a != 0.0 && !(1e-4..1e16).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_messages() {
        use SamplerField::*;
        assert_eq!(Temperature.check(0.0), Ok(0.0));
        assert_eq!(Temperature.check(1e30), Ok(1e30));
        let e = Temperature.check(1e39).unwrap_err();
        assert_eq!(
            e.to_string(),
            "must be a finite number of at least 0, not 1e39"
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(Temperature.check(bad).is_err(), "{bad}");
        }
        assert!(TopP.check(5.0).is_err());
        assert!(MinP.check(-1.0).is_err());
        assert_eq!(TopP.check(1.0), Ok(1.0));
        assert!(RepeatPenalty.check(0.0).is_err());
        assert!(RepeatPenalty.check(f64::NAN).is_err());
        assert_eq!(RepeatPenalty.check(1.1), Ok(1.1));
        assert_eq!(FrequencyPenalty.check(-2.0), Ok(-2.0));
        let e = PresencePenalty.check(1e30).unwrap_err();
        assert_eq!(e.to_string(), "must be between -2 and 2, not 1e30");
        assert_eq!(e.field.api_name(), "presence_penalty");
    }
}
