//! One writer per output, held by something no file operation can take away.
//!
//! A lock on a lock file is only as good as the file's name: delete `RUN/.lock` during
//! a run and the next writer locks a new file while the first still writes. So:
//!
//! - a folder output (a run folder, a data folder) is locked through the folder itself:
//!   an exclusive `flock` on the folder's own descriptor, which holds whatever happens
//!   to the files inside it;
//! - a file output is locked through its folder's identity (device and inode) and its
//!   name: an abstract Unix socket bound to that key, which no file operation can
//!   remove, plus the `flock` of a `.NAME.lock` beside it (for processes that do not
//!   share this network namespace).
//!
//! The kernel releases every hold when the process ends however it ends, so a crashed
//! run never leaves an output stuck. The holder's pid for the message comes from the
//! kernel too (`/proc/locks`, `SO_PEERCRED`); `.lock` files keep it for people only.

use super::{OutputError, parent_of, write_atomic};
use std::{
    fs, io,
    os::{
        fd::AsRawFd,
        linux::net::SocketAddrExt,
        unix::{
            fs::MetadataExt,
            net::{SocketAddr, UnixListener, UnixStream},
        },
    },
    path::Path,
};

/// A held output lock; dropping it releases the output.
pub struct OutputLock {
    _folder: Option<fs::File>,
    _file: Option<fs::File>,
    _socket: Option<UnixListener>,
}

/// The name of the pid note a folder lock leaves in its folder.
pub const LOCK_NOTE: &str = ".lock";

impl OutputLock {
    /// Locks the folder output `dir` (`what` it is, for the message), creating it.
    pub fn folder(dir: &Path, what: &'static str) -> Result<Self, OutputError> {
        let io_err = |source| OutputError::Io {
            path: dir.to_path_buf(),
            source,
        };
        fs::create_dir_all(dir).map_err(io_err)?;
        let folder = fs::File::open(dir).map_err(io_err)?;
        if !try_flock(&folder).map_err(io_err)? {
            let pid = flock_holder(&folder)
                .map(|p| p.to_string())
                .or_else(|| read_note(&dir.join(LOCK_NOTE)))
                .unwrap_or_else(|| "unknown".into());
            return Err(OutputError::Locked {
                what,
                path: dir.to_path_buf(),
                pid,
            });
        }
        // For people looking at the folder; the lock does not depend on it.
        let note = dir.join(LOCK_NOTE);
        write_atomic(&note, std::process::id().to_string().as_bytes()).map_err(|source| {
            OutputError::Io {
                path: note.clone(),
                source,
            }
        })?;
        Ok(Self {
            _folder: Some(folder),
            _file: None,
            _socket: None,
        })
    }

    /// The lock of a run folder.
    pub fn run_folder(run: &Path) -> Result<Self, OutputError> {
        Self::folder(run, "run folder")
    }

    /// The lock of one output file (creates its folder).
    pub fn file(path: &Path) -> Result<Self, OutputError> {
        let dir = parent_of(path);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let io_err = |p: &Path| {
            let p = p.to_path_buf();
            move |source| OutputError::Io { path: p, source }
        };
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let locked = |pid: Option<u32>| OutputError::Locked {
            what: "output",
            path: path.to_path_buf(),
            pid: pid.map_or_else(|| "unknown".into(), |p| p.to_string()),
        };
        let meta = fs::metadata(dir).map_err(io_err(dir))?;
        let key = socket_key(meta.dev(), meta.ino(), &name);
        let socket = match bind_abstract(&key) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                return Err(locked(socket_holder(&key)));
            }
            Err(e) => return Err(io_err(dir)(e)),
        };
        let lock_file = lock_file_of(path);
        let file = loop {
            let file = fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&lock_file)
                .map_err(io_err(&lock_file))?;
            if !try_flock(&file).map_err(io_err(&lock_file))? {
                return Err(locked(flock_holder(&file)));
            }
            // Locked the file the name still points at, not one deleted meanwhile.
            if same_file(&file, &lock_file) {
                break file;
            }
        };
        file.set_len(0).map_err(io_err(&lock_file))?;
        io::Write::write_all(&mut &file, std::process::id().to_string().as_bytes())
            .map_err(io_err(&lock_file))?;
        Ok(Self {
            _folder: None,
            _file: Some(file),
            _socket: Some(socket),
        })
    }
}

/// The `.NAME.lock` beside the file output `path` that [`OutputLock::file`] flocks.
pub fn lock_file_of(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    parent_of(path).join(format!(".{name}.lock"))
}

/// What [`OutputLock::file`] would add to the disk for `paths` now: the lock files that
/// do not exist yet and the folders it would create, the deepest first. A command that
/// stops before its work (its experiment refused) takes them back
/// ([`Footprint::take_back`]), so a refusal leaves nothing behind.
#[derive(Debug, Default)]
pub struct Footprint {
    files: Vec<std::path::PathBuf>,
    dirs: Vec<std::path::PathBuf>,
}

impl Footprint {
    pub fn of_files(paths: &[&Path]) -> Self {
        let mut out = Self::default();
        for path in paths {
            let lock = lock_file_of(path);
            if fs::symlink_metadata(&lock).is_err() {
                out.files.push(lock);
            }
            let mut dir = Some(parent_of(path));
            while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
                if !out.dirs.iter().any(|x| x == d) {
                    out.dirs.push(d.to_path_buf());
                }
                dir = d.parent();
            }
        }
        // Deepest first, so each folder is empty when its turn comes.
        out.dirs
            .sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        out
    }

    /// Removes the lock files and the folders (each only if empty) recorded; what
    /// cannot be removed stays.
    pub fn take_back(&self) {
        for f in &self.files {
            let _ = fs::remove_file(f);
        }
        for d in &self.dirs {
            let _ = fs::remove_dir(d);
        }
    }
}

