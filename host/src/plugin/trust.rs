//! Plugin folders and files are a trust boundary: a `.so` runs code as soon as it is
//! opened, so every folder and file is judged here before anything in it is loaded.
//!
//! The policy: a folder or file (links resolved) must not be writable by every user
//! and must be owned by the current user or root; a `.so` that is a link is judged at
//! its target and at the folder holding the target. Group-writable is accepted (the
//! group is trusted, as with a shared team folder and umask 002). The user may opt in
//! to untrusted folders and files; a sha256 pin is checked even then.

use super::error::LoadError;
use std::{
    collections::BTreeMap,
    fmt,
    io::Read,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

/// The command-line flag that loads untrusted plugins anyway.
pub const ALLOW_UNTRUSTED_FLAG: &str = "--allow-untrusted-plugins";
/// The environment variable that does the same (`1`/`true`/`yes`).
pub const ALLOW_UNTRUSTED_ENV: &str = "DRMAS_ALLOW_UNTRUSTED_PLUGINS";

/// What the user decided about loading plugins.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrustPolicy {
    /// Load from folders and files that others can write, or that another user owns.
    pub allow_untrusted: bool,
    /// Plugin file name (`libacme_bench.so`) → its sha256 as lower-case hex. A file of
    /// that name whose contents differ is refused, whatever `allow_untrusted` says.
    pub sha256: BTreeMap<String, String>,
}

/// Why a folder or file is not trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distrust {
    /// Its mode has the "others may write" bit (sticky folders like `/tmp` included).
    WorldWritable,
    /// It belongs to neither the current user nor root.
    Owner { owner: u32, me: u32 },
}

impl fmt::Display for Distrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distrust::WorldWritable => f.write_str("writable by every user"),
            Distrust::Owner { owner, me } => {
                write!(f, "owned by uid {owner}, neither you (uid {me}) nor root")
            }
        }
    }
}

/// What was judged untrusted: the plugin folder, the file, or where a link leads.
#[derive(Debug, Clone, PartialEq)]
pub enum Untrusted {
    Folder,
    File,
    /// The file is a link to this file.
    LinkTarget(PathBuf),
    /// The file is a link into this folder.
    LinkFolder(PathBuf),
    /// The plugin folder lies in this folder, which someone else can change: they can
    /// rename the plugin folder away and put their own in its place.
    Parent(PathBuf),
}

impl Untrusted {
    /// `plugin folder is writable by every user`, `links to X, a file owned by ...`.
    pub fn describe(&self, reason: &Distrust) -> String {
        match self {
            Untrusted::Folder => format!("plugin folder is {reason}"),
            Untrusted::File => format!("plugin file is {reason}"),
            Untrusted::LinkTarget(target) => {
                format!("links to {}, a file {reason}", target.display())
            }
            Untrusted::LinkFolder(folder) => {
                format!("links into {}, a folder {reason}", folder.display())
            }
            Untrusted::Parent(parent) => format!(
                "plugin folder lies in {}, a folder {reason}{}: whoever can change it can put another folder in this one's place",
                parent.display(),
                match reason {
                    Distrust::WorldWritable => " without the sticky bit",
                    Distrust::Owner { .. } => "",
                }
            ),
        }
    }
}

/// The decision on one folder or file, from its mode and owner: `None` when trusted.
pub fn distrust(mode: u32, owner: u32, me: u32) -> Option<Distrust> {
    if mode & 0o002 != 0 {
        Some(Distrust::WorldWritable)
    } else if owner != me && owner != 0 {
        Some(Distrust::Owner { owner, me })
    } else {
        None
    }
}

/// The effective uid of this process.
pub fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A named plugin folder must exist and be a folder, wherever it was named; `origin`
/// (`--plugin-dir`, `DRMAS_PLUGIN_PATH`) goes into the message when the caller has no
/// position of its own to show.
pub fn plugin_folder_problem(dir: &Path, origin: Option<&str>) -> Result<(), String> {
    let from = origin.map(|o| format!(" (from {o})")).unwrap_or_default();
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "plugin folder `{}`{from} is not a folder",
            dir.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "plugin folder `{}`{from} does not exist",
            dir.display()
        )),
        Err(e) => Err(format!(
            "plugin folder `{}`{from} cannot be read: {e}",
            dir.display()
        )),
    }
}

