//! Helpers shared by the workspace integration tests.
