//! A run's output, kept by the sweep: what a `drmas train` or `drmas eval` child writes
//! to its standard output and error comes through a pipe, is appended to the run's log
//! file, and its first error line is remembered, so that the sweep's summary can say why
//! a run failed even when its log could not be written (a full disk: the child's own
//! writes never fail, the log's do, and the summary says both).

use std::{
    fs::OpenOptions,
    io::{BufRead, BufReader, Read, Write},
    path::{Path, PathBuf},
    sync::{Arc, Mutex, mpsc},
    time::Duration,
};

/// What a child's output said, as far as it was read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSummary {
    /// The first line that reports an error (`error: …`, `… panicked at …`), trimmed.
    pub first_error: Option<String>,
    /// The last line that is not blank, trimmed.
    pub last_line: Option<String>,
    /// Why the log file could not be written (its first failure), if it could not.
    pub log_error: Option<String>,
}

impl LogSummary {
    /// One line for a summary: the first error (or the last line), and the log's own
    /// failure.
    pub fn describe(&self) -> String {
        let mut text = match (&self.first_error, &self.last_line) {
            (Some(e), _) => format!("first error: {e}"),
            (None, Some(l)) => format!("no error line; its last line: {l}"),
            (None, None) => "it wrote nothing".to_string(),
        };
        if let Some(e) = &self.log_error {
            text.push_str(&format!("; its log could not be written: {e}"));
        }
        text
    }
}

/// Whether `line` reports an error.
pub fn is_error_line(line: &str) -> bool {
    let l = line.trim_start();
    l.starts_with("error:")
        || l.starts_with("Error:")
        || l.starts_with("ERROR")
        || l.contains(" panicked at ")
}

/// A thread that copies a child's output to its log and remembers what it said.
pub struct ChildLog {
    path: PathBuf,
    summary: Arc<Mutex<LogSummary>>,
    done: mpsc::Receiver<()>,
}

impl ChildLog {
    /// Starts copying `output` (the read end of the child's pipe) to the end of `log`.
    pub fn start(output: impl Read + Send + 'static, log: &Path) -> ChildLog {
        let summary = Arc::new(Mutex::new(LogSummary::default()));
        let (tx, done) = mpsc::channel();
        let path = log.to_path_buf();
        let (s, p) = (summary.clone(), path.clone());
        std::thread::spawn(move || {
            copy(output, &p, &s);
            let _ = tx.send(());
        });
        ChildLog {
            path,
            summary,
            done,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the output said, once it has ended (every writer closed it) or after
    /// `wait` (a grandchild that kept the pipe open), whichever comes first.
    pub fn finish(self, wait: Duration) -> LogSummary {
        let _ = self.done.recv_timeout(wait);
        self.summary.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn copy(output: impl Read, path: &Path, summary: &Mutex<LogSummary>) {
    let mut file = OpenOptions::new().create(true).append(true).open(path);
    if let Err(e) = &file
        && let Ok(mut s) = summary.lock()
    {
        s.log_error = Some(format!("{}: {e}", path.display()));
    }
    let mut reader = BufReader::new(output);
    let mut line = Vec::new();
    loop {
        line.clear();
        // Read to the end whatever happens to the log: a child must never block on a
        // full pipe.
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if let Ok(f) = &mut file
            && let Err(e) = f.write_all(&line)
            && let Ok(mut s) = summary.lock()
            && s.log_error.is_none()
        {
            s.log_error = Some(format!("{}: {e}", path.display()));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        if let Ok(mut s) = summary.lock() {
            if s.first_error.is_none() && is_error_line(text) {
                s.first_error = Some(text.to_string());
            }
            s.last_line = Some(text.to_string());
        }
    }
}
