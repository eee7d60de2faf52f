//! The `drmas` command line.

// Printing never panics: `outln!`, `out!`, `errln!`, `err!` (drmas::output::console).
#[macro_use]
#[path = "cli/print.rs"]
mod print;

mod cli;

fn main() -> std::process::ExitCode {
    // Like any Unix tool: when the reader of our output goes away (`drmas ... | head`),
    // end quietly instead of panicking on the failed write.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    cli::run()
}
