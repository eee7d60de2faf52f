//! All integration tests of this crate, one module per former test file, linked into
//! one binary (each test binary links the whole crate and its dependencies again).

mod agents;
mod common;
mod config_keys;
mod grader;
mod grader_peer;
mod plugin;
mod rewards;
mod team;
