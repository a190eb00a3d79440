//! gpt-oss's harmony answers split into reasoning and content. An answer is
//! a run of messages, each a header and a body:
//! `<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…<|return|>`
//! (the prompt ends in `<|start|>assistant`, so the answer opens on a
//! header). The `analysis` channel is reasoning; `final`, and `commentary`
//! addressed to the user, are content; a message to a recipient
//! (`to=functions.…`, a tool call) is neither: it is kept apart as an
//! [`Addressed`] message. Text without harmony markers (an answer a grammar
//! shaped) is content as it is.
//!
//! [`HarmonySplitter`] works on streamed text, holding back only what may
//! be the start of a marker; [`split`] on a whole answer.

/// Where a piece of an answer belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The model's reasoning (`analysis`).
    Reasoning,
    /// What the user reads (`final`, `commentary`).
    Content,
}

/// A whole answer split.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HarmonyAnswer {
    /// The `analysis` messages' text.
    pub reasoning: String,
    /// The `final` and user-facing `commentary` messages' text.
    pub content: String,
    /// The messages to a recipient (tool calls), in order.
    pub addressed: Vec<Addressed>,
}

/// A message to a recipient: `<|channel|>commentary to=functions.f
/// <|constrain|>json<|message|>{..}` is a call of `functions.f`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Addressed {
    /// Who it is for (`functions.get_weather`).
    pub recipient: String,
    /// Its header as written (role, channel, recipient, content type).
    pub header: String,
    /// Its body: a call's arguments.
    pub body: String,
}

impl Addressed {
    /// The message as the model wrote it.
    pub fn raw(&self) -> String {
        format!("{}{MESSAGE}{}", self.header, self.body)
    }
}

/// Whether a model answers in harmony's channels: its vocabulary has the
/// `<|channel|>` and `<|message|>` tokens (gpt-oss).
pub fn uses_harmony(tok: &crate::Tokenizer) -> bool {
    tok.token_id("<|channel|>").is_some() && tok.token_id("<|message|>").is_some()
}

/// Splits a whole answer.
pub fn split(text: &str) -> HarmonyAnswer {
    let mut s = HarmonySplitter::default();
    let mut out = HarmonyAnswer::default();
    let mut pieces = s.push(text);
    pieces.extend(s.finish());
    for (part, t) in pieces {
        match part {
            Part::Reasoning => out.reasoning.push_str(&t),
            Part::Content => out.content.push_str(&t),
        }
    }
    out.addressed = s.addressed;
    out
}

const MESSAGE: &str = "<|message|>";
const CHANNEL: &str = "<|channel|>";
/// Markers that end a message's body.
const ENDS: [&str; 4] = ["<|end|>", "<|return|>", "<|call|>", "<|start|>"];

/// Where the splitter is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    /// Reading a header, up to `<|message|>`.
    #[default]
    Header,
    /// Reading a body whose text goes to the part (`None`: a tool call's
    /// arguments or another recipient's, shown to no one).
    Body(Option<Part>),
}

/// Splits streamed answer text into parts as it arrives.
#[derive(Clone, Debug, Default)]
pub struct HarmonySplitter {
    state: State,
    /// Text not yet placed: a header, or what may be the start of a marker.
    pending: String,
    /// Whether any harmony marker was seen (text before the first is
    /// content when it is not a header).
    started: bool,
    /// The messages to a recipient so far (the last may still be growing).
    addressed: Vec<Addressed>,
}