/// Judges a plugin folder (following links). A folder that cannot be read is left to
/// the listing, which skips it; missing folders are refused earlier, where they are
/// named.
pub fn check_folder(dir: &Path, policy: &TrustPolicy, me: u32) -> Result<(), LoadError> {
    let Ok(meta) = std::fs::metadata(dir) else {
        return Ok(());
    };
    judge(dir, Untrusted::Folder, &meta, policy, me)?;
    // Every folder above it up to the root: a folder that others may write (without
    // the sticky bit that keeps them to their own entries) or that another user owns
    // lets them swap the plugin folder for theirs after this check.
    let Ok(real) = dir.canonicalize() else {
        return Ok(());
    };
    for parent in real.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(parent) else {
            continue;
        };
        if let Some(reason) = parent_distrust(meta.mode(), meta.uid(), me) {
            return judge_reason(dir, Untrusted::Parent(parent.to_path_buf()), reason, policy);
        }
    }
    Ok(())
}

/// The decision on a folder above a plugin folder: world-writable is fine with the
/// sticky bit (`/tmp`: others cannot rename what they do not own).
pub fn parent_distrust(mode: u32, owner: u32, me: u32) -> Option<Distrust> {
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        Some(Distrust::WorldWritable)
    } else if owner != me && owner != 0 {
        Some(Distrust::Owner { owner, me })
    } else {
        None
    }
}

/// Judges one `.so` inside a folder already judged, and reads it: the file as opened
/// (for a link, its target, and the target's folder), then its sha256 when `policy`
/// pins one for its name. The file is opened once and the judgement, the pin and the
/// load all work on what that one read returned, so a file replaced or rewritten after
/// the checks cannot slip in: the bytes returned are the bytes that get loaded.
pub fn check_file(path: &Path, policy: &TrustPolicy, me: u32) -> Result<Vec<u8>, LoadError> {
    let unreadable = |e: std::io::Error| LoadError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let is_link = std::fs::symlink_metadata(path)
        .map_err(unreadable)?
        .file_type()
        .is_symlink();
    let mut file = std::fs::File::open(path).map_err(unreadable)?;
    // The metadata of what was opened, not of whatever the path names by now.
    let meta = file.metadata().map_err(unreadable)?;
    if is_link {
        let target = path.canonicalize().map_err(unreadable)?;
        judge(
            path,
            Untrusted::LinkTarget(target.clone()),
            &meta,
            policy,
            me,
        )?;
        if let Some(folder) = target.parent() {
            let meta = std::fs::metadata(folder).map_err(unreadable)?;
            judge(
                path,
                Untrusted::LinkFolder(folder.to_path_buf()),
                &meta,
                policy,
                me,
            )?;
        }
    } else {
        judge(path, Untrusted::File, &meta, policy, me)?;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes).map_err(unreadable)?;
    check_pin(path, &bytes, policy)?;
    Ok(bytes)
}

fn judge(
    path: &Path,
    what: Untrusted,
    meta: &std::fs::Metadata,
    policy: &TrustPolicy,
    me: u32,
) -> Result<(), LoadError> {
    let Some(reason) = distrust(meta.mode(), meta.uid(), me) else {
        return Ok(());
    };
    judge_reason(path, what, reason, policy)
}

fn judge_reason(
    path: &Path,
    what: Untrusted,
    reason: Distrust,
    policy: &TrustPolicy,
) -> Result<(), LoadError> {
    if policy.allow_untrusted {
        tracing::info!(
            "{}: {}; loading it anyway (untrusted plugins are allowed)",
            path.display(),
            what.describe(&reason)
        );
        Ok(())
    } else {
        Err(LoadError::Untrusted {
            path: path.to_path_buf(),
            what,
            reason,
        })
    }
}

fn check_pin(path: &Path, bytes: &[u8], policy: &TrustPolicy) -> Result<(), LoadError> {
    let Some(expected) = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| policy.sha256.get(n))
    else {
        return Ok(());
    };
    let actual = sha256_hex(bytes);
    if actual.eq_ignore_ascii_case(expected) {
        Ok(())
    } else {
        Err(LoadError::Sha256 {
            path: path.to_path_buf(),
            expected: expected.to_ascii_lowercase(),
            actual,
        })
    }
}

