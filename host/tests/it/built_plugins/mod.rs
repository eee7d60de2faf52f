//! The real `.so` plugins that `scripts/build-test-plugins.sh` builds into
//! `target/test-plugins/`, copied into fresh plugin folders for each test.
#![allow(dead_code)]

use drmas::plugin::{Registry, TrustPolicy};
use drmas_plugin_api::Task;
use std::path::{Path, PathBuf};

/// The folder of built test plugins.
pub fn built_plugins() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-plugins");
    assert!(
        dir.join("good.so").exists(),
        "{} has no test plugins: run scripts/build-test-plugins.sh (the test command does)",
        dir.display()
    );
    dir.canonicalize().unwrap()
}

/// A plugin folder holding copies of the named test plugins; `from>to` copies
/// `from.so` as `to.so`.
pub fn plugin_dir(names: &[&str]) -> tempfile::TempDir {
    let src = built_plugins();
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        let (from, to) = name.split_once('>').unwrap_or((name, name));
        std::fs::copy(
            src.join(format!("{from}.so")),
            dir.path().join(format!("{to}.so")),
        )
        .unwrap();
    }
    dir
}

/// The built-ins plus the plugins of `dir`.
pub fn registry(dir: &tempfile::TempDir) -> Registry {
    Registry::discover(&[dir.path().to_path_buf()], &TrustPolicy::default())
}

/// Where `plugin_dir` put the plugin `name`.
pub fn path_of(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(format!("{name}.so"))
}

/// The task the plugin tests hand to components: `2+2?`, answer `4`.
pub fn task() -> Task {
    Task {
        id: "t1".into(),
        question: "2+2?".into(),
        answer: "4".into(),
        ..Task::default()
    }
}
