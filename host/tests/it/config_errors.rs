//! Broken experiment files: every case asserts the exact error lines, which have the
//! form `{file}:{line}:{col}: {key}: {message}` (syntax errors have no key yet).
//!
//! Each case is the valid [`BASE`] with one edit. Besides the text, the tests check that
//! `line:col` really points at the offending spot in the edited file.

use drmas::config::{
    ConfigErrors, Experiment, check_components, check_paths, load_experiment, parse_experiment,
};
use drmas::plugin::Registry;
use std::path::Path;

const FILE: &str = "experiments/broken.toml";

/// A valid experiment. Line numbers the tests rely on:
///  2 `name = ...`, 6 `id = "small"`, 9 `[[agents]]` (solver), 12 its `model`,
/// 14 `[[agents]]` (verifier), 19 `[agents.sampling]` (belongs to agents[1]),
/// 23 `[workflow]`, 24 `entry`, 30 `[normalizer]`, 31 its `component`, 33 `[trainer]`,
/// 34 `steps`, 35 `group_size`, 37 `[trainer.clip]`, 38 `low`, 41 `[pool]`, 42 `devices`.
const BASE: &str = r#"[experiment]
name = "math-two-agents"
seed = 7

[[models]]
id = "small"
path = "models/qwen-0.5b"

[[agents]]
name = "solver"
component = "math/solver"
model = "small"

[[agents]]
name = "verifier"
component = "math/verifier"
model = "small"

[agents.sampling]
temperature = 0.7
top_p = 0.95

[workflow]
entry = "solver"
max_turns = 4

[[rewards]]
component = "math/boxed"

[normalizer]
component = "norms/drmas"

[trainer]
steps = 10
group_size = 4

[trainer.clip]
low = 0.2
high = 0.28

[pool]
devices = ["cpu"]
"#;

/// `BASE` with `from` (which must occur exactly once) replaced by `to`.
fn edit(from: &str, to: &str) -> String {
    edit_text(BASE, from, to)
}

fn edit_text(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "`{from}` must occur exactly once"
    );
    text.replacen(from, to, 1)
}

fn parse(text: &str) -> Result<Experiment, ConfigErrors> {
    parse_experiment(Path::new(FILE), text.to_string())
}

fn lines(errors: &ConfigErrors) -> Vec<String> {
    errors.to_string().lines().map(str::to_string).collect()
}

/// The lines `parse_experiment` (syntax, schema and semantic checks) reports.
fn parse_errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("expected errors, the experiment parsed:\n{text}"),
        Err(e) => {
            // One ConfigError per line: no message may break the one-line format.
            assert_eq!(
                lines(&e).len(),
                e.0.len(),
                "a message spans several lines:\n{e}"
            );
            lines(&e)
        }
    }
}

/// The lines `check_components` reports against the built-in plugins (none for the base).
fn component_errors(text: &str) -> Vec<String> {
    let exp = parse(text).unwrap_or_else(|e| panic!("the experiment should parse:\n{e}"));
    match check_components(&exp, &Registry::builtin()) {
        Ok(_) => Vec::new(),
        Err(errors) => lines(&errors),
    }
}

/// Checks that 1-based `line:col` of `text` is where `expected` starts.
fn assert_points_at(text: &str, line: usize, col: usize, expected: &str) {
    let l = text
        .lines()
        .nth(line - 1)
        .unwrap_or_else(|| panic!("no line {line}"));
    let rest: String = l.chars().skip(col - 1).collect();
    assert!(
        rest.starts_with(expected),
        "{line}:{col} is at `{rest}`, not at `{expected}`"
    );
}

fn at(line: usize, col: usize, rest: &str) -> String {
    format!("{FILE}:{line}:{col}: {rest}")
}

// ---------------------------------------------------------------- the base itself

#[test]
fn base_experiment_parses_and_its_components_resolve() {
    let exp = parse(BASE).unwrap();
    assert_eq!(exp.file.agents.len(), 2);
    assert_eq!(exp.file.agents[1].sampling.top_p, 0.95);
    assert_eq!(exp.file.workflow.entry, "solver");
    let checked = check_components(&exp, &Registry::builtin()).unwrap();
    let names: Vec<&str> = checked.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["math/solver", "math/verifier", "math/boxed", "norms/drmas"]
    );
    assert_points_at(BASE, 11, 13, "\"math/solver\"");
    assert_points_at(BASE, 28, 13, "\"math/boxed\"");
}

#[test]
fn a_valid_normalizer_config_is_accepted() {
    let text = edit(
        "component = \"norms/drmas\"",
        "component = \"norms/drmas\"\nconfig = { epsilon = 0.0, singleton = \"zero\" }",
    );
    assert_eq!(component_errors(&text), Vec::<String>::new());
}

// ---------------------------------------------------------------- TOML syntax

#[test]
fn unclosed_string() {
    let text = edit("name = \"math-two-agents\"", "name = \"math-two-agents");
    assert_eq!(
        parse_errors(&text),
        [at(
            2,
            24,
            "TOML syntax: invalid basic string, expected `\"`"
        )]
    );
    // Right after the last character of the line, where the quote is missing.
    assert_eq!(text.lines().nth(1).unwrap().chars().count(), 23);
}

#[test]
fn unclosed_table_header() {
    let text = edit("[trainer]", "[trainer");
    assert_eq!(
        parse_errors(&text),
        [at(33, 9, "TOML syntax: unclosed table, expected `]`")]
    );
}

#[test]
fn duplicate_key_is_named() {
    let text = edit("steps = 10", "steps = 10\nsteps = 20");
    assert_eq!(
        parse_errors(&text),
        [at(35, 1, "TOML syntax: duplicate key `steps`")]
    );
    assert_points_at(&text, 35, 1, "steps = 20");
}

#[test]
fn duplicate_table_is_named() {
    let text = edit("[pool]", "[trainer]\ngspo = true\n\n[pool]");
    assert_eq!(
        parse_errors(&text),
        [at(41, 2, "TOML syntax: duplicate key `trainer`")]
    );
    assert_points_at(&text, 41, 1, "[trainer]");
}

#[test]
fn table_header_clashing_with_an_array_of_tables() {
    let text = edit("[pool]", "[agents]\nname = \"critic\"\n\n[pool]");
    assert_eq!(
        parse_errors(&text),
        [at(41, 2, "TOML syntax: duplicate key `agents`")]
    );
}

#[test]
fn value_missing_after_equals() {
    let text = edit("steps = 10", "steps =");
    assert_eq!(
        parse_errors(&text),
        [at(
            34,
            8,
            "TOML syntax: string values must be quoted, expected literal string"
        )]
    );
}

// ---------------------------------------------------------------- schema (serde)

#[test]
fn unknown_key_in_trainer_names_the_table() {
    let text = edit("group_size = 4", "group_sise = 4");
    assert_eq!(
        parse_errors(&text),
        [at(
            35,
            1,
            "trainer.group_sise: unknown field `group_sise`, expected one of `steps`, `prompts_per_step`, \
             `group_size`, `invalid_penalty`, `clip`, `loss_agg`, `grad_clip`, `kl`, `entropy_coef`, `gspo`, \
             `tis_cap`, `ppo_epochs`, `mini_batches`, `logp_old`, `micro_batch_tokens`, `share_prompts`, `logits_budget_mb`, \
             `lr_schedule`, `warmup_steps`, `min_lr_ratio`, `spike_factor`, `spike_window`, \
             `max_consecutive_skips`, `max_staleness`, `save_every`, `keep_checkpoints`, `eval_every`, `eval_k`, `eval_limit`, \
             `success_threshold`, `shadow_normalizer`, `loss_balance`, `dynamic_sampling`, `shadow_gradients`, `warm_start`"
        )]
    );
    assert_points_at(&text, 35, 1, "group_sise");
}

