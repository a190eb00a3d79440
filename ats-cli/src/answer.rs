//! Generated text on standard output as it comes; an answer's reasoning
//! (gpt-oss's `analysis` channel, a `<think>` block) on standard error, apart.

use std::io::{self, StdoutLock, Write};

use anyhow::{Context, Result};
use ats_core::chat::harmony::Part;
use ats_core::chat::reasoning::Splitter;

/// Writes an answer's pieces to standard output, flushing each, and stops
/// generation when the reader goes away.
pub struct Answer {
    out: StdoutLock<'static>,
    err: Option<io::Error>,
    /// Splits answers with reasoning: reasoning to standard error.
    splitter: Option<Splitter>,
    /// The part written last (a newline on standard error ends reasoning).
    last: Option<Part>,
}

impl Answer {
    /// Locks standard output for the answer.
    pub fn new() -> Answer {
        Answer {
            out: io::stdout().lock(),
            err: None,
            splitter: None,
            last: None,
        }
    }

    /// The answer has its reasoning apart (as `splitter` finds it, if
    /// any): its reasoning goes to standard error, its content to standard
    /// output.
    pub fn reasoning_apart(mut self, splitter: Option<Splitter>) -> Answer {
        self.splitter = splitter;
        self
    }

    /// Writes a piece; `false` (stop generating) when the write failed.
    pub fn write(&mut self, text: &str) -> bool {
        let Some(h) = self.splitter.as_mut() else {
            return self.write_out(text);
        };
        let parts = h.push(text);
        parts.iter().all(|(p, t)| self.write_part(*p, t))
    }

    fn write_part(&mut self, part: Part, text: &str) -> bool {
        let was = self.last.replace(part);
        match part {
            Part::Reasoning => {
                let mut e = io::stderr().lock();
                let _ = e.write_all(text.as_bytes()).and_then(|_| e.flush());
                true
            }
            Part::Content => {
                if was == Some(Part::Reasoning) {
                    eprintln!();
                }
                self.write_out(text)
            }
        }
    }

    fn write_out(&mut self, text: &str) -> bool {
        match self
            .out
            .write_all(text.as_bytes())
            .and_then(|_| self.out.flush())
        {
            Ok(()) => true,
            Err(e) => {
                self.err = Some(e);
                false
            }
        }
    }

    /// Ends the answer with a newline; a failed write is an error unless the
    /// reader closed the pipe (`ats-cli run ... | head`).
    pub fn finish(mut self) -> Result<()> {
        if let Some(mut h) = self.splitter.take() {
            for (p, t) in h.finish() {
                self.write_part(p, &t);
            }
        }
        if let Some(e) = self.err.take()
            && e.kind() != io::ErrorKind::BrokenPipe
        {
            return Err(e).context("writing the answer");
        }
        let _ = writeln!(self.out);
        Ok(())
    }
}
