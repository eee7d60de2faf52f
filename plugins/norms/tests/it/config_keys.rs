//! The config keys each normalizer describes are exactly the keys its parser accepts,
//! with defaults equal to the parser's own: the description cannot drift.

use drmas_norms::{NormConfig, Singleton};
use drmas_plugin_api::{ComponentKind, ConfigKey, parse_config};

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
fn every_normalizer_describes_the_keys_its_parser_accepts() {
    let manifest = drmas_norms::plugin().manifest();
    assert_eq!(manifest.components.len(), 6);
    for c in &manifest.components {
        assert_eq!(c.kind, ComponentKind::Normalizer);
        let keys = c.config.as_deref().expect("described");
        let names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["epsilon", "singleton"], "norms/{}", c.name);

        // Every described key at its default parses to the parser's default.
        let text: String = keys
            .iter()
            .map(|ConfigKey { name, default, .. }| {
                format!("{name} = {}\n", default.as_deref().expect("all optional"))
            })
            .collect();
        let parsed: NormConfig = parse_config(&text).unwrap();
        let default = NormConfig::default();
        assert_eq!(parsed.epsilon, default.epsilon, "norms/{}", c.name);
        assert_eq!(parsed.singleton, default.singleton);
        assert_eq!(parsed.singleton, Singleton::Keep);

        // An extra key is refused, and the parser's list of fields is the described one.
        let err = parse_config::<NormConfig>(&format!("{text}extra = 1\n"))
            .expect_err("an extra key is refused");
        assert_eq!(accepted_fields(&err.to_string()), names, "{err}");
    }
}