#[test]
fn unknown_key_in_a_nested_table() {
    let text = edit("high = 0.28", "hihg = 0.28");
    assert_eq!(
        parse_errors(&text),
        [at(
            39,
            1,
            "trainer.clip.hihg: unknown field `hihg`, expected one of `low`, `high`, `dual`"
        )]
    );
}

#[test]
fn unknown_key_in_the_second_agent_names_its_index() {
    let text = edit("top_p = 0.95", "top_pp = 0.95");
    assert_eq!(
        parse_errors(&text),
        [at(
            21,
            1,
            "agents[1].sampling.top_pp: unknown field `top_pp`, expected one of `temperature`, `top_p`, `top_k`, \
             `max_new_tokens`, `stop`"
        )]
    );
}

#[test]
fn unknown_top_level_table() {
    let text = edit("[trainer]", "[trainr]");
    assert_eq!(
        parse_errors(&text),
        [at(
            33,
            2,
            "trainr: unknown field `trainr`, expected one of `experiment`, `plugins`, `models`, `agents`, \
             `workflow`, `environment`, `rewards`, `normalizer`, `data`, `trainer`, `pool`, `tracking`"
        )]
    );
    assert_points_at(&text, 33, 2, "trainr]");
}

#[test]
fn string_where_an_integer_is_expected() {
    let text = edit("steps = 10", "steps = \"10\"");
    assert_eq!(
        parse_errors(&text),
        [at(
            34,
            9,
            "trainer.steps: invalid type: string \"10\", expected u32"
        )]
    );
    assert_points_at(&text, 34, 9, "\"10\"");
}

#[test]
fn negative_integer_where_a_count_is_expected() {
    let text = edit("steps = 10", "steps = -1");
    assert_eq!(
        parse_errors(&text),
        [at(
            34,
            9,
            "trainer.steps: invalid value: integer `-1`, expected u32"
        )]
    );
}

#[test]
fn unknown_enum_value() {
    let text = edit(
        "path = \"models/qwen-0.5b\"",
        "path = \"models/qwen-0.5b\"\ndtype = \"fp8\"",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            8,
            9,
            "models[0].dtype: unknown variant `fp8`, expected one of `f32`, `f16`, `bf16`"
        )]
    );
}

#[test]
fn missing_workflow_entry_points_at_the_workflow_table() {
    let text = edit("entry = \"solver\"\n", "");
    assert_eq!(
        parse_errors(&text),
        [at(23, 1, "workflow: missing field `entry`")]
    );
    assert_points_at(&text, 23, 1, "[workflow]");
}

#[test]
fn missing_normalizer_table() {
    let text = edit("[normalizer]\ncomponent = \"norms/drmas\"\n", "");
    assert_eq!(
        parse_errors(&text),
        [at(1, 1, "missing field `normalizer`")]
    );
}

#[test]
fn missing_agent_model_points_at_that_agent() {
    let text = edit(
        "model = \"small\"\n\n[agents.sampling]",
        "\n[agents.sampling]",
    );
    assert_eq!(
        parse_errors(&text),
        [at(14, 1, "agents[1]: missing field `model`")]
    );
    assert_points_at(&text, 14, 1, "[[agents]]");
}

#[test]
fn version_requirement_of_the_wrong_type() {
    let text = edit(
        "[[models]]",
        "[plugins]\nrequire = { norms = 1 }\n\n[[models]]",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            6,
            21,
            "plugins.require.norms: invalid type: integer `1`, expected a string"
        )]
    );
}

// ---------------------------------------------------------------- semantic checks

#[test]
fn agent_naming_an_unknown_model() {
    let text = edit(
        "model = \"small\"\n\n[[agents]]",
        "model = \"big\"\n\n[[agents]]",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            12,
            9,
            "agents[0].model: unknown model `big` (models: small)"
        )]
    );
    assert_points_at(&text, 12, 9, "\"big\"");
}

#[test]
fn duplicate_agent_names() {
    let text = edit("name = \"verifier\"", "name = \"solver\"");
    assert_eq!(
        parse_errors(&text),
        [at(15, 8, "agents[1].name: agent `solver` is defined twice")]
    );
    assert_points_at(&text, 15, 8, "\"solver\"");
}

#[test]
fn workflow_entry_that_is_not_an_agent() {
    let text = edit("entry = \"solver\"", "entry = \"critic\"");
    assert_eq!(
        parse_errors(&text),
        [at(
            24,
            9,
            "workflow.entry: entry agent `critic` is not defined (agents: solver, verifier)"
        )]
    );
}

#[test]
fn workflow_final_agent_that_is_not_an_agent() {
    let text = edit(
        "entry = \"solver\"",
        "entry = \"solver\"\nfinal_agent = \"answerer\"",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            25,
            15,
            "workflow.final_agent: final agent `answerer` is not defined (agents: solver, verifier)"
        )]
    );
}

#[test]
fn temperature_must_be_positive() {
    // `[agents.sampling]` after the second `[[agents]]` belongs to agents[1].
    let text = edit("temperature = 0.7", "temperature = 0.0");
    assert_eq!(
        parse_errors(&text),
        [at(
            20,
            15,
            "agents[1].sampling.temperature: must be > 0, got 0"
        )]
    );
    assert_points_at(&text, 20, 15, "0.0");

    // An inline table in the first agent.
    let text = edit(
        "model = \"small\"\n\n[[agents]]",
        "model = \"small\"\nsampling = { temperature = -1.5 }\n\n[[agents]]",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            13,
            28,
            "agents[0].sampling.temperature: must be > 0, got -1.5"
        )]
    );
    assert_points_at(&text, 13, 28, "-1.5");
}

#[test]
fn top_p_above_one() {
    let text = edit("top_p = 0.95", "top_p = 1.5");
    assert_eq!(
        parse_errors(&text),
        [at(
            21,
            9,
            "agents[1].sampling.top_p: must be in (0, 1], got 1.5"
        )]
    );
}

#[test]
fn clip_low_out_of_range() {
    let text = edit("low = 0.2", "low = 1.0");
    assert_eq!(
        parse_errors(&text),
        [at(38, 7, "trainer.clip.low: must be in [0, 1), got 1")]
    );
    assert_points_at(&text, 38, 7, "1.0");

    // Without a `[trainer]` table the position is still that of the value.
    let text = edit_text(
        &edit("[trainer]\nsteps = 10\ngroup_size = 4\n\n", ""),
        "low = 0.2",
        "low = -0.5",
    );
    assert_eq!(
        parse_errors(&text),
        [at(34, 7, "trainer.clip.low: must be in [0, 1), got -0.5")]
    );
    assert_points_at(&text, 34, 7, "-0.5");
}

#[test]
fn bad_device_name() {
    let text = edit("devices = [\"cpu\"]", "devices = [\"cpu\", \"gpu0\"]");
    assert_eq!(
        parse_errors(&text),
        [at(
            42,
            19,
            "pool.devices[1]: unknown device `gpu0`: expected \"auto\", \"cpu\" or \"cuda:N\""
        )]
    );
    assert_points_at(&text, 42, 19, "\"gpu0\"");
}

