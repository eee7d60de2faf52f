//! What `drmas check` refuses beyond the schema: tools an agent calls that the
//! environment does not offer, config keys a component does not describe (or requires
//! and lacks), `[data]` mappings to columns the file does not have, and plugin folders
//! given wrongly or twice. Every error is asserted with its full text and `line:col`.

use drmas::config::{ConfigErrors, Experiment, check_components, check_paths, parse_experiment};
use drmas::plugin::{Registry, TrustPolicy};
use drmas_plugin_api::{ConfigKey, PluginSpec, SampleRow};
use std::path::Path;
use std::process::{Command, Output};

use crate::built_plugins;
use built_plugins::{built_plugins, plugin_dir};

const FILE: &str = "experiments/checks.toml";

/// A valid experiment on the good test plugin. Lines the tests rely on: 10 the agent's
/// `component`, 12 its `config`, 24 the normalizer's `component`, 26 `[pool]` (where
/// `[data]` goes).
const BASE: &str = r#"[experiment]
name = "checks"

[[models]]
id = "small"
path = "models/qwen-0.5b"

[[agents]]
name = "asker"
component = "good/echo"
model = "small"
config = { tool = "search" }

[workflow]
entry = "asker"

[environment]
component = "good/upper"

[[rewards]]
component = "good/exact"

[normalizer]
component = "norms/drmas"

[pool]
devices = ["cpu"]
"#;

/// A plugin folder holding a copy of the good plugin.
fn good_folder() -> tempfile::TempDir {
    plugin_dir(&["good"])
}

fn edit(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "`{from}` must occur once");
    text.replacen(from, to, 1)
}

fn parse(text: &str) -> Experiment {
    parse_experiment(Path::new(FILE), text.to_string())
        .unwrap_or_else(|e| panic!("the experiment should parse:\n{e}"))
}

fn lines(errors: &ConfigErrors) -> Vec<String> {
    errors.to_string().lines().map(str::to_string).collect()
}

/// The lines `check_components` reports against `registry` (none when it passes).
fn component_errors(text: &str, registry: &Registry) -> Vec<String> {
    match check_components(&parse(text), registry) {
        Ok(_) => Vec::new(),
        Err(errors) => lines(&errors),
    }
}

fn with_good(text: &str) -> Vec<String> {
    let dir = good_folder();
    let registry = Registry::discover(&[dir.path().to_path_buf()], &TrustPolicy::default());
    assert_eq!(registry.failures(), []);
    component_errors(text, &registry)
}

fn at(line: usize, col: usize, rest: &str) -> String {
    format!("{FILE}:{line}:{col}: {rest}")
}

/// Checks that 1-based `line:col` of `text` is where `expected` starts.
fn assert_points_at(text: &str, line: usize, col: usize, expected: &str) {
    let l = text.lines().nth(line - 1).expect("line exists");
    let rest: String = l.chars().skip(col - 1).collect();
    assert!(
        rest.starts_with(expected),
        "{line}:{col} is at `{rest}`, not at `{expected}`"
    );
}

fn drmas(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_drmas"));
    c.args(args)
        .env_remove("DRMAS_PLUGIN_PATH")
        .env_remove("DRMAS_ALLOW_UNTRUSTED_PLUGINS")
        .env_remove("DRMAS_LOG");
    c
}

