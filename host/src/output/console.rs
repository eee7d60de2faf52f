//! Writing to standard output and standard error without panicking.
//!
//! `println!` and `eprintln!` panic when the write fails (a full disk behind `>file`,
//! `2>/dev/full`, a closed pipe with SIGPIPE ignored), and a panic ends the command with
//! status 101 and a backtrace. Everything drmas prints goes through here instead: a
//! failed write is recorded (the first failure of each stream), later writes to that
//! stream are dropped, and the command ends with [`EXIT_OUTPUT_FAILED`] once its work is
//! done, saying which stream failed and why on standard error if that still works
//! (docs/reliability.md, section 9).

use std::{
    fmt, io,
    io::Write,
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

/// The exit status of a command whose own work succeeded but whose standard output or
/// standard error could not be written: 74, `EX_IOERR` of `sysexits.h`.
pub const EXIT_OUTPUT_FAILED: u8 = 74;

/// One of the two streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "standard output",
            Stream::Stderr => "standard error",
        }
    }

    fn dead(self) -> &'static AtomicBool {
        static OUT: AtomicBool = AtomicBool::new(false);
        static ERR: AtomicBool = AtomicBool::new(false);
        match self {
            Stream::Stdout => &OUT,
            Stream::Stderr => &ERR,
        }
    }
}

/// A stream that could not be written, and why (the first failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFailure {
    pub stream: Stream,
    pub kind: io::ErrorKind,
    pub error: String,
}

impl fmt::Display for OutputFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot write to {}: {}; output after that was dropped",
            self.stream.name(),
            self.error
        )
    }
}

static FAILURES: Mutex<Vec<OutputFailure>> = Mutex::new(Vec::new());

fn record(stream: Stream, e: &io::Error) {
    if stream.dead().swap(true, Ordering::SeqCst) {
        return;
    }
    if let Ok(mut f) = FAILURES.lock() {
        f.push(OutputFailure {
            stream,
            kind: e.kind(),
            error: e.to_string(),
        });
    }
}

/// The streams that failed, in the order they failed (empty when all went well).
pub fn failures() -> Vec<OutputFailure> {
    FAILURES.lock().map(|f| f.clone()).unwrap_or_default()
}

/// Whether `stream` has failed (what is written to it is dropped).
pub fn has_failed(stream: Stream) -> bool {
    stream.dead().load(Ordering::SeqCst)
}

/// Writes `args` to `stream` and flushes; a failure is recorded, never a panic.
pub fn write(stream: Stream, args: fmt::Arguments<'_>) {
    emit(stream, |w| w.write_fmt(args));
}

/// Writes raw bytes to `stream`, as [`write`].
pub fn write_bytes(stream: Stream, bytes: &[u8]) {
    emit(stream, |w| w.write_all(bytes));
}

/// Runs `put` on `stream`'s locked handle and flushes, unless the stream has failed;
/// records a failure.
fn emit(stream: Stream, put: impl FnOnce(&mut dyn Write) -> io::Result<()>) {
    if has_failed(stream) {
        return;
    }
    let result = match stream {
        Stream::Stdout => {
            let mut out = io::stdout().lock();
            put(&mut out).and_then(|()| out.flush())
        }
        Stream::Stderr => {
            let mut err = io::stderr().lock();
            put(&mut err).and_then(|()| err.flush())
        }
    };
    if let Err(e) = result {
        record(stream, &e);
    }
}

/// `args` and a newline on standard output.
pub fn out_line(args: fmt::Arguments<'_>) {
    write(Stream::Stdout, format_args!("{args}\n"));
}

/// `args` and a newline on standard error.
pub fn err_line(args: fmt::Arguments<'_>) {
    write(Stream::Stderr, format_args!("{args}\n"));
}

/// Standard error as a writer for loggers (`tracing`'s): a failed write is recorded and
/// reported as written, so that the logger neither panics nor reports it on the same
/// broken stream.
#[derive(Debug, Clone, Copy, Default)]
pub struct StderrWriter;

impl Write for StderrWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        write_bytes(Stream::Stderr, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