#[test]
fn empty_device_list() {
    let text = edit("devices = [\"cpu\"]", "devices = []");
    assert_eq!(
        parse_errors(&text),
        [at(42, 11, "pool.devices: must name at least one device")]
    );
}

#[test]
fn unparseable_semver_requirement() {
    let text = edit(
        "[[models]]",
        "[plugins]\nrequire = { norms = \"one point oh\" }\n\n[[models]]",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            6,
            21,
            "plugins.require.norms: `one point oh` is not a semver requirement: unexpected character 'o' while \
             parsing major version number"
        )]
    );
    assert_points_at(&text, 6, 21, "\"one point oh\"");
}

#[test]
fn key_with_a_dot_is_quoted_in_the_key_path() {
    let text = edit(
        "[[models]]",
        "[plugins]\nrequire = { \"my.plugin\" = \"nope\" }\n\n[[models]]",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            6,
            27,
            "plugins.require.\"my.plugin\": `nope` is not a semver requirement: unexpected character 'n' while \
             parsing major version number"
        )]
    );
    let text = edit(
        "[[models]]",
        "[plugins]\nrequire = { \"my.plugin\" = 3 }\n\n[[models]]",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            6,
            27,
            "plugins.require.\"my.plugin\": invalid type: integer `3`, expected a string"
        )]
    );
}

#[test]
fn plugin_dir_that_does_not_exist() {
    let existing = tempfile::tempdir().unwrap();
    let missing = existing.path().join("no-such-folder");
    let text = edit(
        "[[models]]",
        &format!(
            "[plugins]\ndirs = ['{}', '{}']\n\n[[models]]",
            existing.path().display(),
            missing.display()
        ),
    );
    let col = 9 + existing.path().display().to_string().chars().count() + 4;
    assert_eq!(
        parse_errors(&text),
        [at(
            6,
            col,
            &format!(
                "plugins.dirs[1]: plugin folder `{}` does not exist",
                missing.display()
            )
        )]
    );
    assert_points_at(&text, 6, col, &format!("'{}'", missing.display()));
}

#[test]
fn several_errors_are_reported_together() {
    let text = edit("entry = \"solver\"", "entry = \"critic\"");
    let text = edit_text(&text, "top_p = 0.95", "top_p = 0");
    let text = edit_text(&text, "devices = [\"cpu\"]", "devices = [\"gpu0\"]");
    let text = edit_text(&text, "low = 0.2", "low = 1.0");
    assert_eq!(
        parse_errors(&text),
        [
            at(21, 9, "agents[1].sampling.top_p: must be in (0, 1], got 0"),
            at(
                24,
                9,
                "workflow.entry: entry agent `critic` is not defined (agents: solver, verifier)"
            ),
            at(38, 7, "trainer.clip.low: must be in [0, 1), got 1"),
            at(
                42,
                12,
                "pool.devices[0]: unknown device `gpu0`: expected \"auto\", \"cpu\" or \"cuda:N\""
            ),
        ]
    );
}

#[test]
fn windows_line_endings_keep_positions() {
    let text = edit("low = 0.2", "low = 2.0").replace('\n', "\r\n");
    assert_eq!(
        parse_errors(&text),
        [at(38, 7, "trainer.clip.low: must be in [0, 1), got 2")]
    );
}

#[test]
fn unreadable_file_has_no_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.toml");
    let errors = load_experiment(&path).unwrap_err();
    assert_eq!(
        errors.to_string(),
        format!(
            "{}: cannot read experiment file: No such file or directory (os error 2)",
            path.display()
        )
    );
}

// ---------------------------------------------------------------- components and plugins

#[test]
fn unknown_normalizer_lists_the_available_ones() {
    let text = edit("norms/drmas", "norms/nope");
    assert_eq!(
        component_errors(&text),
        [at(
            31,
            13,
            "normalizer.component: plugin `norms` 0.1.0 has no normalizer `nope` (its normalizers: grpo, \
             grpo-mean, rloo, drmas, drmas-mean, at-grpo)"
        )]
    );
    assert_points_at(&text, 31, 13, "\"norms/nope\"");
}

#[test]
fn component_name_without_a_slash() {
    let text = edit("norms/drmas", "drmas");
    assert_eq!(
        component_errors(&text),
        [at(
            31,
            13,
            "normalizer.component: `drmas` is not a component name: expected `plugin/component`"
        )]
    );
}

#[test]
fn unknown_plugin() {
    let text = edit("norms/drmas", "normz/drmas");
    assert_eq!(
        component_errors(&text),
        [at(
            31,
            13,
            "normalizer.component: no plugin `normz` is loaded (loaded: math, norms, remote, search)"
        )]
    );
}

#[test]
fn component_of_the_wrong_kind() {
    let text = edit(
        "[[rewards]]",
        "[environment]\ncomponent = \"norms/grpo\"\n\n[[rewards]]",
    );
    assert_eq!(
        component_errors(&text),
        [at(
            28,
            13,
            "environment.component: plugin `norms` 0.1.0 has no environment `grpo` (its environments: none)"
        )]
    );
}

#[test]
fn a_tool_timeout_must_be_a_positive_number_of_seconds() {
    for (value, shown) in [
        ("0", "0"),
        ("-1", "-1"),
        ("nan", "NaN"),
        ("1e9", "1000000000"),
    ] {
        let text = edit(
            "[[rewards]]",
            &format!(
                "[environment]\ncomponent = \"math/env\"\ntool_timeout_s = {value}\n\n[[rewards]]"
            ),
        );
        assert_eq!(
            parse_errors(&text),
            [at(
                29,
                18,
                &format!(
                    "environment.tool_timeout_s: must be a number of seconds above 0 and at most 86400, got {shown}"
                )
            )],
            "{value}"
        );
        assert_points_at(&text, 29, 18, value);
    }
    let text = edit(
        "[[rewards]]",
        "[environment]\ncomponent = \"math/env\"\ntool_timeout_s = 2.5\n\n[[rewards]]",
    );
    let exp = parse(&text).unwrap();
    assert_eq!(exp.file.environment.unwrap().tool_timeout_s, 2.5);
}

#[test]
fn an_unknown_normalizer_config_key_points_at_the_key() {
    // norms describes its keys, so the key itself is refused at check time, with a
    // close match, before the plugin sees the table.
    let refusal = "normalizer.config.epsilom: norms/drmas has no config key `epsilom` (did you mean \
                   `epsilon`? its keys: epsilon, singleton, mean, std)";

    // An inline table: the position is the key inside it.
    let text = edit(
        "component = \"norms/drmas\"",
        "component = \"norms/drmas\"\nconfig = { epsilom = 1 }",
    );
    assert_eq!(component_errors(&text), [at(32, 12, refusal)]);
    assert_points_at(&text, 32, 12, "epsilom = 1");

    // A `[normalizer.config]` table: the position is the key's line.
    let text = edit(
        "component = \"norms/drmas\"",
        "component = \"norms/drmas\"\n\n[normalizer.config]\nepsilom = 1",
    );
    assert_eq!(component_errors(&text), [at(34, 1, refusal)]);
    assert_points_at(&text, 34, 1, "epsilom = 1");
}

