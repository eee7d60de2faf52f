//! Finding plugin files.

use std::path::{Path, PathBuf};

/// One plugin folder and the `*.so` files directly inside it.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginFolder {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
}

/// `dirs` without the folders already named earlier under another spelling (`./p` and
/// `p`, a trailing `/.`, a link to a listed folder): each folder is scanned, listed and
/// counted once, under the name it was first given. Folders that cannot be resolved
/// (missing ones, refused where they are named) are compared as written.
pub fn distinct_folders(dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    dirs.into_iter()
        .filter(|d| seen.insert(d.canonicalize().unwrap_or_else(|_| d.clone())))
        .collect()
}

/// Each folder with its `*.so` files, sorted so loading order (and thus every message
/// about it) is the same on every run. A folder reached twice (named twice, or through
/// a link) is listed once, and so is a file. Listing a folder runs nothing in it: the
/// trust checks come after. Missing folders are skipped: the caller refuses them where
/// they are named.
pub fn find_plugin_files(dirs: &[PathBuf]) -> Vec<PluginFolder> {
    let mut seen = std::collections::HashSet::new();
    let mut folders = Vec::new();
    for dir in distinct_folders(dirs.to_vec()) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut here: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_shared_object(p))
            .collect();
        here.sort();
        let files = here
            .into_iter()
            .filter(|p| seen.insert(p.canonicalize().unwrap_or_else(|_| p.clone())))
            .collect();
        folders.push(PluginFolder { dir, files });
    }
    folders
}

fn is_shared_object(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "so") && path.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_each_folder_and_shared_object_once_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.so", "a.so", "notes.txt", "c.so.bak"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        std::fs::create_dir(dir.path().join("d.so")).unwrap();
        let d = dir.path().to_path_buf();
        let twice = vec![d.clone(), d.join("."), d.join("missing")];
        assert_eq!(
            distinct_folders(twice.clone()),
            twice[..1]
                .iter()
                .chain(&twice[2..])
                .cloned()
                .collect::<Vec<_>>()
        );
        assert_eq!(
            find_plugin_files(&twice),
            vec![PluginFolder {
                dir: d.clone(),
                files: vec![d.join("a.so"), d.join("b.so")]
            }]
        );
    }
}