/// The sha256 of `bytes` as lower-case hex, as `sha256sum` prints it.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `text` is a sha256 written as hex (either case).
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_decision_on_mode_and_owner() {
        let me = 1000;
        assert_eq!(distrust(0o755, me, me), None);
        assert_eq!(distrust(0o700, 0, me), None, "root's folders are trusted");
        assert_eq!(distrust(0o775, me, me), None, "group-writable is accepted");
        assert_eq!(distrust(0o757, me, me), Some(Distrust::WorldWritable));
        assert_eq!(
            distrust(0o1777, 0, me),
            Some(Distrust::WorldWritable),
            "a sticky /tmp-like folder is still writable by every user"
        );
        assert_eq!(
            distrust(0o755, 1001, me),
            Some(Distrust::Owner { owner: 1001, me })
        );
        assert_eq!(
            Distrust::Owner { owner: 1001, me }.to_string(),
            "owned by uid 1001, neither you (uid 1000) nor root"
        );
        assert_eq!(distrust(0o777, 1001, me), Some(Distrust::WorldWritable));
    }

    #[test]
    fn folders_and_files_are_judged_by_their_metadata() {
        let me = current_uid();
        let policy = TrustPolicy::default();
        let dir = tempfile::tempdir().unwrap();
        let so = dir.path().join("a.so");
        std::fs::write(&so, b"x").unwrap();
        std::fs::set_permissions(&so, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(check_folder(dir.path(), &policy, me), Ok(()));
        assert_eq!(check_file(&so, &policy, me), Ok(b"x".to_vec()));

        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            check_folder(dir.path(), &policy, me)
                .unwrap_err()
                .to_string(),
            format!(
                "{}: plugin folder is writable by every user; refusing to load plugins from it \
                 (pass --allow-untrusted-plugins to load anyway)",
                dir.path().display()
            )
        );
        let allowed = TrustPolicy {
            allow_untrusted: true,
            ..TrustPolicy::default()
        };
        assert_eq!(check_folder(dir.path(), &allowed, me), Ok(()));

        // A link from a good folder to a file in a world-writable one.
        let good = tempfile::tempdir().unwrap();
        let link = good.path().join("b.so");
        std::os::unix::fs::symlink(&so, &link).unwrap();
        assert_eq!(
            check_file(&link, &policy, me).unwrap_err().to_string(),
            format!(
                "{}: links into {}, a folder writable by every user; refusing to load it \
                 (pass --allow-untrusted-plugins to load anyway)",
                link.display(),
                dir.path().canonicalize().unwrap().display()
            )
        );
        std::fs::set_permissions(&so, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(
            check_file(&link, &policy, me).unwrap_err().to_string(),
            format!(
                "{}: links to {}, a file writable by every user; refusing to load it \
                 (pass --allow-untrusted-plugins to load anyway)",
                link.display(),
                so.canonicalize().unwrap().display()
            )
        );
        assert_eq!(check_file(&link, &allowed, me), Ok(b"x".to_vec()));
    }

    #[test]
    fn a_pin_is_checked_even_when_untrusted_files_are_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let so = dir.path().join("a.so");
        std::fs::write(&so, b"abc").unwrap();
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let pinned = |hash: &str| TrustPolicy {
            allow_untrusted: true,
            sha256: [("a.so".to_string(), hash.to_string())].into(),
        };
        assert_eq!(
            check_file(&so, &pinned(abc), current_uid()),
            Ok(b"abc".to_vec()),
            "the bytes the pin was checked on are the bytes handed to the loader"
        );
        assert_eq!(
            check_file(&so, &pinned(&abc.to_uppercase()), current_uid()),
            Ok(b"abc".to_vec())
        );
        let other = "0".repeat(64);
        assert_eq!(
            check_file(&so, &pinned(&other), current_uid()),
            Err(LoadError::Sha256 {
                path: so.clone(),
                expected: other,
                actual: abc.into(),
            })
        );
        assert!(is_sha256_hex(abc));
        assert!(!is_sha256_hex("abc"));
        assert!(!is_sha256_hex(&"g".repeat(64)));
    }
}