impl HarmonySplitter {
    /// Takes the next text; returns the pieces now known, in order.
    pub fn push(&mut self, text: &str) -> Vec<(Part, String)> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        while self.step(&mut out) {}
        out
    }

    /// The answer ended: a body cut short keeps its text; a header cut
    /// short is dropped (an answer without any marker is all content).
    pub fn finish(&mut self) -> Vec<(Part, String)> {
        let rest = std::mem::take(&mut self.pending);
        let mut out = Vec::new();
        match self.state {
            State::Body(part) => self.emit(part, &rest, &mut out),
            // no marker came, only what might have begun one: it is text
            State::Header if !self.started && begins_opener(&rest) => {
                self.emit(Some(Part::Content), &rest, &mut out)
            }
            State::Header => {}
        }
        out
    }

    /// The messages to a recipient (tool calls) read so far.
    pub fn addressed(&self) -> &[Addressed] {
        &self.addressed
    }

    /// One move forward; false when more text is needed.
    fn step(&mut self, out: &mut Vec<(Part, String)>) -> bool {
        match self.state {
            State::Header => self.header(),
            State::Body(part) => self.body(part, out),
        }
    }

    fn header(&mut self) -> bool {
        if !self.started && !self.pending.is_empty() && !may_open_marker(&self.pending) {
            // no harmony here: everything is content
            self.state = State::Body(Some(Part::Content));
            return true;
        }
        let Some(at) = self.pending.find(MESSAGE) else {
            return false;
        };
        self.started = true;
        let header: String = self.pending.drain(..at).collect();
        self.pending.drain(..MESSAGE.len());
        let part = part_of(&header);
        if part.is_none() {
            self.addressed.push(Addressed {
                recipient: recipient_of(&header).to_string(),
                header,
                body: String::new(),
            });
        }
        self.state = State::Body(part);
        true
    }

    /// Body text to its part, or to the message being addressed.
    fn emit(&mut self, part: Option<Part>, t: &str, out: &mut Vec<(Part, String)>) {
        if t.is_empty() {
            return;
        }
        match (part, self.addressed.last_mut()) {
            (Some(p), _) => match out.last_mut() {
                Some((q, s)) if *q == p => s.push_str(t),
                _ => out.push((p, t.to_string())),
            },
            (None, Some(a)) => a.body.push_str(t),
            (None, None) => {}
        }
    }

    fn body(&mut self, part: Option<Part>, out: &mut Vec<(Part, String)>) -> bool {
        let Some(at) = self.pending.find("<|") else {
            // all but a last '<' that may open a marker
            let keep = usize::from(self.pending.ends_with('<'));
            let text: String = self.pending.drain(..self.pending.len() - keep).collect();
            self.emit(part, &text, out);
            return false;
        };
        let text: String = self.pending.drain(..at).collect();
        self.emit(part, &text, out);
        if let Some(end) = ENDS.iter().find(|m| self.pending.starts_with(**m)) {
            // `<|start|>` opens the next header itself; the others end the body
            let used = if *end == "<|start|>" { 0 } else { end.len() };
            self.pending.drain(..used);
            self.started = true;
            self.state = State::Header;
            return true;
        }
        if ENDS.iter().any(|m| m.starts_with(self.pending.as_str())) {
            return false; // a marker, not whole yet
        }
        // "<|" that opens no end marker is text
        self.pending.drain(..2);
        self.emit(part, "<|", out);
        true
    }
}

/// What a harmony answer's first header opens with: a marker (`<|…`), or
/// a recipient right after the prompt's `<|start|>assistant` (` to=…`).
const OPENERS: [&str; 2] = ["<|", " to="];

/// Whether `s` is the beginning of an opener, and not the whole of one.
fn begins_opener(s: &str) -> bool {
    OPENERS
        .iter()
        .any(|m| m.len() > s.len() && m.starts_with(s))
}

/// Whether `s` may begin a harmony header (see [`OPENERS`]), or be the
/// start of one.
fn may_open_marker(s: &str) -> bool {
    OPENERS.iter().any(|m| s.starts_with(m) || m.starts_with(s))
}

/// The recipient a header names (`to=functions.f`), up to a space or marker.
fn recipient_of(header: &str) -> &str {
    let Some(at) = header.find("to=") else {
        return "";
    };
    let name = &header[at + 3..];
    name.split(|c: char| c.is_whitespace() || c == '<')
        .next()
        .unwrap_or("")
}

