//! All integration tests of this crate, one module per former test file, linked into
//! one binary (each test binary links the whole crate and its dependencies again).

mod config_keys;
mod fixtures;
mod pools;
