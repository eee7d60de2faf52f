//! A plugin file replaced or rewritten on disk while a process runs it changes nothing
//! in that process: the host loads a private copy of the bytes it checked, and removes
//! the copy once it is open. A new scan sees the new file.

use crate::built_plugins;

use built_plugins::{built_plugins, path_of, plugin_dir, registry, task};
use drmas::plugin::ResolvePolicy;
use drmas_plugin_api::{EpisodeView, Message, SampleRow};
use std::io::Write;

fn rows() -> Vec<SampleRow> {
    vec![
        SampleRow::new("u", 0, "a", 0, 1.0),
        SampleRow::new("u", 1, "a", 0, 0.0),
    ]
}

/// The lines of this process's memory map that name `needle`.
fn mappings(needle: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

#[test]
fn rewriting_a_loaded_plugin_file_changes_nothing_in_the_running_process() {
    let dir = plugin_dir(&["good"]);
    let so = path_of(&dir, "good");
    let reg = registry(&dir);
    assert!(reg.failures().is_empty(), "{:?}", reg.failures());
    let policy = ResolvePolicy::default();
    let norm = reg
        .create_normalizer("good/shift", "offset = 0.25", &policy)
        .unwrap();
    assert_eq!(norm.advantages(&rows()).unwrap(), vec![0.75, -0.25]);

    // What `cp rebuilt.so plugins.d/good.so` does to a running process: the same file
    // (same inode) truncated...
    let file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&so)
        .unwrap();
    drop(file);
    assert_eq!(std::fs::metadata(&so).unwrap().len(), 0);
    assert_eq!(norm.advantages(&rows()).unwrap(), vec![0.75, -0.25]);

    // ...and filled with other bytes: another plugin, then garbage.
    let other = std::fs::read(built_plugins().join("misbehave.so")).unwrap();
    std::fs::write(&so, &other).unwrap();
    assert_eq!(norm.advantages(&rows()).unwrap(), vec![0.75, -0.25]);
    let mut file = std::fs::OpenOptions::new().write(true).open(&so).unwrap();
    file.write_all(&vec![0xCC; 1 << 16]).unwrap();
    drop(file);

    // Calls into the loaded code still work, old components and new ones alike.
    assert_eq!(norm.advantages(&rows()).unwrap(), vec![0.75, -0.25]);
    let agent = reg.create_agent("good/echo", "", &policy).unwrap();
    let view = EpisodeView {
        task: task(),
        agent: "solver".into(),
        ..EpisodeView::default()
    };
    assert_eq!(agent.render(&view).unwrap(), vec![Message::user("2+2?")]);
    // Messages still name the file the user put there.
    assert_eq!(
        norm.id.to_string(),
        format!("normalizer `good/shift` (good 1.0.0, {})", so.display())
    );

    // The process never mapped the file in the plugin folder: it runs a private copy,
    // already removed from disk.
    assert_eq!(
        mappings(&so.display().to_string()),
        Vec::<String>::new(),
        "the plugin folder's file is mapped"
    );
    let copies = mappings("/drmas-plugin-");
    assert!(
        copies.iter().any(|l| l.ends_with("/good.so (deleted)")),
        "no removed private copy of good.so is mapped: {copies:?}"
    );
}

#[test]
fn a_new_scan_loads_the_file_as_it_is_now() {
    let dir = plugin_dir(&["good"]);
    let so = path_of(&dir, "good");
    let first = registry(&dir);
    let policy = ResolvePolicy::default();
    assert!(first.plugin("good", &policy).is_ok());

    std::fs::copy(built_plugins().join("misbehave.so"), &so).unwrap();
    let second = registry(&dir);
    assert!(second.failures().is_empty(), "{:?}", second.failures());
    assert_eq!(
        second
            .plugins()
            .iter()
            .filter(|p| p.source.to_string() == so.display().to_string())
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["misbehave"]
    );
    // The first registry still runs the plugin it loaded.
    let norm = first
        .create_normalizer("good/shift", "offset = 0.25", &policy)
        .unwrap();
    assert_eq!(norm.advantages(&rows()).unwrap(), vec![0.75, -0.25]);

    // A file emptied after the first scan is refused by the next one, with its path.
    std::fs::write(&so, b"").unwrap();
    let third = registry(&dir);
    assert_eq!(
        third
            .failures()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [format!(
            "{}: empty file, not a shared library",
            so.display()
        )]
    );
}
