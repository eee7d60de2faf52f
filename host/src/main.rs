//! The `drmas` command line.

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
