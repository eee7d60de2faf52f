//! Plugin folders are a trust boundary: world-writable folders and files, files of
//! another user, and files whose sha256 differs from their pin are refused before they
//! are opened; missing folders are errors naming where they came from; each skipped
//! file is reported once, without colour codes when stderr is not a terminal.

use drmas::config::{ConfigErrors, check_pins, parse_experiment};
use drmas::plugin::{Registry, ResolvePolicy, TrustPolicy};
use sha2::{Digest, Sha256};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const OPT_IN: &str = "(pass --allow-untrusted-plugins to load anyway)";

fn built(name: &str) -> PathBuf {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-plugins")
        .join(format!("{name}.so"));
    assert!(
        file.exists(),
        "no {}: run scripts/build-test-plugins.sh (the test command does)",
        file.display()
    );
    file
}

/// A private plugin folder holding a copy of `good.so` (mode 0644) as `as_name`.
fn folder_with_good(as_name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join(as_name);
    std::fs::copy(built("good"), &so).unwrap();
    chmod(&so, 0o644);
    (dir, so)
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn sha256_hex(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn failures(reg: &Registry) -> Vec<String> {
    reg.failures().iter().map(ToString::to_string).collect()
}

fn loads_good(reg: &Registry) -> bool {
    reg.plugin("good", &ResolvePolicy::default()).is_ok()
}

fn allowing() -> TrustPolicy {
    TrustPolicy {
        allow_untrusted: true,
        ..TrustPolicy::default()
    }
}

fn drmas(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_drmas"));
    c.args(args)
        .env_remove("DRMAS_PLUGIN_PATH")
        .env_remove("DRMAS_ALLOW_UNTRUSTED_PLUGINS")
        .env_remove("DRMAS_LOG");
    c
}

fn utf8(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn show(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        utf8(&out.stdout),
        utf8(&out.stderr)
    )
}

#[test]
fn a_world_writable_folder_is_refused_unless_allowed() {
    let (dir, _) = folder_with_good("good.so");
    chmod(dir.path(), 0o777);
    let dirs = [dir.path().to_path_buf()];
    let reg = Registry::discover(&dirs, &TrustPolicy::default());
    assert_eq!(
        failures(&reg),
        [format!(
            "{}: plugin folder is writable by every user; refusing to load plugins from it {OPT_IN}",
            dir.path().display()
        )]
    );
    assert!(!loads_good(&reg));
    // The file is known (so a pin on it is not "naming no file"), just not loaded.
    assert_eq!(reg.files(), [dir.path().join("good.so")]);

    // Sticky, like /tmp: still writable by every user.
    chmod(dir.path(), 0o1777);
    assert_eq!(
        Registry::discover(&dirs, &TrustPolicy::default())
            .failures()
            .len(),
        1
    );

    let reg = Registry::discover(&dirs, &allowing());
    assert!(reg.failures().is_empty(), "{:?}", failures(&reg));
    assert!(loads_good(&reg));
}

#[test]
fn a_world_writable_file_in_a_good_folder_is_refused_unless_allowed() {
    let (dir, so) = folder_with_good("good.so");
    chmod(&so, 0o666);
    let dirs = [dir.path().to_path_buf()];
    let reg = Registry::discover(&dirs, &TrustPolicy::default());
    assert_eq!(
        failures(&reg),
        [format!(
            "{}: plugin file is writable by every user; refusing to load it {OPT_IN}",
            so.display()
        )]
    );
    assert!(!loads_good(&reg));
    assert!(loads_good(&Registry::discover(&dirs, &allowing())));

    // Group-writable is accepted: the group is trusted.
    chmod(&so, 0o664);
    chmod(dir.path(), 0o775);
    assert!(loads_good(&Registry::discover(
        &dirs,
        &TrustPolicy::default()
    )));
}

#[test]
fn a_link_is_judged_at_its_target() {
    let (outside, so) = folder_with_good("good.so");
    chmod(&so, 0o666);
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("good.so");
    std::os::unix::fs::symlink(&so, &link).unwrap();
    let reg = Registry::discover(&[dir.path().to_path_buf()], &TrustPolicy::default());
    assert_eq!(
        failures(&reg),
        [format!(
            "{}: links to {}, a file writable by every user; refusing to load it {OPT_IN}",
            link.display(),
            so.canonicalize().unwrap().display()
        )]
    );
    chmod(&so, 0o644);
    chmod(outside.path(), 0o777);
    let reg = Registry::discover(&[dir.path().to_path_buf()], &TrustPolicy::default());
    assert_eq!(
        failures(&reg),
        [format!(
            "{}: links into {}, a folder writable by every user; refusing to load it {OPT_IN}",
            link.display(),
            outside.path().canonicalize().unwrap().display()
        )]
    );
}

/// Only root can give a file away; other users run the unit test of the decision.
#[test]
fn a_file_owned_by_another_user_is_refused_when_root_can_make_one() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: ownership is covered by the unit test of `distrust`");
        return;
    }
    let (dir, so) = folder_with_good("good.so");
    std::os::unix::fs::chown(&so, Some(65534), None).unwrap();
    let dirs = [dir.path().to_path_buf()];
    let reg = Registry::discover(&dirs, &TrustPolicy::default());
    assert_eq!(
        failures(&reg),
        [format!(
            "{}: plugin file is owned by uid 65534, neither you (uid 0) nor root; refusing to \
             load it {OPT_IN}",
            so.display()
        )]
    );
    assert!(loads_good(&Registry::discover(&dirs, &allowing())));

    std::os::unix::fs::chown(&so, Some(0), None).unwrap();
    std::os::unix::fs::chown(dir.path(), Some(65534), None).unwrap();
    assert_eq!(
        failures(&Registry::discover(&dirs, &TrustPolicy::default())),
        [format!(
            "{}: plugin folder is owned by uid 65534, neither you (uid 0) nor root; refusing \
             to load plugins from it {OPT_IN}",
            dir.path().display()
        )]
    );
}

