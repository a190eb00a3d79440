//! Usage errors: mistakes in the command line found after parsing. `main`
//! exits with 2 for them (as for clap's own), 1 for every other failure.

use std::fmt;

/// A command-line mistake, with what to do instead.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Returns early with a [`UsageError`] built like `format!`.
macro_rules! usage_bail {
    ($($arg:tt)*) => {
        return Err($crate::usage::UsageError(format!($($arg)*)).into())
    };
}
pub(crate) use usage_bail;
