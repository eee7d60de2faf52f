//! The binary's printing macros: `outln!`, `out!` (standard output), `errln!`, `err!`
//! (standard error), as `println!` and friends but never panicking: a failed write is
//! recorded and the command ends with status 74 (`drmas::output::console`). `println!`
//! and friends are not used in the binary. Declared by `main.rs` (and by the tests that
//! include a command's file) before the modules that use them.

// The tests include it for one command file, which uses some of them.
#![allow(unused_macros)]

macro_rules! outln {
    () => {
        drmas::output::console::out_line(format_args!(""))
    };
    ($($t:tt)*) => {
        drmas::output::console::out_line(format_args!($($t)*))
    };
}
macro_rules! out {
    ($($t:tt)*) => {
        drmas::output::console::write(drmas::output::console::Stream::Stdout, format_args!($($t)*))
    };
}
macro_rules! errln {
    () => {
        drmas::output::console::err_line(format_args!(""))
    };
    ($($t:tt)*) => {
        drmas::output::console::err_line(format_args!($($t)*))
    };
}
macro_rules! err {
    ($($t:tt)*) => {
        drmas::output::console::write(drmas::output::console::Stream::Stderr, format_args!($($t)*))
    };
}