fn show(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

// ---------------------------------------------------------------- declared tools

#[test]
fn the_base_passes_with_the_tool_the_environment_offers() {
    assert_eq!(with_good(BASE), Vec::<String>::new());
}

#[test]
fn an_agent_calling_a_tool_the_environment_does_not_offer_is_refused() {
    let text = edit(BASE, "tool = \"search\"", "tool = \"fetch\"");
    assert_eq!(
        with_good(&text),
        [at(
            12,
            10,
            "agents[0].config: good/echo calls tool `fetch`, which environment good/upper does not offer (it offers: search)"
        )]
    );
    assert_points_at(&text, 12, 10, "{ tool = \"fetch\" }");
}

#[test]
fn an_agent_calling_tools_without_an_environment_is_refused() {
    // Without a config table the error points at the component (echo calls `search`
    // by default).
    let text = edit(BASE, "config = { tool = \"search\" }\n", "");
    let text = edit(&text, "[environment]\ncomponent = \"good/upper\"\n\n", "");
    assert_eq!(
        with_good(&text),
        [at(
            10,
            13,
            "agents[0].component: good/echo calls tool `search`, but the experiment has no [environment] to offer it"
        )]
    );
    assert_points_at(&text, 10, 13, "\"good/echo\"");
}

#[test]
fn an_environment_without_tools_offers_none() {
    let text = edit(
        BASE,
        "component = \"good/upper\"",
        "component = \"math/env\"",
    );
    assert_eq!(
        with_good(&text),
        [at(
            12,
            10,
            "agents[0].config: good/echo calls tool `search`, which environment math/env does not offer (it offers no tools)"
        )]
    );
}

// ---------------------------------------------------------------- described config keys

#[test]
fn an_unknown_config_key_is_refused_at_the_key_with_a_suggestion() {
    let text = edit(
        BASE,
        "config = { tool = \"search\" }",
        "config = { tool = \"search\", reviwer = \"asker\" }",
    );
    assert_eq!(
        with_good(&text),
        [at(
            12,
            29,
            "agents[0].config.reviwer: good/echo has no config key `reviwer` (did you mean `reviewer`? its keys: reviewer, tool)"
        )]
    );
    assert_points_at(&text, 12, 29, "reviwer");

    // A built-in's keys, in a table of its own; no close match, no suggestion.
    let text = edit(
        BASE,
        "component = \"norms/drmas\"",
        "component = \"norms/drmas\"\n\n[normalizer.config]\nepsilon = 0.0\nscale = 2",
    );
    assert_eq!(
        with_good(&text),
        [at(
            28,
            1,
            "normalizer.config.scale: norms/drmas has no config key `scale` (its keys: epsilon, singleton, mean, std)"
        )]
    );
    assert_points_at(&text, 28, 1, "scale = 2");

    // A component that says it takes no keys refuses any.
    let text = edit(
        BASE,
        "component = \"good/exact\"",
        "component = \"math/gsm8k\"\nconfig = { strict = true }",
    );
    assert_eq!(
        with_good(&text),
        [at(
            22,
            12,
            "rewards[0].config.strict: math/gsm8k has no config key `strict` (it takes no config keys)"
        )]
    );
    assert_points_at(&text, 22, 12, "strict");
}

/// A plugin defined here: a normalizer with a required key.
fn needy() -> PluginSpec {
    PluginSpec::new("needy", "1.0.0")
        .normalizer("indexed", "needs an index", |_| Ok(Zero))
        .config_keys([
            ConfigKey::required("index", "string", "the index folder"),
            ConfigKey::optional("k", "integer", "4", "results per query"),
        ])
}

struct Zero;

impl drmas_plugin_api::Normalizer for Zero {
    fn advantages(&self, samples: &[SampleRow]) -> drmas_plugin_api::PluginResult<Vec<f32>> {
        Ok(vec![0.0; samples.len()])
    }
}

#[test]
fn a_missing_required_config_key_is_refused() {
    let registry = Registry::with_specs([needy()]);
    let base = edit(
        BASE,
        "component = \"good/echo\"",
        "component = \"math/solver\"",
    );
    let base = edit(
        &base,
        "config = { tool = \"search\" }",
        "config = { verifier = \"\" }",
    );
    let base = edit(
        &base,
        "component = \"good/upper\"",
        "component = \"math/env\"",
    );
    let base = edit(
        &base,
        "component = \"good/exact\"",
        "component = \"math/boxed\"",
    );

    // No config table: at the component.
    let text = edit(&base, "norms/drmas", "needy/indexed");
    assert_eq!(
        component_errors(&text, &registry),
        [at(
            24,
            13,
            "normalizer.component: needy/indexed requires config key `index` (string: the index folder)"
        )]
    );
    // A table without it: at the table.
    let text = edit(
        &base,
        "component = \"norms/drmas\"",
        "component = \"needy/indexed\"\nconfig = { k = 8 }",
    );
    assert_eq!(
        component_errors(&text, &registry),
        [at(
            25,
            10,
            "normalizer.config: needy/indexed requires config key `index` (string: the index folder)"
        )]
    );
    let text = edit(
        &base,
        "component = \"norms/drmas\"",
        "component = \"needy/indexed\"\nconfig = { index = \"idx\" }",
    );
    assert_eq!(component_errors(&text, &registry), Vec::<String>::new());
}

#[test]
fn a_described_default_of_the_wrong_type_is_the_plugins_defect_at_check_time() {
    // The description says integer, the default is a word: `drmas check` says so at the
    // component, whatever the experiment sets.
    let sloppy = PluginSpec::new("sloppy", "1.0.0")
        .normalizer("shots", "a misdescribed key", |_| Ok(Zero))
        .config_keys([ConfigKey::optional(
            "shots",
            "integer",
            "\"six\"",
            "worked examples",
        )]);
    let registry = Registry::with_specs([sloppy]);
    let base = edit(
        BASE,
        "component = \"good/echo\"",
        "component = \"math/solver\"",
    );
    let base = edit(
        &base,
        "config = { tool = \"search\" }",
        "config = { verifier = \"\" }",
    );
    let base = edit(
        &base,
        "component = \"good/upper\"",
        "component = \"math/env\"",
    );
    let base = edit(
        &base,
        "component = \"good/exact\"",
        "component = \"math/boxed\"",
    );
    let text = edit(&base, "norms/drmas", "sloppy/shots");
    assert_eq!(
        component_errors(&text, &registry),
        [at(
            24,
            13,
            "normalizer.component: `sloppy/shots` describes config key `shots` as integer, but its default `\"six\"` is a string"
        )]
    );
}

#[test]
fn a_key_described_optional_that_the_parser_requires_is_named_as_the_plugins_defect() {
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Strict {
        k: u32,
    }
    // Described with a default, parsed without one: serde says only "missing field".
    let strict = PluginSpec::new("strict", "1.0.0")
        .normalizer("topk", "forgets its default", |cfg| {
            toml::from_str::<Strict>(cfg)
                .map_err(|e| drmas_plugin_api::PluginError::config(e.message()))?;
            Ok(Zero)
        })
        .config_keys([ConfigKey::optional(
            "k",
            "integer",
            "4",
            "results per query",
        )]);
    let registry = Registry::with_specs([strict]);
    let base = edit(
        BASE,
        "component = \"good/echo\"",
        "component = \"math/solver\"",
    );
    let base = edit(
        &base,
        "config = { tool = \"search\" }",
        "config = { verifier = \"\" }",
    );
    let base = edit(
        &base,
        "component = \"good/upper\"",
        "component = \"math/env\"",
    );
    let base = edit(
        &base,
        "component = \"good/exact\"",
        "component = \"math/boxed\"",
    );
    let text = edit(&base, "norms/drmas", "strict/topk");
    assert_eq!(
        component_errors(&text, &registry),
        [at(
            24,
            13,
            "normalizer.component: normalizer `strict/topk` refused its config: missing field `k` (its \
             description says `k` is optional with default 4, but the component does not apply that \
             default: a defect of the plugin; set `k` to work around it)"
        )]
    );
    // Setting it works around the defect.
    let text = edit(
        &base,
        "component = \"norms/drmas\"",
        "component = \"strict/topk\"\nconfig = { k = 2 }",
    );
    assert_eq!(component_errors(&text, &registry), Vec::<String>::new());
}

// ---------------------------------------------------------------- [data]

/// The lines `check_paths` reports about `[data]` (the model folder is missing in the
/// base; that line is left out).
fn data_errors(text: &str) -> Vec<String> {
    match check_paths(&parse(text)) {
        Ok(()) => Vec::new(),
        Err(errors) => lines(&errors)
            .into_iter()
            .filter(|l| !l.contains(": models[0].path: "))
            .collect(),
    }
}

fn with_data(data: &str) -> String {
    edit(BASE, "[pool]", &format!("[data]\n{data}\n\n[pool]"))
}

#[test]
fn a_field_mapping_must_name_a_column_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("train.jsonl");
    std::fs::write(
        &file,
        "\n{\"problem\": \"1+1?\", \"solution\": \"2\", \"level\": 1}\n",
    )
    .unwrap();
    let f = file.display().to_string();
    let text = with_data(&format!(
        "train = {{ path = {f:?}, fields = {{ question = \"problem\", answer = \"answer_text\" }} }}"
    ));
    let col = text
        .lines()
        .nth(26)
        .unwrap()
        .find("\"answer_text\"")
        .unwrap()
        + 1;
    assert_eq!(
        data_errors(&text),
        [at(
            27,
            col,
            &format!(
                "data.train.fields.answer: answer is mapped to column `answer_text`, which {f} does not have (its first row has: level, problem, solution)"
            )
        )]
    );

    // The right mapping passes.
    let text = with_data(&format!(
        "train = {{ path = {f:?}, fields = {{ question = \"problem\", answer = \"solution\" }} }}"
    ));
    assert_eq!(data_errors(&text), Vec::<String>::new());

    // Unmapped, the loader's defaults do not find an answer in the first row.
    let text = with_data(&format!("val = [{{ path = {f:?} }}]"));
    assert_eq!(
        data_errors(&text),
        [at(
            27,
            17,
            &format!(
                "data.val[0].path: {f}:2: no field `answer` (looked for `answer`, `reward_model.ground_truth`; map another column with fields = {{ answer = \"...\" }})"
            )
        )]
    );
}

