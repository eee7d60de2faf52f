//! The config keys each math component describes are exactly the keys its parser
//! accepts, with defaults equal to the parser's own: the description cannot drift.

use drmas_math::{SolverConfig, VerifierConfig};
use drmas_plugin_api::{ComponentInfo, ComponentKind, ConfigKey, parse_config};

fn component(kind: ComponentKind, name: &str) -> ComponentInfo {
    drmas_math::plugin()
        .manifest()
        .components
        .into_iter()
        .find(|c| c.kind == kind && c.name == name)
        .unwrap_or_else(|| panic!("math has no {kind} {name}"))
}

/// Each described key at its default, as a TOML table.
fn defaults(keys: &[ConfigKey]) -> String {
    keys.iter()
        .map(|ConfigKey { name, default, .. }| {
            format!("{name} = {}\n", default.as_deref().expect("all optional"))
        })
        .collect()
}

fn names(keys: &[ConfigKey]) -> Vec<&str> {
    keys.iter().map(|k| k.name.as_str()).collect()
}

/// The names in backticks after "expected" in serde's unknown-field message (before the
/// ` (at `...`)` that `parse_config` adds).
fn accepted_fields(message: &str) -> Vec<String> {
    let (_, expected) = message
        .split_once("expected")
        .unwrap_or_else(|| panic!("no field list in `{message}`"));
    let expected = expected.split(" (at `").next().unwrap_or_default();
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_solver_describes_the_keys_its_parser_accepts() {
    let keys = component(ComponentKind::Agent, "solver").config.unwrap();
    let text = defaults(&keys);
    assert_eq!(
        parse_config::<SolverConfig>(&text).unwrap(),
        SolverConfig::default()
    );
    let err = parse_config::<SolverConfig>(&format!("{text}extra = 1\n"))
        .expect_err("an extra key is refused");
    assert_eq!(accepted_fields(&err.to_string()), names(&keys), "{err}");
    assert_eq!(
        names(&keys),
        [
            "system_prompt",
            "user_template",
            "retry_template",
            "examples",
            "verifier"
        ]
    );
}

#[test]
fn the_verifier_describes_the_keys_its_parser_accepts() {
    let keys = component(ComponentKind::Agent, "verifier").config.unwrap();
    let text = defaults(&keys);
    assert_eq!(
        parse_config::<VerifierConfig>(&text).unwrap(),
        VerifierConfig::default()
    );
    let err = parse_config::<VerifierConfig>(&format!("{text}extra = 1\n"))
        .expect_err("an extra key is refused");
    assert_eq!(accepted_fields(&err.to_string()), names(&keys), "{err}");
}

#[test]
fn components_without_options_say_so_and_refuse_any_key() {
    for (kind, name) in [
        (ComponentKind::Environment, "env"),
        (ComponentKind::Reward, "boxed"),
        (ComponentKind::Reward, "gsm8k"),
    ] {
        assert_eq!(component(kind, name).config, Some(vec![]), "math/{name}");
    }
    let err = drmas_math::MathEnv::from_config("extra = 1").expect_err("any key is refused");
    assert!(err.to_string().contains("unknown field `extra`"), "{err}");
}
