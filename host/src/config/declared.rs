//! Checks against what components declare about themselves: the keys of their config
//! table (`ComponentInfo::config`) and the tools agents call against the tools the
//! environment offers. Both fail at `drmas check` with a position instead of in the
//! first episode.

use super::{
    error::ConfigError,
    experiment::{Experiment, config_text},
    source::KeyPath,
};
use crate::plugin::{Registry, ResolvePolicy};
use drmas_plugin_api::{ComponentKind, ConfigKey};

/// The keys of `table` that component `name` does not describe (each at its key, with
/// the known keys and a close match), and the required keys it lacks (at the table, or
/// at `component` when there is no table). Nothing when the component does not
/// describe its keys or does not resolve (resolution is reported by the caller).
pub fn config_key_errors(
    exp: &Experiment,
    registry: &Registry,
    policy: &ResolvePolicy,
    here: &KeyPath,
    kind: ComponentKind,
    name: &str,
    table: &Option<toml::Table>,
) -> Vec<ConfigError> {
    let Ok((_, info)) = registry.resolve(kind, name, policy) else {
        return Vec::new();
    };
    let Some(keys) = &info.config else {
        return Vec::new();
    };
    let known: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
    let mut errors = Vec::new();
    // A description whose default its own type refuses is the plugin's defect: the
    // key's documentation would show a value the component cannot parse.
    for key in keys {
        if let Err(e) = drmas_plugin_api::check_config_key(name, key) {
            errors.push(exp.error_at(&here.key("component"), e.message().to_string()));
        }
    }
    let given: Vec<&String> = table.iter().flat_map(|t| t.keys()).collect();
    for key in &given {
        if let Some(described) = keys.iter().find(|k| k.name == **key) {
            let value = &table.as_ref().expect("a given key has a table")[key.as_str()];
            if let Some(problem) = type_problem(&described.ty, value) {
                errors.push(exp.error_at(
                    &here.key("config").key(key),
                    format!("{name} config key `{key}` takes {problem}"),
                ));
            }
            continue;
        }
        let hint = closest(key, &known)
            .map(|k| format!("did you mean `{k}`? "))
            .unwrap_or_default();
        let message = if known.is_empty() {
            format!("{name} has no config key `{key}` (it takes no config keys)")
        } else {
            format!(
                "{name} has no config key `{key}` ({hint}its keys: {})",
                known.join(", ")
            )
        };
        errors.push(exp.error_at_key(&here.key("config").key(key), message));
    }
    let at = if table.is_some() {
        here.key("config")
    } else {
        here.key("component")
    };
    for ConfigKey {
        name: key, ty, doc, ..
    } in keys.iter().filter(|k| k.default.is_none())
    {
        if !given.iter().any(|g| g.as_str() == key) {
            errors.push(exp.error_at(
                &at,
                format!("{name} requires config key `{key}` ({ty}: {doc})"),
            ));
        }
    }
    errors
}

/// Every tool an agent's config names must be offered by the environment; an agent that
/// names tools needs an `[environment]` at all. Components that fail to create are
/// skipped: their errors were reported already.
pub fn tool_errors(
    exp: &Experiment,
    registry: &Registry,
    policy: &ResolvePolicy,
) -> Vec<ConfigError> {
    let f = &exp.file;
    let root = KeyPath::root();
    // `Some(None)`: there is no [environment]; `Some(Some(..))`: its name and tools;
    // `None`: it did not create or list its tools (its creation error is reported).
    let offered: Option<Option<(String, Vec<String>)>> = match &f.environment {
        None => Some(None),
        Some(env) => registry
            .create_environment(&env.component, &config_text(&env.config), policy)
            .ok()
            .and_then(|h| h.tools().ok())
            .map(|tools| {
                Some((
                    env.component.clone(),
                    tools.into_iter().map(|t| t.name).collect(),
                ))
            }),
    };
    let Some(offered) = offered else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    for (i, a) in f.agents.iter().enumerate() {
        let Ok(agent) = registry.create_agent(&a.component, &config_text(&a.config), policy) else {
            continue;
        };
        let here = root.key("agents").index(i);
        let at = if a.config.is_some() {
            here.key("config")
        } else {
            here.key("component")
        };
        for tool in agent.tools_used() {
            let problem = match &offered {
                None => format!(
                    "{} calls tool `{tool}`, but the experiment has no [environment] to offer it",
                    a.component
                ),
                Some((env, tools)) if !tools.contains(&tool) => format!(
                    "{} calls tool `{tool}`, which environment {env} does not offer ({})",
                    a.component,
                    if tools.is_empty() {
                        "it offers no tools".to_string()
                    } else {
                        format!("it offers: {}", tools.join(", "))
                    }
                ),
                Some(_) => continue,
            };
            errors.push(exp.error_at(&at, problem));
        }
    }
    errors
}

/// What is wrong with `value` for a key described as of TOML type `ty` (the plugin API's
/// vocabulary, [`drmas_plugin_api::config_value_fits`]): `None` when it fits, or when
/// `ty` is free text (then the component's own parser is the judge).
fn type_problem(ty: &str, value: &toml::Value) -> Option<String> {
    if drmas_plugin_api::config_value_fits(ty, value) != Some(false) {
        return None;
    }
    let article = if ty.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    Some(format!(
        "{article} {ty}, got {} `{value}`",
        value.type_str()
    ))
}

/// The known name closest to `key` when it is close enough to be a typo: at most a
/// third of its letters differ.
fn closest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, k)| *d > 0 && *d * 3 <= k.chars().count().max(key.chars().count()))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut row = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            row[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(row[j] + 1);
        }
        prev = row;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("epsilom", "epsilon"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn close_matches_only() {
        let known = ["epsilon", "singleton"];
        assert_eq!(closest("epsilom", &known), Some("epsilon"));
        assert_eq!(closest("singelton", &known), Some("singleton"));
        assert_eq!(closest("temperature", &known), None);
        assert_eq!(closest("epsilon", &known), None);
    }
}