#[test]
fn other_data_mistakes_the_loader_would_hit_later() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    std::fs::write(dir.path().join("empty.jsonl"), "\n\n").unwrap();
    std::fs::write(dir.path().join("tasks.csv"), "question,answer\n").unwrap();
    std::fs::write(dir.path().join("list.jsonl"), "[1, 2]\n").unwrap();
    std::fs::write(
        dir.path().join("ok.jsonl"),
        "{\"question\": \"q\", \"answer\": \"a\"}\n",
    )
    .unwrap();
    let text = with_data(&format!(
        "val = [\n  {{ path = \"{d}/empty.jsonl\" }},\n  {{ path = \"{d}/tasks.csv\" }},\n  \
         {{ path = \"{d}/list.jsonl\" }},\n  {{ path = \"{d}/ok.jsonl\", fields = {{ qestion = \"q\" }} }},\n]"
    ));
    let ok_line = text.lines().nth(30).unwrap();
    let col = ok_line.find("qestion").unwrap() + 1;
    assert_eq!(
        data_errors(&text),
        [
            at(
                28,
                12,
                &format!("data.val[0].path: {d}/empty.jsonl: no rows")
            ),
            at(
                29,
                12,
                &format!(
                    "data.val[1].path: {d}/tasks.csv: unknown data format (expected .jsonl, .ndjson, .json (JSON lines), one of those with .gz, or .parquet)"
                )
            ),
            at(
                30,
                12,
                &format!(
                    "data.val[2].path: {d}/list.jsonl:1: expected a JSON object, found a list of 2 items"
                )
            ),
            at(
                31,
                col,
                "data.val[3].fields.qestion: fields mapping: unknown field `qestion` (known: id, question, answer, source; other columns go to meta)"
            ),
        ]
    );
}