#[test]
fn normalizer_config_values_checked_by_the_plugin() {
    let text = edit(
        "component = \"norms/drmas\"",
        "component = \"norms/drmas\"\nconfig = { epsilon = -1.0 }",
    );
    assert_eq!(
        component_errors(&text),
        [at(
            32,
            10,
            "normalizer.config: normalizer `norms/drmas` refused its config: epsilon must be a finite number >= 0, \
             got -1"
        )]
    );
    let text = edit(
        "component = \"norms/drmas\"",
        "component = \"norms/drmas\"\nconfig = { singleton = \"never\" }",
    );
    assert_eq!(
        component_errors(&text),
        [at(
            32,
            10,
            "normalizer.config: normalizer `norms/drmas` refused its config: unknown variant `never`, expected \
             `keep` or `zero` (at `\"never\"`)"
        )]
    );
}

#[test]
fn version_requirement_not_met() {
    let text = edit(
        "[[models]]",
        "[plugins]\nrequire = { norms = \">=2\" }\n\n[[models]]",
    );
    assert_eq!(
        component_errors(&text),
        [at(
            34,
            13,
            "normalizer.component: plugin `norms` is version 0.1.0, but the experiment requires `>=2`"
        )]
    );
}

#[test]
fn requirements_and_overrides_must_name_a_loaded_plugin() {
    let text = edit(
        "[[models]]",
        "[plugins]\nrequire = { nroms = \"^0.1\" }\noverride = [\"norms\", \"nrom\"]\n\n[[models]]",
    );
    assert_eq!(
        component_errors(&text),
        [
            at(
                6,
                21,
                "plugins.require.nroms: no plugin `nroms` is loaded (loaded: math, norms, remote, search)"
            ),
            at(
                7,
                22,
                "plugins.override[1]: no plugin `nrom` is loaded (loaded: math, norms, remote, search)"
            ),
        ]
    );
    assert_points_at(&text, 7, 22, "\"nrom\"");
}

// ---------------------------------------------------------------- trainer keys

#[test]
fn trainer_keys_with_bad_values_point_at_the_value() {
    let cases = [
        ("ppo_epochs = 0", "trainer.ppo_epochs: must be at least 1"),
        (
            "mini_batches = 0",
            "trainer.mini_batches: must be at least 1",
        ),
        (
            "logits_budget_mb = 0",
            "trainer.logits_budget_mb: must be at least 1 when set",
        ),
        (
            "keep_checkpoints = 0",
            "trainer.keep_checkpoints: must be at least 1",
        ),
        ("eval_k = 0", "trainer.eval_k: must be at least 1"),
        (
            "max_consecutive_skips = 0",
            "trainer.max_consecutive_skips: must be at least 1",
        ),
        (
            "tis_cap = 0.5",
            "trainer.tis_cap: must be a number >= 1, got 0.5",
        ),
        (
            "min_lr_ratio = 2.0",
            "trainer.min_lr_ratio: must be in [0, 1], got 2",
        ),
        (
            "warmup_steps = 11",
            "trainer.warmup_steps: 11 warm-up steps is more than the run's 10 steps",
        ),
        (
            "spike_factor = 1.0",
            "trainer.spike_factor: must be > 1, got 1",
        ),
        (
            "eval_limit = 0",
            "trainer.eval_limit: must be at least 1 when set",
        ),
        (
            "lr_schedule = \"step\"",
            "trainer.lr_schedule: unknown variant `step`, expected one of `constant`, `linear`, `cosine`",
        ),
        (
            "logp_old = \"old\"",
            "trainer.logp_old: unknown variant `old`, expected `recompute` or `sampling`",
        ),
        (
            "loss_agg = \"sum\"",
            "trainer.loss_agg: unknown variant `sum`, expected one of `token-mean`, `seq-mean-token-sum`, \
             `seq-mean-token-mean`, `seq-mean-token-sum-norm`",
        ),
    ];
    for (line, message) in cases {
        let text = edit("group_size = 4", &format!("group_size = 4\n{line}"));
        let col = line.find('=').unwrap() + 3;
        assert_eq!(parse_errors(&text), [at(36, col, message)], "{line}");
        assert_points_at(&text, 36, col, &line[col - 1..]);
    }
}

/// Counts typed `NonZero*` in the schema are refused while the file is read, naming the
/// key, at the value, in the words the checks use.
#[test]
fn counts_of_zero_are_refused_as_the_file_is_read_naming_the_key() {
    let cases = [
        (
            "group_size = 4",
            "group_size = 4\nspike_window = 0",
            36,
            "trainer.spike_window: must be at least 1",
        ),
        (
            "max_turns = 4",
            "max_turns = 0",
            25,
            "workflow.max_turns: must be at least 1",
        ),
        (
            "max_turns = 4",
            "max_turns = 4\nmax_loops = 0",
            26,
            "workflow.max_loops: must be at least 1 when set",
        ),
        (
            "top_p = 0.95",
            "top_p = 0.95\nmax_new_tokens = 0",
            22,
            "agents[1].sampling.max_new_tokens: must be at least 1",
        ),
    ];
    for (from, to, line, message) in cases {
        let text = edit(from, to);
        let written = to.lines().last().unwrap();
        let col = written.find('=').unwrap() + 3;
        assert_eq!(parse_errors(&text), [at(line, col, message)], "{to}");
        assert_points_at(&text, line, col, "0");
    }
    let errs = parse_errors(&with_engine(
        r#"{ kind = "sglang", url = "http://10.0.0.2:30000", attempts = 0 }"#,
    ));
    assert_eq!(
        errs,
        [at(8, 71, "models[0].engine.attempts: must be at least 1")]
    );
}

#[test]
fn a_kl_estimator_that_does_not_exist() {
    let text = edit(
        "group_size = 4",
        "group_size = 4\nkl = { coef = 0.01, estimator = \"k4\" }",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            36,
            33,
            "trainer.kl.estimator: unknown variant `k4`, expected one of `k1`, `abs`, `k2`, `k3`"
        )]
    );
}

#[test]
fn negative_weight_decay() {
    let text = edit(
        "path = \"models/qwen-0.5b\"",
        "path = \"models/qwen-0.5b\"\nweight_decay = -1.0",
    );
    assert_eq!(
        parse_errors(&text),
        [at(8, 16, "models[0].weight_decay: must be >= 0, got -1")]
    );
}

#[test]
fn shard_modes_none_optimizer_and_full_are_accepted() {
    use drmas::config::Shard;
    assert_eq!(parse(BASE).unwrap().file.models[0].shard, Shard::None);
    for (mode, want) in [
        ("none", Shard::None),
        ("optimizer", Shard::Optimizer),
        ("full", Shard::Full),
    ] {
        let text = edit(
            "path = \"models/qwen-0.5b\"",
            &format!("path = \"models/qwen-0.5b\"\nshard = \"{mode}\""),
        );
        assert_eq!(parse(&text).unwrap().file.models[0].shard, want, "{mode}");
    }
    let text = edit(
        "path = \"models/qwen-0.5b\"",
        "path = \"models/qwen-0.5b\"\nshard = \"zero2\"",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            8,
            9,
            "models[0].shard: unknown variant `zero2`, expected one of `none`, `optimizer`, `full`"
        )]
    );
}

