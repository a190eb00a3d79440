//! Generated text on standard output as it comes.

use std::io::{self, StdoutLock, Write};

use anyhow::{Context, Result};

/// Writes an answer's pieces to standard output, flushing each, and stops
/// generation when the reader goes away.
pub struct Answer {
    out: StdoutLock<'static>,
    err: Option<io::Error>,
}

impl Answer {
    /// Locks standard output for the answer.
    pub fn new() -> Answer {
        Answer {
            out: io::stdout().lock(),
            err: None,
        }
    }

    /// Writes a piece; `false` (stop generating) when the write failed.
    pub fn write(&mut self, text: &str) -> bool {
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
        if let Some(e) = self.err.take()
            && e.kind() != io::ErrorKind::BrokenPipe
        {
            return Err(e).context("writing the answer");
        }
        let _ = writeln!(self.out);
        Ok(())
    }
}
