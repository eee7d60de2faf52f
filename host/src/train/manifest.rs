//! The content record of a checkpoint: `MANIFEST.sha256` lists the sha256 of every
//! other file of the folder (the format `sha256sum -c` reads), written last before the
//! folder is committed. A resume checks every file against it, so a flipped bit, a
//! truncated file, or a file swapped in from another checkpoint or model is refused
//! by name instead of loaded.

use super::fingerprint::sha256_file;
use crate::output;
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

pub const MANIFEST: &str = "MANIFEST.sha256";

/// What is wrong with a checkpoint's files, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: sha256 {found}, but {MANIFEST} records {want}: the file changed after the checkpoint was written"
    )]
    Differs {
        path: PathBuf,
        want: String,
        found: String,
    },
    #[error(
        "{path}: holds what {MANIFEST} records for {other}: parts of the checkpoint were swapped or copied between its folders"
    )]
    Swapped { path: PathBuf, other: String },
    #[error("{path}: listed in {MANIFEST} but missing")]
    Missing { path: PathBuf },
    #[error(
        "{path}: not listed in {MANIFEST}: the file was added after the checkpoint was written"
    )]
    Unlisted { path: PathBuf },
    #[error("{path}:{line}: not a `SHA256  FILE` line")]
    Malformed { path: PathBuf, line: usize },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ManifestError + '_ {
    move |source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Every file under `dir` but the manifest, as paths relative to `dir`, sorted. Names
/// starting with `.` are a writer's temporaries, not part of the checkpoint.
fn files(dir: &Path) -> Result<Vec<String>, ManifestError> {
    let mut out = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let here = dir.join(&rel);
        for entry in std::fs::read_dir(&here).map_err(io(&here))? {
            let entry = entry.map_err(io(&here))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || (rel.as_os_str().is_empty() && name == MANIFEST) {
                continue;
            }
            let child = rel.join(&name);
            if entry.file_type().map_err(io(&here))?.is_dir() {
                pending.push(child);
            } else {
                out.push(child.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Hashes of `names` under `dir`, computed two at a time (the files are big and the
/// machine has more than one core).
fn hashes(dir: &Path, names: &[String]) -> Result<Vec<String>, ManifestError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let chunk = names.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let jobs: Vec<_> = names
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|n| {
                            let path = dir.join(n);
                            sha256_file(&path).map(|(h, _)| h).map_err(io(&path))
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(names.len());
        for job in jobs {
            out.extend(job.join().expect("hashing does not panic")?);
        }
        Ok(out)
    })
}

/// Writes `dir/MANIFEST.sha256` for every other file in `dir` (atomically).
pub fn write(dir: &Path) -> Result<(), ManifestError> {
    let names = files(dir)?;
    let text: String = names
        .iter()
        .zip(hashes(dir, &names)?)
        .map(|(name, hash)| format!("{hash}  {name}\n"))
        .collect();
    let path = dir.join(MANIFEST);
    output::write_atomic(&path, text.as_bytes()).map_err(io(&path))
}

/// The files `dir`'s manifest lists that are not there, judged by name alone (no file
/// is read): `Ok(None)` when there is no manifest, `Ok(Some(missing))` otherwise.
pub fn missing_parts(dir: &Path) -> Result<Option<Vec<String>>, ManifestError> {
    let path = dir.join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    let mut missing = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some((_, name)) = line.split_once("  ") else {
            return Err(ManifestError::Malformed { path, line: i + 1 });
        };
        if !dir.join(name).is_file() {
            missing.push(name.to_string());
        }
    }
    Ok(Some(missing))
}

/// Checks every file of `dir` against its manifest: `Ok(false)` when there is none (a
/// checkpoint of an older drmas), `Ok(true)` when all match.
pub fn verify(dir: &Path) -> Result<bool, ManifestError> {
    let path = dir.join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io(&path)(e)),
    };
    let mut want = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let Some((hash, name)) = line.split_once("  ") else {
            return Err(ManifestError::Malformed { path, line: i + 1 });
        };
        want.insert(name.to_string(), hash.to_string());
    }
    let present = files(dir)?;
    if let Some(extra) = present.iter().find(|n| !want.contains_key(*n)) {
        return Err(ManifestError::Unlisted {
            path: dir.join(extra),
        });
    }
    let names: Vec<String> = want.keys().cloned().collect();
    if let Some(missing) = names.iter().find(|n| !dir.join(n).is_file()) {
        return Err(ManifestError::Missing {
            path: dir.join(missing),
        });
    }
    for (name, found) in names.iter().zip(hashes(dir, &names)?) {
        if want[name] != found {
            // The content of another part of this checkpoint: say which.
            if let Some((other, _)) = want.iter().find(|(n, h)| *n != name && **h == found) {
                return Err(ManifestError::Swapped {
                    path: dir.join(name),
                    other: other.clone(),
                });
            }
            return Err(ManifestError::Differs {
                path: dir.join(name),
                want: want[name].clone(),
                found,
            });
        }
    }
    Ok(true)
}