#[test]
fn offload_modes_are_accepted_and_an_unknown_one_is_named() {
    for mode in ["none", "optimizer", "inactive"] {
        let text = edit(
            "devices = [\"cpu\"]",
            &format!("devices = [\"cpu\"]\noffload = \"{mode}\""),
        );
        assert!(parse(&text).is_ok(), "{mode}");
    }
    let text = edit(
        "devices = [\"cpu\"]",
        "devices = [\"cpu\"]\noffload = \"idle\"",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            43,
            11,
            "pool.offload: unknown variant `idle`, expected one of `none`, `optimizer`, `inactive`"
        )]
    );
}

#[test]
fn a_memory_limit_must_be_positive() {
    let text = edit(
        "devices = [\"cpu\"]",
        "devices = [\"cpu\"]\nmemory_limit_gib = 0",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            43,
            20,
            "pool.memory_limit_gib: must be a positive number of GiB, got 0"
        )]
    );
    let text = edit(
        "devices = [\"cpu\"]",
        "devices = [\"cpu\"]\nmemory_limit_gib = 12.5",
    );
    assert_eq!(parse(&text).unwrap().file.pool.memory_limit_gib, Some(12.5));
}

#[test]
fn a_model_device_must_exist() {
    let text = edit(
        "path = \"models/qwen-0.5b\"",
        "path = \"models/qwen-0.5b\"\ndevice = \"gpu0\"",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            8,
            10,
            "models[0].device: unknown device `gpu0`: expected \"auto\", \"cpu\" or \"cuda:N\""
        )]
    );
    let text = edit(
        "path = \"models/qwen-0.5b\"",
        "path = \"models/qwen-0.5b\"\ndevice = \"cuda:7\"",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            8,
            10,
            "models[0].device: device `cuda:7` does not exist: this machine has no CUDA device (devices: cpu)"
        )]
    );
}

#[test]
fn a_lora_model_names_its_base_and_a_valid_adapter() {
    let lora = |l: &str| {
        edit(
            "path = \"models/qwen-0.5b\"",
            &format!("base = \"models/qwen-0.5b\"\nlora = {l}"),
        )
    };
    assert!(
        parse(&lora(
            "{ rank = 8, alpha = 16, targets = [\"q_proj\", \"v_proj\"] }"
        ))
        .is_ok()
    );
    let cases = [
        ("{ rank = 0 }", "models[0].lora: rank 0 is not in 1..=4096"),
        (
            "{ rank = 8, targets = [\"lm_head\"] }",
            "models[0].lora: target `lm_head` is not a projection of the decoder (expected some of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
        ),
        (
            "{ rank = 8, targets = [\"q_proj\", \"q_proj\"] }",
            "models[0].lora: target `q_proj` is named twice",
        ),
        (
            "{ rank = 8, dropout = 1.0 }",
            "models[0].lora: dropout 1 is not in [0, 1)",
        ),
    ];
    for (l, want) in cases {
        let errors = parse_errors(&lora(l));
        assert_eq!(errors, [at(8, 8, want)], "{l}");
    }
    let errors = parse_errors(&lora("{ rank = 8, bias = true }"));
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].contains("models[0].lora.bias: unknown field `bias`"),
        "{errors:?}"
    );

    // `base` without `lora`, `lora` with `path`, both `path` and `base`, neither.
    let errors = parse_errors(&edit(
        "path = \"models/qwen-0.5b\"",
        "base = \"models/qwen-0.5b\"",
    ));
    assert_eq!(
        errors,
        [at(
            7,
            8,
            "models[0].base: `base` needs `lora = { rank = .., alpha = .., targets = [..] }`"
        )]
    );
    let errors = parse_errors(&edit(
        "path = \"models/qwen-0.5b\"",
        "path = \"models/qwen-0.5b\"\nlora = { rank = 4 }",
    ));
    assert_eq!(
        errors,
        [at(
            8,
            8,
            "models[0].lora: `lora` needs `base` (the frozen model's folder) instead of `path`"
        )]
    );
    let errors = parse_errors(&edit(
        "path = \"models/qwen-0.5b\"",
        "path = \"models/qwen-0.5b\"\nbase = \"models/qwen-0.5b\"\nlora = { rank = 4 }",
    ));
    assert_eq!(
        errors,
        [at(
            8,
            8,
            "models[0].base: a model has either `path` (a full model) or `base` (a LoRA adapter on it), not both"
        )]
    );
    let errors = parse_errors(&edit("path = \"models/qwen-0.5b\"", "lr = 1e-5"));
    assert_eq!(
        errors,
        [at(
            5,
            1,
            "models[0]: model `small` needs `path` (an HF checkpoint folder) or `base` with `lora`"
        )]
    );
    // With a KL term, a LoRA model's reference is its own base (adapters off).
    let text = edit_text(
        &lora("{ rank = 4 }"),
        "group_size = 4",
        "group_size = 4\nkl = { coef = 0.01 }",
    );
    assert!(parse(&text).is_ok());
}

#[test]
fn a_micro_batch_smaller_than_a_response() {
    let text = edit(
        "temperature = 0.7",
        "temperature = 0.7\nmax_new_tokens = 512",
    );
    let text = edit_text(
        &text,
        "group_size = 4",
        "group_size = 4\nmicro_batch_tokens = 256",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            21,
            18,
            "agents[1].sampling.max_new_tokens: 512 is more than [trainer] micro_batch_tokens = 256"
        )]
    );
}

// ---------------------------------------------------------------- names, limits, bounds

#[test]
fn an_experiment_name_cannot_leave_runs() {
    for bad in ["../../x", "/etc", ".hidden", "a/b"] {
        let text = edit("name = \"math-two-agents\"", &format!("name = {bad:?}"));
        assert_eq!(
            parse_errors(&text),
            [at(
                2,
                8,
                &format!(
                    "experiment.name: `{bad}` is not a plain folder name: use letters, digits, `-`, `_` and `.`, not starting with `.` (it names the folder runs/<name>; set output_dir for another place)"
                )
            )]
        );
    }
}

#[test]
fn a_data_limit_of_zero_is_refused() {
    let text = edit(
        "[pool]",
        "[data]\nval = [{ path = \"v.jsonl\", limit = 0 }]\n\n[pool]",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            42,
            36,
            "data.val[0].limit: must be at least 1 when set (leave it out for every task)"
        )]
    );
}

#[test]
fn a_workflow_cannot_run_away() {
    let text = edit("max_turns = 4", "max_turns = 100000");
    assert_eq!(
        parse_errors(&text),
        [at(
            25,
            13,
            "workflow.max_turns: 100000 turns is more than the limit of 64: every turn is a generation in the episode's context"
        )]
    );
}

#[test]
fn max_failed_episodes_is_a_fraction() {
    assert_eq!(parse(BASE).unwrap().file.workflow.max_failed_episodes, 0.05);
    for (value, shown) in [("1.5", "1.5"), ("-0.1", "-0.1"), ("nan", "NaN")] {
        let text = edit(
            "max_turns = 4",
            &format!("max_turns = 4\nmax_failed_episodes = {value}"),
        );
        assert_eq!(
            parse_errors(&text),
            [at(
                26,
                23,
                &format!("workflow.max_failed_episodes: must be a fraction in [0, 1], got {shown}")
            )],
            "{value}"
        );
        assert_points_at(&text, 26, 23, value);
    }
    let text = edit("max_turns = 4", "max_turns = 4\nmax_failed_episodes = 0.25");
    assert_eq!(
        parse(&text).unwrap().file.workflow.max_failed_episodes,
        0.25
    );
}

