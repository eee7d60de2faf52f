//! All integration tests of this crate, one module per former test file, linked into
//! one binary (each test binary links the whole crate and its dependencies again).

mod agents;
mod em_f1;
mod env;
mod index;
mod protocol;