/// An exclusive, non-blocking `flock`: whether it was taken.
fn try_flock(file: &fs::File) -> io::Result<bool> {
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(e),
    }
}

fn same_file(file: &fs::File, path: &Path) -> bool {
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

fn read_note(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let pid = text.trim();
    (!pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())).then(|| pid.to_string())
}

/// The pid holding an `flock` on `file`'s inode, from `/proc/locks`.
fn flock_holder(file: &fs::File) -> Option<u32> {
    let meta = file.metadata().ok()?;
    let text = fs::read_to_string("/proc/locks").ok()?;
    holder_in_proc_locks(&text, meta.dev(), meta.ino())
}

/// `/proc/locks` lines read `1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`: the
/// holder's pid and the locked inode as `MAJOR:MINOR:INODE` (hex device numbers).
fn holder_in_proc_locks(text: &str, dev: u64, ino: u64) -> Option<u32> {
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let at = fields.iter().position(|f| *f == "FLOCK")?;
        // A blocked waiter's line reads `1: -> FLOCK …`; only the holder counts.
        if at > 0 && fields[at - 1] == "->" {
            return None;
        }
        let (pid, inode) = (fields.get(at + 3)?, fields.get(at + 4)?);
        (*inode == want).then(|| pid.parse().ok()).flatten()
    })
}

/// The abstract socket name of the file `name` in the folder (`dev`, `ino`). Abstract
/// names are at most 107 bytes, so a long file name is hashed.
fn socket_key(dev: u64, ino: u64, name: &str) -> String {
    let name = if name.len() <= 48 {
        name.to_string()
    } else {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut h);
        let cut = name
            .char_indices()
            .map(|(i, _)| i)
            .take_while(|&i| i <= 32)
            .last();
        format!("{}~{:016x}", &name[..cut.unwrap_or(0)], h.finish())
    };
    format!("drmas-output/{dev:x}/{ino:x}/{name}")
}

fn bind_abstract(key: &str) -> io::Result<UnixListener> {
    UnixListener::bind_addr(&SocketAddr::from_abstract_name(key.as_bytes())?)
}

/// The pid of the process listening on the abstract socket `key`, from the kernel's
/// credentials of the connection (`SO_PEERCRED`).
fn socket_holder(key: &str) -> Option<u32> {
    let addr = SocketAddr::from_abstract_name(key.as_bytes()).ok()?;
    let stream = UnixStream::connect_addr(&addr).ok()?;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a `ucred` of the given size on a socket we own.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some(cred.pid as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_with_the_holders_pid() {
        let dir = tempfile::tempdir().unwrap();
        let held = OutputLock::run_folder(dir.path()).unwrap();
        // flock is per open file: a second open in this process conflicts too.
        let err = OutputLock::run_folder(dir.path()).err().unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "run folder {} is in use by another drmas process (pid {})",
                dir.path().display(),
                std::process::id()
            )
        );
        drop(held);
        OutputLock::run_folder(dir.path()).unwrap();
    }

    #[test]
    fn a_deleted_lock_note_does_not_free_the_run_folder() {
        let dir = tempfile::tempdir().unwrap();
        let _held = OutputLock::run_folder(dir.path()).unwrap();
        fs::remove_file(dir.path().join(LOCK_NOTE)).unwrap();
        let err = OutputLock::run_folder(dir.path()).err().unwrap();
        // The pid comes from the kernel's lock table, not from the deleted note.
        assert_eq!(
            err.to_string(),
            format!(
                "run folder {} is in use by another drmas process (pid {})",
                dir.path().display(),
                std::process::id()
            )
        );
    }

    #[test]
    fn a_deleted_lock_file_does_not_free_a_file_output() {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("report.json");
        let held = OutputLock::file(&report).unwrap();
        fs::remove_file(dir.path().join(".report.json.lock")).unwrap();
        let err = OutputLock::file(&report).err().unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "output {} is in use by another drmas process (pid {})",
                report.display(),
                std::process::id()
            )
        );
        // Another file in the same folder is another output.
        let _other = OutputLock::file(&dir.path().join("samples.jsonl")).unwrap();
        drop(held);
        OutputLock::file(&report).unwrap();
    }

    #[test]
    fn proc_locks_lines_give_the_holder_of_the_inode() {
        let text = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:5678 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 4343 fd:01:5678 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 99 fd:01:5678 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 77 fd:01:9999 0 EOF\n";
        let dev = libc::makedev(0xfd, 0x01);
        assert_eq!(holder_in_proc_locks(text, dev, 5678), Some(4242));
        assert_eq!(holder_in_proc_locks(text, dev, 9999), Some(77));
        assert_eq!(holder_in_proc_locks(text, dev, 1), None);
    }

    #[test]
    fn long_names_fit_an_abstract_socket_name() {
        let key = socket_key(u64::MAX, u64::MAX, &"é".repeat(200));
        assert!(key.len() <= 107, "{} bytes", key.len());
        assert_ne!(key, socket_key(u64::MAX, u64::MAX, &"é".repeat(201)));
    }
}