#[test]
fn a_handoff_to_an_agent_that_does_not_exist() {
    // The solver hands off to `verifier` (its default), which is now called `checker`.
    let text = edit("name = \"verifier\"", "name = \"checker\"");
    assert_eq!(
        component_errors(&text),
        [at(
            11,
            13,
            "agents[0].component: math/solver names agent `verifier`, which the experiment does not define (agents: checker, solver)"
        )]
    );
    // Named in a config table: the error points at the table.
    let text = edit(
        "model = \"small\"\n\n[[agents]]",
        "model = \"small\"\nconfig = { verifier = \"verfier\" }\n\n[[agents]]",
    );
    assert_eq!(
        component_errors(&text),
        [at(
            13,
            10,
            "agents[0].config: math/solver names agent `verfier`, which the experiment does not define (agents: solver, verifier)"
        )]
    );
}

// ---------------------------------------------------------------- paths on disk

/// The lines `check_paths` reports for `text` (paths relative to the working folder).
fn path_errors(text: &str) -> Vec<String> {
    let exp = parse(text).unwrap_or_else(|e| panic!("the experiment should parse:\n{e}"));
    match check_paths(&exp) {
        Ok(()) => Vec::new(),
        Err(errors) => lines(&errors),
    }
}

#[test]
fn paths_are_checked_before_anything_loads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A model folder without config.json, a data folder, a missing data file, and an
    // output folder that is a file.
    std::fs::create_dir(d.join("not-a-model")).unwrap();
    std::fs::create_dir(d.join("data-folder")).unwrap();
    std::fs::write(d.join("out-file"), "").unwrap();
    let text = edit(
        "path = \"models/qwen-0.5b\"",
        &format!("path = {:?}", d.join("not-a-model").display().to_string()),
    );
    let text = edit_text(
        &text,
        "seed = 7",
        &format!(
            "seed = 7\noutput_dir = {:?}",
            d.join("out-file/run").display().to_string()
        ),
    );
    let text = edit_text(
        &text,
        "[pool]",
        &format!(
            "[data]\ntrain = {{ path = {:?} }}\nval = [{{ path = {:?} }}]\n\n[pool]",
            d.join("data-folder").display().to_string(),
            d.join("missing.jsonl").display().to_string()
        ),
    );
    let errors = path_errors(&text);
    let d = d.display();
    assert_eq!(
        errors,
        [
            at(
                4,
                14,
                &format!(
                    "experiment.output_dir: output folder {d}/out-file/run: {d}/out-file is a file, not a folder"
                )
            ),
            at(
                8,
                8,
                &format!(
                    "models[0].path: {d}/not-a-model has no config.json: not an HF model folder"
                )
            ),
            at(
                43,
                18,
                &format!(
                    "data.train.path: {d}/data-folder is a folder; give a .jsonl, .json, .parquet or .gz file"
                )
            ),
            at(
                44,
                17,
                &format!(
                    "data.val[0].path: data file {d}/missing.jsonl does not exist (`drmas data prepare` writes the standard sets)"
                )
            ),
        ]
    );
    // The base's model folder does not exist at all.
    assert_eq!(
        path_errors(BASE),
        [at(
            7,
            8,
            "models[0].path: model folder models/qwen-0.5b does not exist (see `drmas model import` and docs/models.md)"
        )]
    );
}

#[test]
fn a_reply_longer_than_the_models_context_is_refused() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tiny-models/tiny-chat");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap();
    let context = config["max_position_embeddings"].as_u64().unwrap();
    let text = edit(
        "path = \"models/qwen-0.5b\"",
        &format!("path = {:?}", model.display().to_string()),
    );
    let text = edit_text(
        &text,
        "temperature = 0.7",
        &format!("temperature = 0.7\nmax_new_tokens = {context}"),
    );
    let text = edit_text(
        &text,
        "group_size = 4",
        "group_size = 4\nmicro_batch_tokens = 100000",
    );
    assert_eq!(
        path_errors(&text),
        [at(
            21,
            18,
            &format!(
                "agents[1].sampling.max_new_tokens: {context} new tokens do not fit model `small`'s context of {context} positions (max_position_embeddings in {}/config.json)",
                model.display()
            )
        )]
    );
}

#[test]
fn every_shipped_config_parses_and_validates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            if let Err(e) = parse_experiment(&path, text) {
                panic!("{}:\n{e}", path.display());
            }
            checked += 1;
        }
    }
    // math-{drmas,drmas-engine,grpo,lora,sharing,solver} and search-{drmas,grpo,sharing}.
    assert!(checked >= 9, "{checked} configs");
}

#[test]
fn the_shipped_math_teams_are_in_step_with_the_default() {
    // math-grpo (the baseline), math-sharing (one model), math-lora (adapters) and
    // math-drmas-engine (rollouts on llama-server) differ from math-drmas only in what
    // they are about: the normalizer, the models (and their engines) and which model
    // each agent uses, the offload mode. Everything the team does is the same.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let team = |name: &str| {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let mut t: toml::Table = text.parse().unwrap();
        for key in ["experiment", "models", "normalizer", "pool"] {
            t.remove(key);
        }
        for agent in t["agents"].as_array_mut().unwrap() {
            agent.as_table_mut().unwrap().remove("model");
        }
        t
    };
    let default = team("math-drmas.toml");
    for other in [
        "math-grpo.toml",
        "math-sharing.toml",
        "math-lora.toml",
        "math-drmas-engine.toml",
    ] {
        assert_eq!(
            team(other),
            default,
            "{other} is out of step with math-drmas.toml"
        );
    }
    // The team rewarded per agent differs in its rewards alone: the team's outcome
    // trains the solver, the verifier's verdict the verifier.
    let mut verdict = team("math-verdict.toml");
    let rewards = verdict.remove("rewards").unwrap();
    let mut same = default.clone();
    same.remove("rewards");
    assert_eq!(
        verdict, same,
        "math-verdict.toml is out of step with math-drmas.toml"
    );
    let rewards: Vec<(String, String, Option<bool>)> = rewards
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["component"].as_str().unwrap().to_string(),
                r["agents"][0].as_str().unwrap().to_string(),
                r.get("team").and_then(|t| t.as_bool()),
            )
        })
        .collect();
    assert_eq!(
        rewards,
        [
            ("math/boxed".into(), "solver".into(), Some(true)),
            ("math/verdict".into(), "verifier".into(), None),
        ]
    );
    // The paper's team: solver → verifier → solver.
    assert_eq!(default["workflow"]["max_turns"].as_integer(), Some(3));
    assert_eq!(default["workflow"]["max_loops"].as_integer(), Some(1));
}

#[test]
fn the_math_teams_new_keys_are_checked_at_their_key() {
    // math/solver's max_attempts (line 13), math/boxed's fallback_to_earlier and
    // math/env's role names (a table after [[rewards]]).
    let text = edit(
        "model = \"small\"\n\n[[agents]]\nname = \"verifier\"",
        "model = \"small\"\nconfig = { max_attempts = \"two\" }\n\n[[agents]]\nname = \"verifier\"",
    );
    assert_eq!(
        component_errors(&text),
        [at(
            13,
            27,
            "agents[0].config.max_attempts: math/solver config key `max_attempts` takes an integer, got string `\"two\"`"
        )]
    );
    assert_points_at(&text, 13, 27, "\"two\"");
    let text = edit(
        "component = \"math/boxed\"",
        "component = \"math/boxed\"\nconfig = { fallback_to_earlier = 1 }\n\n[environment]\ncomponent = \"math/env\"\nconfig = { judge = \"verifier\" }",
    );
    assert_eq!(
        component_errors(&text),
        [
            at(
                33,
                12,
                "environment.config.judge: math/env has no config key `judge` (its keys: solver, verifier)"
            ),
            at(
                29,
                34,
                "rewards[0].config.fallback_to_earlier: math/boxed config key `fallback_to_earlier` takes a boolean, got integer `1`"
            ),
        ]
    );
}

