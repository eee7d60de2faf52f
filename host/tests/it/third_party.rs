//! The third-party template (`examples/acme-bench`), built outside the workspace
//! against the API crate only, is loaded from a plugin folder and used by name from an
//! experiment file through `drmas check`.

use std::{path::Path, process::Command};

fn plugin_dir() -> tempfile::TempDir {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-plugins/acme-bench.so");
    assert!(
        built.exists(),
        "no {}: run scripts/build-test-plugins.sh",
        built.display()
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&built, dir.path().join("libacme_bench.so")).unwrap();
    dir
}

/// The template's own experiment file, pointed at `plugins` and requiring `require`.
fn experiment(plugins: &Path, require: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let template =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/acme-bench/experiment.toml");
    let text = std::fs::read_to_string(template)
        .unwrap()
        .replace(
            "dirs = [\"plugins.d\"]",
            &format!("dirs = [{:?}]", plugins.display().to_string()),
        )
        // `drmas check` reads the model's config: the tiny chat model stands in.
        .replace(
            "\"models/smollm2-135m-instruct\"",
            &format!(
                "{:?}",
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../target/tiny-models/tiny-chat")
                    .display()
                    .to_string()
            ),
        )
        .replace("\"^1.2\"", &format!("{require:?}"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("experiment.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn check(config: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_drmas"))
        .arg("check")
        .arg(config)
        .env_remove("DRMAS_PLUGIN_PATH")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn template_plugin_is_loaded_and_used_by_name() {
    let plugins = plugin_dir();
    let (_keep, config) = experiment(plugins.path(), "^1.2");
    let (ok, stdout, stderr) = check(&config);
    assert!(ok, "{stdout}\n{stderr}");
    let so = plugins.path().join("libacme_bench.so");
    for line in [
        format!(
            "  agents[0] agent: acme-bench/direct 1.2.0 ({})",
            so.display()
        ),
        format!(
            "  rewards[0] reward: acme-bench/contains 1.2.0 ({})",
            so.display()
        ),
        format!(
            "  normalizer normalizer: acme-bench/centered 1.2.0 ({})",
            so.display()
        ),
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing `{line}` in:\n{stdout}"
        );
    }
}

#[test]
fn template_plugin_too_old_for_the_experiment_is_refused_at_its_first_use() {
    let plugins = plugin_dir();
    let (_keep, config) = experiment(plugins.path(), "^2.0");
    let (ok, _stdout, stderr) = check(&config);
    assert!(!ok);
    let first = stderr
        .lines()
        .find(|l| l.contains("agents[0]"))
        .unwrap_or_default();
    // The position of the agent's `component` value in the template.
    let line = std::fs::read_to_string(&config)
        .unwrap()
        .lines()
        .position(|l| l == "component = \"acme-bench/direct\"")
        .unwrap()
        + 1;
    assert_eq!(
        first,
        format!(
            "{}:{line}:13: agents[0].component: plugin `acme-bench` is version 1.2.0, but the experiment requires `^2.0`",
            config.display()
        )
    );
}
