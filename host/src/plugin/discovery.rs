//! Finding plugin files.

use std::path::{Path, PathBuf};

/// The `*.so` files directly inside each folder, sorted so loading order (and thus
/// every message about it) is the same on every run. Missing folders are skipped:
/// the config layer reports them where they are named.
pub fn find_plugin_files(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut here: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_shared_object(p))
            .collect();
        here.sort();
        files.extend(here);
    }
    files
}

fn is_shared_object(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "so") && path.is_file()
}
