//! What every normalizer describes of its config table, as `drmas plugins inspect`
//! shows it. The keys are derived from `NormConfig` (`config_table!`), so this pins
//! what a user reads, not that two lists agree.

use drmas_norms::{MeanSource, NormConfig, Pool, Singleton, StdSource};
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
        ConfigKey::optional(
            "mean",
            "string",
            "\"preset\"",
            "the pool the mean is taken over: \"agent\", \"agent-turn\", \"agent-trajectory\", \
             \"task\", \"trajectory\" or \"batch\"; \"preset\" is the component's own",
        ),
        ConfigKey::optional(
            "std",
            "string",
            "\"preset\"",
            "the pool the std is taken over (as `mean`), or \"none\" to centre only; \"preset\" \
             is the component's own; only grpo, drmas and at-grpo take a pool",
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
        (
            default.epsilon,
            default.singleton,
            default.mean,
            default.std
        ),
        (1e-6, Singleton::Keep, MeanSource::Preset, StdSource::Preset)
    );
    let zero: NormConfig = parse_config("singleton = \"zero\"").unwrap();
    assert_eq!(zero.singleton, Singleton::Zero);
    let pools: NormConfig = parse_config("mean = \"agent-trajectory\"\nstd = \"none\"").unwrap();
    assert_eq!(
        (pools.mean, pools.std),
        (MeanSource::Pool(Pool::AgentTrajectory), StdSource::None)
    );
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
        "unknown field `epsilom`, expected one of `epsilon`, `singleton`, `mean`, `std` (at `epsilom`)"
    );
}

/// The factory of the normalizer `name`, as the host calls it.
fn factory(name: &str) -> impl Fn(&str) -> String {
    let spec = drmas_norms::plugin();
    let entry = spec.entries.into_iter().find(|e| e.name == name).unwrap();
    let drmas_plugin_api::ComponentFactory::Normalizer(make) = entry.factory else {
        panic!("{name} is not a normalizer")
    };
    move |text: &str| make(text).err().expect("refused").message
}

#[test]
fn an_unknown_pool_is_refused_naming_the_key_and_the_choices() {
    for name in ["grpo", "drmas", "rloo"] {
        let message = factory(name);
        assert_eq!(
            message("mean = \"traj\""),
            "mean = \"traj\" is not a pool; `mean` takes one of \"preset\", \"agent\", \
             \"agent-turn\", \"agent-trajectory\", \"task\", \"trajectory\", \"batch\" (at `\"traj\"`)"
        );
        // "none" is a std choice only: a mean is always taken.
        assert_eq!(
            message("mean = \"none\""),
            "mean = \"none\" is not a pool; `mean` takes one of \"preset\", \"agent\", \
             \"agent-turn\", \"agent-trajectory\", \"task\", \"trajectory\", \"batch\" (at `\"none\"`)"
        );
        assert_eq!(
            message("std = \"Agent\""),
            "std = \"Agent\" is not a pool; `std` takes one of \"preset\", \"agent\", \
             \"agent-turn\", \"agent-trajectory\", \"task\", \"trajectory\", \"batch\", \"none\" \
             (at `\"Agent\"`)"
        );
        assert_eq!(
            message("std = 1"),
            "invalid type: integer `1`, expected a string (at `1`)"
        );
    }
}

#[test]
fn a_std_pool_is_refused_by_the_variants_that_never_divide() {
    for (name, why) in [
        ("grpo-mean", "this variant only centres"),
        ("drmas-mean", "this variant only centres"),
        ("rloo", "rloo scales by N/(N-1)"),
    ] {
        assert_eq!(
            factory(name)("mean = \"agent\"\nstd = \"batch\""),
            format!(
                "std = \"batch\" is refused: {why} and never divides by a std, so `std` may only be \
                 \"preset\" or \"none\" here; to divide by the std of that pool use norms/grpo, \
                 norms/drmas or norms/at-grpo"
            ),
            "norms/{name}"
        );
    }
    // What they do is accepted, said out loud or not.
    let spec = drmas_norms::plugin();
    for e in &spec.entries {
        let drmas_plugin_api::ComponentFactory::Normalizer(make) = &e.factory else {
            panic!()
        };
        for text in [
            "std = \"none\"",
            "std = \"preset\"\nmean = \"preset\"",
            "mean = \"batch\"",
        ] {
            assert!(make(text).is_ok(), "norms/{} refused {text}", e.name);
        }
    }
}
