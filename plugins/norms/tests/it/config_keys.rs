//! What every normalizer describes of its config table, as `drmas plugins inspect`
//! shows it. The keys are derived from `NormConfig` (`config_table!`), so this pins
//! what a user reads, not that two lists agree.

use drmas_norms::{NormConfig, Singleton};
use drmas_plugin_api::{
    ComponentKind, ConfigKey, check_manifest_config_keys, kit::ConfigTable, parse_config,
};

#[test]
fn every_normalizer_describes_the_table_it_parses() {
    let manifest = drmas_norms::plugin().manifest();
    assert_eq!(manifest.components.len(), 6);
    let want = [
        ConfigKey::optional(
            "epsilon",
            "float",
            "0.000001",
            "added to the std before dividing by it (variants that divide)",
        ),
        ConfigKey::optional(
            "singleton",
            "string",
            "\"keep\"",
            "a group of one value: \"keep\" it (mean 0, std 1) or \"zero\" its advantage",
        ),
    ];
    assert_eq!(NormConfig::config_keys(), want);
    for c in &manifest.components {
        assert_eq!(c.kind, ComponentKind::Normalizer);
        assert_eq!(c.config.as_deref(), Some(&want[..]), "norms/{}", c.name);
    }
    check_manifest_config_keys(&manifest).unwrap();
    let default = NormConfig::default();
    assert_eq!(
        (default.epsilon, default.singleton),
        (1e-6, Singleton::Keep)
    );
    let zero: NormConfig = parse_config("singleton = \"zero\"").unwrap();
    assert_eq!(zero.singleton, Singleton::Zero);
}

#[test]
fn bad_values_are_refused_by_the_normalizer_with_the_key() {
    let spec = drmas_norms::plugin();
    let drmas_plugin_api::ComponentFactory::Normalizer(make) = &spec.entries[3].factory else {
        panic!("not a normalizer")
    };
    assert_eq!(spec.entries[3].name, "drmas");
    let message = |text: &str| make(text).err().expect("refused").message;
    assert_eq!(
        message("epsilon = -1.0"),
        "epsilon must be a finite number >= 0, got -1"
    );
    assert_eq!(
        message("singleton = \"never\""),
        "unknown variant `never`, expected `keep` or `zero` (at `\"never\"`)"
    );
    assert_eq!(
        message("epsilom = 1"),
        "unknown field `epsilom`, expected `epsilon` or `singleton` (at `epsilom`)"
    );
}