#[test]
fn a_wrongly_typed_described_key_is_reported_at_the_key() {
    // norms describes `epsilon` as a float: the host checks the type at the key before
    // the plugin parses the table (which could only point at the table).
    let text = edit(
        "component = \"norms/drmas\"",
        "component = \"norms/drmas\"\nconfig = { epsilon = \"tiny\" }",
    );
    assert_eq!(
        component_errors(&text),
        [at(
            32,
            22,
            "normalizer.config.epsilon: norms/drmas config key `epsilon` takes a float, got string `\"tiny\"`"
        )]
    );
    assert_points_at(&text, 32, 22, "\"tiny\"");
    // An integer is a fine float, and a string key takes a string.
    let text = edit(
        "component = \"norms/drmas\"",
        "component = \"norms/drmas\"\nconfig = { epsilon = 0, singleton = \"zero\" }",
    );
    assert_eq!(component_errors(&text), Vec::<String>::new());
    let text = edit(
        "component = \"norms/drmas\"",
        "component = \"norms/drmas\"\n\n[normalizer.config]\nsingleton = 3",
    );
    assert_eq!(
        component_errors(&text),
        [at(
            34,
            13,
            "normalizer.config.singleton: norms/drmas config key `singleton` takes a string, got integer `3`"
        )]
    );
}

#[test]
fn train_takes_one_table_and_val_a_list_and_each_says_so() {
    let text = edit(
        "[trainer]\n",
        "[data]\ntrain = [{ path = \"t.jsonl\" }]\n\n[trainer]\n",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            34,
            9,
            "data.train: `train` takes one table (`[data.train]` or `train = { path = \"…\" }`), not a list: only `val` takes a list"
        )]
    );
    assert_points_at(&text, 34, 9, "[{ path");
    let text = edit("[trainer]\n", "[data]\ntrain = \"t.jsonl\"\n\n[trainer]\n");
    assert_eq!(
        parse_errors(&text),
        [at(
            34,
            9,
            "data.train: `train` takes a table, not a bare path: write `train = { path = \"t.jsonl\" }`"
        )]
    );
    let text = edit(
        "[trainer]\n",
        "[data]\nval = { path = \"v.jsonl\" }\n\n[trainer]\n",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            34,
            7,
            "data.val: `val` takes a list of tables (`[[data.val]]` or `val = [{ path = \"…\" }]`), not one table"
        )]
    );
    // Both shapes that are right still parse, and a bad field inside a source is still
    // reported at its own key.
    let text = edit(
        "[trainer]\n",
        "[data]\ntrain = { path = \"t.jsonl\" }\nval = [{ path = \"v.jsonl\", limit = 2 }]\n\n[trainer]\n",
    );
    let exp = parse(&text).unwrap();
    assert_eq!(exp.file.data.val[0].limit, Some(2));
    let text = edit(
        "[trainer]\n",
        "[data]\nval = [{ path = \"v.jsonl\", limit = \"two\" }]\n\n[trainer]\n",
    );
    let errors = parse_errors(&text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("data.val[0].limit: invalid type: string \"two\""),
        "{errors:?}"
    );
}

// ---------------------------------------------------------------- rewards scoped to agents

/// BASE with a second reward, `math/verdict`, scoped by `agents` (line 32).
fn with_scoped_reward(agents: &str) -> String {
    edit(
        "component = \"math/boxed\"",
        &format!(
            "component = \"math/boxed\"\n\n[[rewards]]\ncomponent = \"math/verdict\"\n{agents}"
        ),
    )
}

#[test]
fn a_scoped_reward_accepts_agents_of_the_experiment() {
    let text = with_scoped_reward("agents = [\"verifier\"]");
    let exp = parse(&text).unwrap();
    assert_eq!(exp.file.rewards[0].agents, None);
    assert_eq!(
        exp.file.rewards[1].agents,
        Some(vec!["verifier".to_string()])
    );
    assert_eq!(component_errors(&text), Vec::<String>::new());
}

#[test]
fn a_scoped_reward_naming_an_unknown_or_repeated_agent() {
    let text = with_scoped_reward("agents = [\"verifier\", \"critic\", \"verifier\"]");
    assert_eq!(
        parse_errors(&text),
        [
            at(
                32,
                23,
                "rewards[1].agents[1]: agent `critic` is not defined (agents: solver, verifier)"
            ),
            at(
                32,
                33,
                "rewards[1].agents[2]: agent `verifier` is named twice"
            ),
        ]
    );
    assert_points_at(&text, 32, 23, "\"critic\"");
}

#[test]
fn a_scoped_reward_with_no_agents() {
    let text = with_scoped_reward("agents = []");
    assert_eq!(
        parse_errors(&text),
        [at(
            32,
            10,
            "rewards[1].agents: an empty list scores no agent: name agents, or leave the key out for the whole team"
        )]
    );
}

#[test]
fn every_reward_scoped_leaves_no_team_reward() {
    let text = edit(
        "component = \"math/boxed\"",
        "component = \"math/boxed\"\nagents = [\"solver\", \"verifier\"]",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            29,
            10,
            "rewards[0].agents: no reward is part of the team reward: at least one must score the whole team (no `agents` key) or say `team = true`, since the team reward is what success and evaluation report"
        )]
    );
    // `team = false` on the only team-wide reward leaves none either, said at that key.
    let text = edit(
        "component = \"math/boxed\"",
        "component = \"math/boxed\"\nteam = false",
    );
    assert_eq!(
        parse_errors(&text),
        [at(
            29,
            8,
            "rewards[0].team: no reward is part of the team reward: at least one must score the whole team (no `agents` key) or say `team = true`, since the team reward is what success and evaluation report"
        )]
    );
    // A scoped reward that says it is the team's outcome is one.
    let text = edit(
        "component = \"math/boxed\"",
        "component = \"math/boxed\"\nagents = [\"solver\"]\nteam = true",
    );
    let exp = parse(&text).unwrap();
    assert!(exp.file.rewards[0].in_team());
}

#[test]
fn agents_of_the_wrong_type() {
    let text = with_scoped_reward("agents = \"verifier\"");
    let errors = parse_errors(&text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(&at(
            32,
            10,
            "rewards[1].agents: invalid type: string \"verifier\", expected a sequence"
        )),
        "{errors:?}"
    );
}

// ---------------------------------------------------------------- [models.engine]

/// `BASE` with an engine section for model `small`.
fn with_engine(section: &str) -> String {
    edit(
        "path = \"models/qwen-0.5b\"\n",
        &format!("path = \"models/qwen-0.5b\"\nengine = {section}\n"),
    )
}