#[test]
fn a_sha256_pin_refuses_a_different_file_and_loads_the_same_one() {
    let (dir, so) = folder_with_good("libgood.so");
    let dirs = [dir.path().to_path_buf()];
    let actual = sha256_hex(&so);
    let pinned = |hash: &str| TrustPolicy {
        sha256: [("libgood.so".to_string(), hash.to_string())].into(),
        ..TrustPolicy::default()
    };
    let reg = Registry::discover(&dirs, &pinned(&actual));
    assert!(reg.failures().is_empty(), "{:?}", failures(&reg));
    assert!(loads_good(&reg));

    let wrong = "ab".repeat(32);
    let reg = Registry::discover(&dirs, &pinned(&wrong));
    assert_eq!(
        failures(&reg),
        [format!(
            "{}: sha256 is {actual}, but [plugins] sha256 pins {wrong}; refusing to load it",
            so.display()
        )]
    );
    assert!(!loads_good(&reg));
    // Allowing untrusted plugins does not lift a pin.
    let reg = Registry::discover(
        &dirs,
        &TrustPolicy {
            allow_untrusted: true,
            ..pinned(&wrong)
        },
    );
    assert!(!loads_good(&reg));
}

// ------------------------------------------------------------ the experiment file

/// The acme-bench template pointed at `plugins`, with `extra` lines after `require`.
fn experiment(plugins: &Path, extra: &str) -> (tempfile::TempDir, PathBuf, String) {
    let template =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/acme-bench/experiment.toml");
    let require = "require = { \"acme-bench\" = \"^1.2\" }\n";
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
        .replace(require, &format!("{require}{extra}"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("experiment.toml");
    std::fs::write(&path, &text).unwrap();
    (dir, path, text)
}

/// Where `needle` starts in `text`, 1-based line and column.
fn position(text: &str, needle: &str) -> (usize, usize) {
    let at = text.find(needle).unwrap();
    let line = text[..at].matches('\n').count() + 1;
    let col = at - text[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

fn acme_folder() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("libacme_bench.so");
    std::fs::copy(built("acme-bench"), &so).unwrap();
    chmod(&so, 0o644);
    (dir, so)
}

#[test]
fn pins_must_be_file_names_and_hex() {
    let (plugins, _) = acme_folder();
    let (_keep, path, text) = experiment(
        plugins.path(),
        "sha256 = { \"sub/libacme_bench.so\" = \"abc\" }\n",
    );
    let errors = parse_experiment(&path, text.clone()).unwrap_err();
    let (line, col) = position(&text, "\"abc\"");
    assert_eq!(
        errors.to_string(),
        format!(
            "{p}:{line}:{col}: plugins.sha256.\"sub/libacme_bench.so\": `sub/libacme_bench.so` is \
             not a plugin file name: pins name a `*.so` file in a plugin folder, without its \
             folder\n{p}:{line}:{col}: plugins.sha256.\"sub/libacme_bench.so\": `abc` is not a \
             sha256: expected 64 hex digits",
            p = path.display()
        )
    );
}

#[test]
fn a_pin_that_names_no_file_is_a_config_error_with_its_position() {
    let (plugins, _) = acme_folder();
    let hash = "0".repeat(64);
    let (_keep, path, text) = experiment(
        plugins.path(),
        &format!("sha256 = {{ \"libacme-bench.so\" = \"{hash}\" }}\n"),
    );
    let exp = parse_experiment(&path, text.clone()).unwrap();
    let reg = Registry::discover(&[plugins.path().to_path_buf()], &TrustPolicy::default());
    let (line, col) = position(&text, &format!("\"{hash}\""));
    let expected = format!(
        "{}:{line}:{col}: plugins.sha256.\"libacme-bench.so\": no plugin file `libacme-bench.so` \
         in the plugin folders (files found: libacme_bench.so)",
        path.display()
    );
    assert_eq!(ConfigErrors(check_pins(&exp, &reg)).to_string(), expected);

    // The same through `drmas check`, which fails on it.
    let out = drmas(&["check"]).arg(&path).output().unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    assert_eq!(utf8(&out.stderr).trim_end(), expected, "{}", show(&out));
}

#[test]
fn drmas_check_loads_a_pinned_plugin_and_refuses_a_changed_one_reporting_it_once() {
    let (plugins, so) = acme_folder();
    let good = sha256_hex(&so);
    let (_keep, path, _) = experiment(
        plugins.path(),
        &format!("sha256 = {{ \"libacme_bench.so\" = \"{good}\" }}\n"),
    );
    let out = drmas(&["check"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(utf8(&out.stderr).is_empty(), "{}", show(&out));

    let wrong = "0".repeat(64);
    let (_keep, path, _) = experiment(
        plugins.path(),
        &format!("sha256 = {{ \"libacme_bench.so\" = \"{wrong}\" }}\n"),
    );
    let out = drmas(&["check"]).arg(&path).output().unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    let stderr = utf8(&out.stderr);
    let refusal = format!(
        "{}: sha256 is {good}, but [plugins] sha256 pins {wrong}; refusing to load it",
        so.display()
    );
    // Reported once, as a warning; the errors refer to it.
    assert_eq!(
        stderr.matches(&format!("WARN skipped: {refusal}")).count(),
        1,
        "{}",
        show(&out)
    );
    assert!(
        stderr.lines().any(|l| l.contains(
            "agents[0].component: no plugin `acme-bench` is \
             loaded (loaded: math, norms, remote, search); plugin files were skipped, see the warnings"
        )),
        "{}",
        show(&out)
    );
    assert_eq!(
        stderr.matches(&so.display().to_string()).count(),
        1,
        "{}",
        show(&out)
    );
}

#[test]
fn allow_untrusted_in_the_experiment_loads_a_world_writable_folder() {
    let (plugins, _) = acme_folder();
    chmod(plugins.path(), 0o777);
    let (_keep, path, _) = experiment(plugins.path(), "");
    let out = drmas(&["check"]).arg(&path).output().unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    assert!(
        utf8(&out.stderr).contains(&format!(
            "{}: plugin folder is writable by every user; refusing to load plugins from it {OPT_IN}",
            plugins.path().display()
        )),
        "{}",
        show(&out)
    );
    let (_keep, path, _) = experiment(plugins.path(), "allow_untrusted = true\n");
    let out = drmas(&["check"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    // And from the command line and the environment.
    let (_keep, path, _) = experiment(plugins.path(), "");
    let out = drmas(&["check", "--allow-untrusted-plugins"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let out = drmas(&["check"])
        .arg(&path)
        .env("DRMAS_ALLOW_UNTRUSTED_PLUGINS", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let out = drmas(&["check"])
        .arg(&path)
        .env("DRMAS_ALLOW_UNTRUSTED_PLUGINS", "maybe")
        .output()
        .unwrap();
    assert_eq!(
        utf8(&out.stderr).trim_end(),
        "error: DRMAS_ALLOW_UNTRUSTED_PLUGINS must be 1 or 0, not `maybe`"
    );
}

// ---------------------------------------------------------------- the command line

#[test]
fn a_missing_plugin_dir_is_an_error_naming_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let out = drmas(&["plugins", "list", "--plugin-dir"])
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    assert_eq!(
        utf8(&out.stderr).trim_end(),
        format!(
            "error: plugin folder `{}` (from --plugin-dir) does not exist",
            missing.display()
        )
    );

    let out = drmas(&["plugins", "list"])
        .env(
            "DRMAS_PLUGIN_PATH",
            format!("{}:{}", dir.path().display(), missing.display()),
        )
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    assert_eq!(
        utf8(&out.stderr).trim_end(),
        format!(
            "error: plugin folder `{}` (from DRMAS_PLUGIN_PATH) does not exist",
            missing.display()
        )
    );

    let file = dir.path().join("plain.txt");
    std::fs::write(&file, "").unwrap();
    let (plugins, _) = acme_folder();
    let (_keep, path, _) = experiment(plugins.path(), "");
    let out = drmas(&["check", "--plugin-dir"])
        .arg(&file)
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    assert_eq!(
        utf8(&out.stderr).trim_end(),
        format!(
            "error: plugin folder `{}` (from --plugin-dir) is not a folder",
            file.display()
        )
    );
}

#[test]
fn a_refused_folder_is_reported_once_without_colour_codes() {
    let (dir, _) = folder_with_good("good.so");
    chmod(dir.path(), 0o777);
    let refusal = format!(
        "skipped: {}: plugin folder is writable by every user; refusing to load plugins from \
         it {OPT_IN}",
        dir.path().display()
    );
    // `inspect` reports it as a warning on stderr, which is a pipe here.
    let out = drmas(&["plugins", "inspect", "norms/drmas", "--plugin-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stderr = utf8(&out.stderr);
    assert!(!stderr.contains("\x1b["), "colour codes in {stderr:?}");
    assert_eq!(stderr.trim(), format!("WARN {refusal}"));

    // `list` shows it in its output, and only there.
    let out = drmas(&["plugins", "list", "--plugin-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        utf8(&out.stdout).matches(&refusal).count(),
        1,
        "{}",
        show(&out)
    );
    assert!(out.stderr.is_empty(), "{}", show(&out));

    // So does `drmas info`.
    let out = drmas(&["info", "--plugin-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        utf8(&out.stdout)
            .lines()
            .filter(|l| l.trim_start() == refusal)
            .count(),
        1,
        "{}",
        show(&out)
    );
    assert!(!utf8(&out.stderr).contains("skipped"), "{}", show(&out));
}

/// A good plugin folder inside a folder every user may write (without the sticky bit)
/// is not safe: anyone can rename it away and put their own in its place. Every folder
/// above it, up to `/`, is judged; a sticky one (`/tmp`) is fine.
#[test]
fn a_plugin_folder_under_a_world_writable_parent_is_refused_unless_allowed() {
    let outer = tempfile::tempdir().unwrap();
    let parent = outer.path().join("shared");
    let plugins = parent.join("deeper/plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(built("good"), plugins.join("good.so")).unwrap();
    chmod(&plugins.join("good.so"), 0o644);
    chmod(&parent, 0o777);
    let dirs = [plugins.clone()];
    let reg = Registry::discover(&dirs, &TrustPolicy::default());
    assert_eq!(
        failures(&reg),
        [format!(
            "{}: plugin folder lies in {}, a folder writable by every user without the sticky bit: whoever can change it can put another folder in this one's place; refusing to load plugins from it {OPT_IN}",
            plugins.display(),
            parent.canonicalize().unwrap().display()
        )]
    );
    assert!(!loads_good(&reg));
    // Sticky: others cannot rename what they do not own.
    chmod(&parent, 0o1777);
    let reg = Registry::discover(&dirs, &TrustPolicy::default());
    assert!(reg.failures().is_empty(), "{:?}", failures(&reg));
    assert!(loads_good(&reg));
    chmod(&parent, 0o777);
    assert!(loads_good(&Registry::discover(&dirs, &allowing())));
    chmod(&parent, 0o755);
}

/// A plugin's panic is reported once, as drmas's one line with the panic's place, not
/// also as Rust's panic block (nor a backtrace under RUST_BACKTRACE=1).
#[test]
fn a_caught_plugin_panic_prints_one_line_and_no_panic_block() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(built("misbehave"), plugins.join("misbehave.so")).unwrap();
    let rows = dir.path().join("rows.jsonl");
    std::fs::write(
        &rows,
        "{\"id\": \"t3\", \"completion\": \"x\", \"answer\": \"2\"}\n",
    )
    .unwrap();
    let out = drmas(&["score", "misbehave/flaky"])
        .arg(&rows)
        .arg("--plugin-dir")
        .arg(&plugins)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        utf8(&out.stderr).trim_end(),
        format!(
            "error: {}:1: reward `misbehave/flaky` (misbehave 0.3.0, {}): panicked: flaky reward exploded on task t3 (at tests/fixtures/misbehave/src/lib.rs:52:13)",
            rows.display(),
            plugins.join("misbehave.so").display()
        ),
        "{}",
        show(&out)
    );
}
