//! What a front end submits and what it hears back.

use ats_core::round::{EmbedOverride, Positions};

use crate::session::{GenParams, Generation};

/// A request's number, in submission order.
pub type RequestId = u64;

/// A prompt to answer.
#[derive(Clone, Debug)]
pub struct Request {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Image rows and M-RoPE positions of the prompt, and the position the
    /// first generated token takes (`None`: a text prompt).
    pub embeds: Option<(EmbedOverride, Positions, i64)>,
    /// What to generate.
    pub params: GenParams,
}

impl Request {
    /// A text prompt.
    pub fn text(prompt: Vec<u32>, params: GenParams) -> Request {
        Request {
            prompt,
            embeds: None,
            params,
        }
    }

    /// This request with `answer` (tokens generated for it) after its
    /// prompt, at the positions decoding gave them: a preempted request
    /// computes them again.
    pub(crate) fn continued(&self, answer: &[u32]) -> Request {
        let embeds = self.embeds.as_ref().map(|(rows, pos, after)| {
            let start = (*after).max(0) as usize;
            let text = match pos.components {
                1 => Positions::linear(start, answer.len()),
                _ => Positions::mrope_text(start, answer.len()),
            };
            let mut pos = pos.clone();
            pos.data.extend(text.data);
            (rows.clone(), pos, after + answer.len() as i64)
        });
        Request {
            prompt: [&self.prompt[..], answer].concat(),
            embeds,
            params: self.params.clone(),
        }
    }
}

/// What happened to a request in a step.
#[derive(Debug)]
pub enum Event {
    /// Text of the answer that is final.
    Text {
        /// The request.
        id: RequestId,
        /// The text.
        text: String,
    },
    /// Log-probabilities of the tokens whose text the request's next
    /// `Text` event carries (only when its parameters ask for them).
    Logprobs {
        /// The request.
        id: RequestId,
        /// One per token, in order.
        logprobs: Vec<ats_core::sampling::TokenLogprob>,
    },
    /// The answer is complete.
    Done {
        /// The request.
        id: RequestId,
        /// Tokens, text, why it stopped, timings.
        generation: Generation,
    },
    /// The request failed (the others go on).
    Failed {
        /// The request.
        id: RequestId,
        /// Why.
        error: String,
    },
}

impl Event {
    /// The request the event is about.
    pub fn id(&self) -> RequestId {
        match self {
            Event::Text { id, .. }
            | Event::Logprobs { id, .. }
            | Event::Done { id, .. }
            | Event::Failed { id, .. } => *id,
        }
    }
}
