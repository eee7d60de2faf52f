//! Finding plugin files.

use std::path::{Path, PathBuf};

/// The `*.so` files directly inside each folder, sorted so loading order (and thus
/// every message about it) is the same on every run. A file reached twice (the same
/// folder named twice, or through a link) is listed once. Missing folders are skipped:
/// the config layer reports them where they are named.
pub fn find_plugin_files(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    let mut files = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut here: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_shared_object(p))
            .collect();
        here.sort();
        files.extend(
            here.into_iter()
                .filter(|p| seen.insert(p.canonicalize().unwrap_or_else(|_| p.clone()))),
        );
    }
    files
}

fn is_shared_object(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "so") && path.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_each_shared_object_once_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.so", "a.so", "notes.txt", "c.so.bak"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        std::fs::create_dir(dir.path().join("d.so")).unwrap();
        let d = dir.path().to_path_buf();
        let twice = vec![d.clone(), d.join("."), d.join("missing")];
        assert_eq!(
            find_plugin_files(&twice),
            vec![d.join("a.so"), d.join("b.so")]
        );
    }
}