/// The part a message with this header goes to.
fn part_of(header: &str) -> Option<Part> {
    if header.contains("to=") {
        return None;
    }
    let channel = header
        .rfind(CHANNEL)
        .map(|i| &header[i + CHANNEL.len()..])
        .unwrap_or("");
    let name = channel
        .split(|c: char| c.is_whitespace() || c == '<')
        .next()
        .unwrap_or("");
    Some(if name == "analysis" {
        Part::Reasoning
    } else {
        Part::Content
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = "<|channel|>analysis<|message|>User asks: 2+2. Easy.<|end|>\
        <|start|>assistant<|channel|>final<|message|>It is 4 <|not a marker|>.";

    #[test]
    fn analysis_is_reasoning_and_final_is_content() {
        let a = split(ANSWER);
        assert_eq!(a.reasoning, "User asks: 2+2. Easy.");
        assert_eq!(a.content, "It is 4 <|not a marker|>.");
    }

    #[test]
    fn streamed_in_any_pieces_it_splits_the_same() {
        let whole = split(ANSWER);
        for size in 1..12 {
            let mut s = HarmonySplitter::default();
            let mut got = HarmonyAnswer::default();
            let chars: Vec<char> = ANSWER.chars().collect();
            let mut pieces = Vec::new();
            for c in chars.chunks(size) {
                pieces.extend(s.push(&c.iter().collect::<String>()));
            }
            pieces.extend(s.finish());
            for (p, t) in pieces {
                match p {
                    Part::Reasoning => got.reasoning.push_str(&t),
                    Part::Content => got.content.push_str(&t),
                }
            }
            got.addressed = s.addressed().to_vec();
            assert_eq!(got, whole, "pieces of {size}");
        }
    }

    #[test]
    fn tool_calls_are_neither_and_commentary_is_content() {
        let a = split(
            "<|channel|>commentary<|message|>Checking the weather.<|end|>\
             <|start|>assistant<|channel|>commentary to=functions.get_weather \
             <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
        );
        assert_eq!(a.reasoning, "");
        assert_eq!(a.content, "Checking the weather.");
        let call = Addressed {
            recipient: "functions.get_weather".into(),
            header: "<|start|>assistant<|channel|>commentary to=functions.get_weather \
                     <|constrain|>json"
                .into(),
            body: "{\"city\":\"Paris\"}".into(),
        };
        assert_eq!(a.addressed, std::slice::from_ref(&call));
        assert!(
            a.addressed[0]
                .raw()
                .ends_with("json<|message|>{\"city\":\"Paris\"}")
        );
        // the recipient in the role's header, right after the prompt
        let a = split(" to=functions.f<|channel|>commentary json<|message|>{}<|call|>");
        assert_eq!(a.addressed[0].recipient, "functions.f");
        assert_eq!(
            (a.addressed[0].body.as_str(), a.content.as_str()),
            ("{}", "")
        );
        // streamed, the splitter holds the same messages
        let mut s = HarmonySplitter::default();
        for c in call.raw().chars() {
            s.push(&c.to_string());
        }
        s.finish();
        assert_eq!(s.addressed(), [call]);
    }

    /// Answers made of marker pieces, partial markers and text (some of
    /// it multi-byte), split whole and streamed in pieces of every size
    /// from 1 to 9 bytes at character boundaries: the same parts.
    #[test]
    fn random_answers_split_alike_whole_and_streamed() {
        const BITS: [&str; 15] = [
            "<|channel|>",
            "analysis",
            "final",
            "<|message|>",
            "<|end|>",
            "<|start|>",
            "assistant",
            "<|return|>",
            "<|call|>",
            " to=functions.f",
            "{\"a\": 1}",
            "<|",
            "<",
            "é🦀 x",
            "|>",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..500 {
            let text: String = (0..next(24)).map(|_| BITS[next(BITS.len())]).collect();
            let whole = split(&text);
            let size = 1 + next(9);
            let mut s = HarmonySplitter::default();
            let mut got = HarmonyAnswer::default();
            let (mut pieces, mut at) = (Vec::new(), 0);
            while at < text.len() {
                let mut end = (at + size).min(text.len());
                while !text.is_char_boundary(end) {
                    end += 1;
                }
                pieces.extend(s.push(&text[at..end]));
                at = end;
            }
            pieces.extend(s.finish());
            for (p, t) in pieces {
                match p {
                    Part::Reasoning => got.reasoning.push_str(&t),
                    Part::Content => got.content.push_str(&t),
                }
            }
            got.addressed = s.addressed().to_vec();
            assert_eq!(got, whole, "{text:?} in pieces of {size}");
            assert!(whole.reasoning.len() + whole.content.len() <= text.len());
        }
    }

    #[test]
    fn text_without_markers_is_content_and_cut_bodies_keep_their_text() {
        let a = split("{\"answer\": 4}");
        assert_eq!(a.content, "{\"answer\": 4}");
        // max_tokens ended the reasoning
        let a = split("<|channel|>analysis<|message|>Let me thi");
        assert_eq!(
            (a.reasoning.as_str(), a.content.as_str()),
            ("Let me thi", "")
        );
        // a header cut short shows nothing
        assert_eq!(split("<|channel|>analysis<|mes"), HarmonyAnswer::default());
        // what only began like a marker is text
        for text in [" to", "<", " t"] {
            assert_eq!(split(text).content, text);
        }
    }
}