// ---------------------------------------------------------------- the command line

#[test]
fn drmas_check_refuses_an_undeclared_tool_with_its_position() {
    let plugins = good_folder();
    let dir = tempfile::tempdir().unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tiny-models/tiny-chat");
    let text = edit(
        BASE,
        "\"models/qwen-0.5b\"",
        &format!("{:?}", model.display().to_string()),
    );
    let text = edit(&text, "tool = \"search\"", "tool = \"fetch\"");
    let path = dir.path().join("exp.toml");
    std::fs::write(&path, &text).unwrap();
    let out = drmas(&["check", "--plugin-dir"])
        .arg(plugins.path())
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "{}:12:10: agents[0].config: good/echo calls tool `fetch`, which environment good/upper does not offer (it offers: search)",
            path.display()
        )
    );
}

#[test]
fn a_missing_plugin_dir_is_refused_as_a_missing_config_entry_is() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-folder");
    let path = dir.path().join("exp.toml");
    std::fs::write(&path, BASE).unwrap();
    let out = drmas(&["check", "--plugin-dir"])
        .arg(&missing)
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "error: plugin folder `{}` (from --plugin-dir) does not exist",
            missing.display()
        )
    );
    // In the experiment, the same words at the entry's position.
    let text = edit(
        BASE,
        "[[models]]",
        &format!(
            "[plugins]\ndirs = [{:?}]\n\n[[models]]",
            missing.display().to_string()
        ),
    );
    std::fs::write(&path, &text).unwrap();
    let out = drmas(&["check"]).arg(&path).output().unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "{}:5:9: plugins.dirs[0]: plugin folder `{}` does not exist",
            path.display(),
            missing.display()
        )
    );
}

#[test]
fn one_folder_named_twice_is_scanned_and_counted_once() {
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("p")).unwrap();
    std::fs::copy(
        built_plugins().join("good.so"),
        work.path().join("p/good.so"),
    )
    .unwrap();
    let text = edit(
        BASE,
        "[[models]]",
        "[plugins]\ndirs = [\"p\"]\n\n[[models]]",
    );
    std::fs::write(work.path().join("exp.toml"), &text).unwrap();

    // The flag twice in two spellings, and the experiment's entry.
    let out = drmas(&[
        "plugins",
        "list",
        "--plugin-dir",
        "./p",
        "--plugin-dir",
        "p/",
        "--config",
        "exp.toml",
    ])
    .current_dir(work.path())
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("agent") && l.contains("good/echo"))
            .count(),
        1,
        "{}",
        show(&out)
    );
    assert!(!stdout.contains("warning"), "{}", show(&out));

    let out = drmas(&["info", "--plugin-dir", "./p", "--plugin-dir", "p"])
        .current_dir(work.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dirs: Vec<&str> = stdout
        .lines()
        .skip_while(|l| *l != "plugin dirs:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(dirs, ["  ./p"], "{}", show(&out));
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("  good ")).count(),
        1,
        "{}",
        show(&out)
    );
}