#[test]
fn engine_sections_are_accepted_when_whole() {
    for section in [
        r#"{ kind = "llama-cpp", command = ["llama-server", "-m", "{model}", "--port", "{port}"], gguf = "m.gguf", export = "f16" }"#,
        r#"{ kind = "sglang", url = "http://10.0.0.2:30000", parallel = 64 }"#,
        r#"{ kind = "sglang", command = ["python", "-m", "sglang.launch_server", "--model-path", "{model}", "--port", "{port}"] }"#,
        r#"{ kind = "vllm", url = "http://10.0.0.2:8000", served_model = "policy", timeout_s = 120, attempts = 5 }"#,
    ] {
        let exp = parse(&with_engine(section)).unwrap_or_else(|e| panic!("{section}: {e}"));
        assert!(exp.file.models[0].engine.is_some());
    }
}

#[test]
fn engine_sections_name_what_is_missing_or_misplaced() {
    let errs = parse_errors(&with_engine(
        r#"{ kind = "llama-cpp", url = "http://h:1" }"#,
    ));
    assert_eq!(
        errs,
        [
            at(
                8,
                10,
                "models[0].engine.command: llama-cpp needs `command`: drmas runs llama-server and restarts it on each update's weights (e.g. [\"llama-server\", \"-m\", \"{model}\", \"--port\", \"{port}\"])"
            ),
            at(
                8,
                38,
                "models[0].engine.url: llama-cpp has no call that loads new weights: drmas must run it (`command`), not reach one at a URL"
            ),
            at(
                8,
                10,
                "models[0].engine.gguf: llama-cpp needs `gguf`: the GGUF the model was imported from, whose layout and tokenizer the exports follow"
            ),
        ]
    );
    let errs = parse_errors(&with_engine(
        r#"{ kind = "llama-cpp", command = ["llama-server", "-m", "x.gguf"], gguf = "m.gguf" }"#,
    ));
    assert_eq!(
        errs,
        [
            at(
                8,
                42,
                "models[0].engine.command: has no `{model}`: drmas fills in the exported GGUF and the port there"
            ),
            at(
                8,
                42,
                "models[0].engine.command: has no `{port}`: drmas fills in the exported GGUF and the port there"
            ),
        ]
    );
    let errs = parse_errors(&with_engine(
        r#"{ kind = "sglang", command = ["x"], parallel = 0, url = "10.0.0.2:30000", served_model = "p" }"#,
    ));
    assert_eq!(
        errs,
        [
            at(
                8,
                39,
                "models[0].engine.command: give `url` (an engine that runs elsewhere) or `command` (one drmas starts), not both"
            ),
            at(
                8,
                99,
                "models[0].engine.served_model: only vllm serves models by name"
            ),
            at(
                8,
                66,
                "models[0].engine.url: `10.0.0.2:30000` is not an http:// address (the engine client has no TLS: reach the engine on its own network)"
            ),
            at(8, 57, "models[0].engine.parallel: must be at least 1"),
        ]
    );
    // Each points at its value.
    let text = with_engine(
        r#"{ kind = "sglang", command = ["x"], parallel = 0, url = "10.0.0.2:30000", served_model = "p" }"#,
    );
    for (col, value) in [
        (39, "[\"x\"]"),
        (99, "\"p\""),
        (66, "\"10.0.0.2"),
        (57, "0,"),
    ] {
        assert_points_at(&text, 8, col, value);
    }
    // SGLang or vLLM: an address, or a command drmas runs with both placeholders.
    let errs = parse_errors(&with_engine(r#"{ kind = "vllm" }"#));
    assert_eq!(
        errs,
        [at(
            8,
            10,
            "models[0].engine.url: needs `url` (an engine that runs elsewhere, http://host:port) or `command` (one drmas starts on this machine)"
        )]
    );
    let errs = parse_errors(&with_engine(
        r#"{ kind = "sglang", command = ["python", "-m", "sglang.launch_server", "--port", "{port}"] }"#,
    ));
    assert_eq!(
        errs,
        [at(
            8,
            39,
            "models[0].engine.command: has no `{model}`: drmas fills in the model's folder and the port there"
        )]
    );
    let errs = parse_errors(&with_engine(r#"{ kind = "trt" }"#));
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].contains("models[0].engine.kind: unknown variant `trt`, expected one of `llama-cpp`, `sglang`, `vllm`"),
        "{errs:?}"
    );
}

#[test]
fn shadow_gradients_need_a_shadow_normalizer_and_whole_models() {
    let text = edit("group_size = 4", "group_size = 4\nshadow_gradients = true");
    assert_eq!(
        parse_errors(&text),
        [at(
            36,
            20,
            "trainer.shadow_gradients: needs a `shadow_normalizer`: its advantages are what the second backward uses"
        )]
    );
    let text = edit(
        "group_size = 4",
        "group_size = 4\nshadow_gradients = true\nshadow_normalizer = \"norms/grpo\"",
    );
    let exp = parse(&text).unwrap();
    assert!(exp.file.trainer.shadow_gradients);
    let text = edit(
        "path = \"models/qwen-0.5b\"",
        "path = \"models/qwen-0.5b\"\nshard = \"optimizer\"",
    );
    let text = edit_text(
        &text,
        "group_size = 4",
        "group_size = 4\nshadow_gradients = true\nshadow_normalizer = \"norms/grpo\"",
    );
    let errors = parse_errors(&text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].ends_with(
            "trainer.shadow_gradients: is not built for sharded models: models[0] (`small`) has shard = \"optimizer\""
        ),
        "{errors:?}"
    );
}

#[test]
fn a_models_own_grad_clip_and_the_loss_balance_are_checked_at_their_key() {
    let text = edit(
        "path = \"models/qwen-0.5b\"",
        "path = \"models/qwen-0.5b\"\ngrad_clip = -1.0",
    );
    let errors = parse_errors(&text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].ends_with("models[0].grad_clip: must be > 0, got -1"),
        "{errors:?}"
    );
    let text = edit("group_size = 4", "group_size = 4\nloss_balance = \"agent\"");
    let errors = parse_errors(&text);
    assert_eq!(
        errors,
        [at(
            36,
            16,
            "trainer.loss_balance: unknown variant `agent`, expected `none` or `agent-frequency`"
        )]
    );
    let text = edit(
        "group_size = 4",
        "group_size = 4\nloss_balance = \"agent-frequency\"",
    );
    assert_eq!(
        parse(&text).unwrap().file.trainer.loss_balance,
        drmas::config::LossBalance::AgentFrequency
    );
}

#[test]
fn a_dynamic_sampling_refill_of_zero_tasks_is_refused_at_its_key() {
    let text = edit(
        "group_size = 4",
        "group_size = 4\ndynamic_sampling = { refill_tasks = 0 }",
    );
    let errors = parse_errors(&text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].ends_with("trainer.dynamic_sampling.refill_tasks: must be at least 1 when set"),
        "{errors:?}"
    );
    let text = edit(
        "group_size = 4",
        "group_size = 4\ndynamic_sampling = { refill = 2 }",
    );
    let errors = parse_errors(&text);
    assert!(
        errors[0].contains(
            "trainer.dynamic_sampling.refill: unknown field `refill`, expected `refill_tasks`"
        ),
        "{errors:?}"
    );
    let text = edit("group_size = 4", "group_size = 4\ndynamic_sampling = {}");
    let exp = parse(&text).unwrap();
    assert_eq!(
        exp.file.trainer.dynamic_sampling,
        Some(drmas::config::DynamicSampling { refill_tasks: None })
    );
}
