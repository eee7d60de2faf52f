//! What a plugin author writes: a [`PluginSpec`] listing the plugin's components and
//! how to build each from its configuration text.

use crate::{
    data::{ComponentInfo, ComponentKind, ConfigKey, Manifest},
    error::{PluginError, PluginResult},
    kit::ConfigTable,
    parse_config,
    traits::{Agent, Environment, Normalizer, Reward},
};

type Factory<T> = Box<dyn Fn(&str) -> PluginResult<Box<T>> + Send + Sync>;

/// How to build one component from its configuration text.
pub enum ComponentFactory {
    Agent(Factory<dyn Agent>),
    Environment(Factory<dyn Environment>),
    Reward(Factory<dyn Reward>),
    Normalizer(Factory<dyn Normalizer>),
}

impl ComponentFactory {
    pub fn kind(&self) -> ComponentKind {
        match self {
            ComponentFactory::Agent(_) => ComponentKind::Agent,
            ComponentFactory::Environment(_) => ComponentKind::Environment,
            ComponentFactory::Reward(_) => ComponentKind::Reward,
            ComponentFactory::Normalizer(_) => ComponentKind::Normalizer,
        }
    }
}

/// One component in a [`PluginSpec`].
pub struct SpecEntry {
    pub name: String,
    pub summary: String,
    /// The keys of the component's config table ([`PluginSpec::config_keys`]); `None`
    /// when not described.
    pub config: Option<Vec<ConfigKey>>,
    pub factory: ComponentFactory,
}

/// A plugin: its name (the namespace of its components), its own semver, and its
/// components.
pub struct PluginSpec {
    pub name: String,
    pub version: String,
    pub entries: Vec<SpecEntry>,
}

impl PluginSpec {
    /// `version` is the plugin's own semver; pass `env!("CARGO_PKG_VERSION")`.
    pub fn new(name: &str, version: &str) -> Self {
        Self {
            name: name.to_string(),
            version: version.to_string(),
            entries: Vec::new(),
        }
    }

    fn with(mut self, name: &str, summary: &str, factory: ComponentFactory) -> Self {
        self.entries.push(SpecEntry {
            name: name.to_string(),
            summary: summary.to_string(),
            config: None,
            factory,
        });
        self
    }

    /// Describes the config keys of the component added last: `drmas plugins inspect`
    /// prints them and `drmas check` refuses a key in the experiment that is not among
    /// them. `config_keys([])` says the component takes no keys at all. A component
    /// without a description accepts whatever its own parser does.
    ///
    /// ```
    /// use drmas_plugin_api::{
    ///     Action, Agent, ConfigKey, EpisodeView, Message, Parsed, PluginResult, PluginSpec,
    /// };
    /// # struct Player;
    /// # impl Player {
    /// #     fn from_config(_: &str) -> PluginResult<Self> { Ok(Player) }
    /// # }
    /// # impl Agent for Player {
    /// #     fn render(&self, _: &EpisodeView) -> PluginResult<Vec<Message>> { Ok(vec![]) }
    /// #     fn parse(&self, _: &EpisodeView, _: &str) -> PluginResult<Parsed> {
    /// #         Ok(Parsed::valid(Action::finish("")))
    /// #     }
    /// # }
    ///
    /// let spec = PluginSpec::new("countdown", "1.0.0")
    ///     .agent("player", "plays Countdown", Player::from_config)
    ///     .config_keys([ConfigKey::optional("max_calls", "integer", "4", "calculator calls allowed")]);
    /// assert_eq!(spec.entries[0].config.as_ref().unwrap()[0].name, "max_calls");
    /// ```
    ///
    /// Keys written by hand can disagree with what `make` parses; a table declared with
    /// [`config_table!`](crate::config_table) and added with [`PluginSpec::agent_with`]
    /// (and the other `*_with` methods) cannot.
    pub fn config_keys(mut self, keys: impl IntoIterator<Item = ConfigKey>) -> Self {
        match self.entries.last_mut() {
            Some(entry) => entry.config.get_or_insert_with(Vec::new).extend(keys),
            None => panic!("config_keys() describes the component added before it; add one first"),
        }
        self
    }

    /// Adds an agent built by `make` from the TOML text of its `config` table.
    pub fn agent<T, F>(self, name: &str, summary: &str, make: F) -> Self
    where
        T: Agent + 'static,
        F: Fn(&str) -> PluginResult<T> + Send + Sync + 'static,
    {
        let factory = Box::new(move |cfg: &str| make(cfg).map(|c| Box::new(c) as Box<dyn Agent>));
        self.with(name, summary, ComponentFactory::Agent(factory))
    }

    /// Adds an environment built by `make` from the TOML text of its `config` table.
    pub fn environment<T, F>(self, name: &str, summary: &str, make: F) -> Self
    where
        T: Environment + 'static,
        F: Fn(&str) -> PluginResult<T> + Send + Sync + 'static,
    {
        let factory =
            Box::new(move |cfg: &str| make(cfg).map(|c| Box::new(c) as Box<dyn Environment>));
        self.with(name, summary, ComponentFactory::Environment(factory))
    }

    /// Adds a reward built by `make` from the TOML text of its `config` table.
    pub fn reward<T, F>(self, name: &str, summary: &str, make: F) -> Self
    where
        T: Reward + 'static,
        F: Fn(&str) -> PluginResult<T> + Send + Sync + 'static,
    {
        let factory = Box::new(move |cfg: &str| make(cfg).map(|c| Box::new(c) as Box<dyn Reward>));
        self.with(name, summary, ComponentFactory::Reward(factory))
    }

    /// Adds an advantage normalizer built by `make` from the TOML text of its `config` table.
    pub fn normalizer<T, F>(self, name: &str, summary: &str, make: F) -> Self
    where
        T: Normalizer + 'static,
        F: Fn(&str) -> PluginResult<T> + Send + Sync + 'static,
    {
        let factory =
            Box::new(move |cfg: &str| make(cfg).map(|c| Box::new(c) as Box<dyn Normalizer>));
        self.with(name, summary, ComponentFactory::Normalizer(factory))
    }

    /// Adds an agent built by `make` from its parsed config table `C`, and describes
    /// the keys of `C` (as [`PluginSpec::config_keys`] would): what `drmas check`
    /// checks is what `make` receives.
    ///
    /// ```
    /// use drmas_plugin_api::{config_table, kit::ConfigTable, PluginSpec};
    /// # use drmas_plugin_api::{Action, Agent, EpisodeView, Message, Parsed, PluginResult};
    /// # struct Echo { prefix: String }
    /// # impl Agent for Echo {
    /// #     fn render(&self, _: &EpisodeView) -> PluginResult<Vec<Message>> { Ok(vec![]) }
    /// #     fn parse(&self, _: &EpisodeView, c: &str) -> PluginResult<Parsed> {
    /// #         Ok(Parsed::valid(Action::finish(format!("{}{c}", self.prefix))))
    /// #     }
    /// # }
    ///
    /// config_table! {
    ///     pub struct EchoConfig {
    ///         /// put before every answer
    ///         pub prefix: String = String::new(),
    ///     }
    /// }
    ///
    /// let spec = PluginSpec::new("acme", "1.0.0")
    ///     .agent_with("echo", "answers with its completion", |c: EchoConfig| {
    ///         Ok(Echo { prefix: c.prefix })
    ///     });
    /// assert_eq!(spec.entries[0].config, Some(EchoConfig::config_keys()));
    /// ```
    pub fn agent_with<C, T, F>(self, name: &str, summary: &str, make: F) -> Self
    where
        C: ConfigTable,
        T: Agent + 'static,
        F: Fn(C) -> PluginResult<T> + Send + Sync + 'static,
    {
        self.agent(name, summary, move |cfg| make(parse_config(cfg)?))
            .config_keys(C::config_keys())
    }

    /// Adds an environment built by `make` from its parsed config table `C`, and
    /// describes the keys of `C` (see [`PluginSpec::agent_with`]).
    pub fn environment_with<C, T, F>(self, name: &str, summary: &str, make: F) -> Self
    where
        C: ConfigTable,
        T: Environment + 'static,
        F: Fn(C) -> PluginResult<T> + Send + Sync + 'static,
    {
        self.environment(name, summary, move |cfg| make(parse_config(cfg)?))
            .config_keys(C::config_keys())
    }

    /// Adds a reward built by `make` from its parsed config table `C`, and describes
    /// the keys of `C` (see [`PluginSpec::agent_with`]).
    pub fn reward_with<C, T, F>(self, name: &str, summary: &str, make: F) -> Self
    where
        C: ConfigTable,
        T: Reward + 'static,
        F: Fn(C) -> PluginResult<T> + Send + Sync + 'static,
    {
        self.reward(name, summary, move |cfg| make(parse_config(cfg)?))
            .config_keys(C::config_keys())
    }

    /// Adds an advantage normalizer built by `make` from its parsed config table `C`,
    /// and describes the keys of `C` (see [`PluginSpec::agent_with`]).
    pub fn normalizer_with<C, T, F>(self, name: &str, summary: &str, make: F) -> Self
    where
        C: ConfigTable,
        T: Normalizer + 'static,
        F: Fn(C) -> PluginResult<T> + Send + Sync + 'static,
    {
        self.normalizer(name, summary, move |cfg| make(parse_config(cfg)?))
            .config_keys(C::config_keys())
    }

    /// The entry for `kind` and `name`, if the plugin has one.
    pub fn entry(&self, kind: ComponentKind, name: &str) -> Option<&SpecEntry> {
        self.entries
            .iter()
            .find(|e| e.factory.kind() == kind && e.name == name)
    }

    pub fn manifest(&self) -> Manifest {
        Manifest {
            plugin: self.name.clone(),
            version: self.version.clone(),
            api_version: crate::API_VERSION.to_string(),
            components: self
                .entries
                .iter()
                .map(|e| ComponentInfo {
                    kind: e.factory.kind(),
                    name: e.name.clone(),
                    summary: e.summary.clone(),
                    config: e.config.clone(),
                })
                .collect(),
        }
    }
}

/// Refuses a described config key whose default is not TOML of its declared type: a
/// default that is no TOML value at all (`none`, an unquoted word), or a value of
/// another type (`"six"` for an `integer`). The error names the component (as given,
/// e.g. `acme/direct`), the key, the declared type and the default.
///
/// Types are read as [`ConfigKey::ty`] documents them: `string`, `integer`, `float`
/// (an integer default is accepted, as the parsers accept one), `boolean`,
/// `datetime`, `table …`, `array …` and `array of Xs` (every element an X), and
/// alternatives joined by ` or `. A type outside these words cannot be judged: its
/// default need only be TOML. A required key (no default) is always accepted. Keys
/// derived with [`config_table!`](crate::config_table) pass by construction.
///
/// ```
/// use drmas_plugin_api::{check_config_key, ConfigKey};
///
/// assert!(check_config_key("acme/game", &ConfigKey::optional("max_calls", "integer", "4", "")).is_ok());
/// let err = check_config_key("acme/game", &ConfigKey::optional("max_calls", "integer", "\"six\"", ""))
///     .unwrap_err();
/// assert_eq!(
///     err.message(),
///     "`acme/game` describes config key `max_calls` as integer, but its default `\"six\"` is a string"
/// );
/// ```
pub fn check_config_key(component: &str, key: &ConfigKey) -> PluginResult<()> {
    let Some(default) = &key.default else {
        return Ok(());
    };
    let refuse = |problem: String| {
        Err(PluginError::config(format!(
            "`{component}` describes config key `{}` as {}, but its default `{default}` {problem}",
            key.name, key.ty
        )))
    };
    let value: toml::Value = match default.trim().parse() {
        Ok(value) => value,
        Err(e) => {
            let e: toml::de::Error = e;
            let hint =
                if config_value_fits(&key.ty, &toml::Value::String(String::new())) == Some(true) {
                    format!("; a string is written in quotes: {:?}", default.trim())
                } else {
                    String::new()
                };
            return refuse(format!("is not a TOML value ({}){hint}", e.message()));
        }
    };
    match config_value_fits(&key.ty, &value) {
        Some(false) => match (&value, mismatched_element(&key.ty, &value)) {
            (toml::Value::Array(_), Some(item)) => refuse(format!("holds {}", what(item))),
            _ => refuse(format!("is {}", what(&value))),
        },
        Some(true) | None => Ok(()),
    }
}

/// [`check_config_key`] for every described key of every component of `manifest`,
/// each named `plugin/component`; the first bad key is the error.
pub fn check_manifest_config_keys(manifest: &Manifest) -> PluginResult<()> {
    for component in &manifest.components {
        let name = format!("{}/{}", manifest.plugin, component.name);
        for key in component.config.iter().flatten() {
            check_config_key(&name, key)?;
        }
    }
    Ok(())
}

/// Whether `value` has the described type `ty` (the vocabulary of
/// [`check_config_key`]); `None` when `ty` is free text this cannot judge. The host
/// checks an experiment's config values with it, so a value of the wrong type is
/// reported at its key before the component parses the table.
///
/// ```
/// use drmas_plugin_api::config_value_fits;
///
/// assert_eq!(config_value_fits("float", &toml::Value::Integer(1)), Some(true));
/// assert_eq!(config_value_fits("array of strings", &toml::Value::Array(vec![1.into()])), Some(false));
/// assert_eq!(config_value_fits("the tool it calls", &toml::Value::Integer(1)), None);
/// ```
pub fn config_value_fits(ty: &str, value: &toml::Value) -> Option<bool> {
    let ty = ty.trim();
    if ty.contains(" or ") {
        let verdicts: Vec<Option<bool>> = ty
            .split(" or ")
            .map(|t| config_value_fits(t, value))
            .collect();
        return if verdicts.contains(&Some(true)) {
            Some(true)
        } else if verdicts.contains(&None) {
            None
        } else {
            Some(false)
        };
    }
    let (word, rest) = ty.split_once(' ').unwrap_or((ty, ""));
    use toml::Value as V;
    Some(match (word, value) {
        ("string", V::String(_))
        | ("integer", V::Integer(_))
        | ("float", V::Float(_) | V::Integer(_))
        | ("boolean", V::Boolean(_))
        | ("datetime", V::Datetime(_))
        | ("table", V::Table(_)) => true,
        ("array", V::Array(items)) => match element_type(rest) {
            Some(element) => items
                .iter()
                .all(|item| config_value_fits(&element, item) != Some(false)),
            None => true,
        },
        ("string" | "integer" | "float" | "boolean" | "datetime" | "table" | "array", _) => false,
        _ => return None,
    })
}

/// `string` for the rest `of strings` of `array of strings`.
fn element_type(rest: &str) -> Option<String> {
    let plural = rest.strip_prefix("of ")?;
    let (word, tail) = plural.split_once(' ').unwrap_or((plural, ""));
    let word = word.strip_suffix('s').unwrap_or(word);
    Some(format!("{word} {tail}").trim_end().to_string())
}

/// The first element of an array default that its `array of Xs` type refuses.
fn mismatched_element<'v>(ty: &str, value: &'v toml::Value) -> Option<&'v toml::Value> {
    let (_, rest) = ty.trim().split_once(' ')?;
    let element = element_type(rest)?;
    match value {
        toml::Value::Array(items) => items
            .iter()
            .find(|item| config_value_fits(&element, item) == Some(false)),
        _ => None,
    }
}

/// `a string`, `an integer`, ...: what a TOML value is, for messages.
fn what(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a datetime",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// A plugin crate linked into the host as an `rlib` registers itself with this
/// (through [`crate::register_builtin!`]).
pub struct BuiltinPlugin {
    pub spec: fn() -> PluginSpec,
}

inventory::collect!(BuiltinPlugin);

#[cfg(test)]
mod tests {
    use super::*;

    fn check(ty: &str, default: &str) -> Result<(), String> {
        check_config_key("acme/x", &ConfigKey::optional("k", ty, default, "doc"))
            .map_err(|e| e.message)
    }

    #[test]
    fn defaults_of_their_declared_type_pass() {
        for (ty, default) in [
            ("string", "\"none\""),
            ("string", "'literal'"),
            ("integer", "-4"),
            ("float", "1e-6"),
            ("float", "2"),
            ("float", "nan"),
            ("boolean", "false"),
            ("datetime", "1979-05-27"),
            ("array of strings", "[\"a\", 'b']"),
            ("array of strings", "[]"),
            (
                "array of tables {question, answer}",
                "[{ question = \"q\", answer = \"a\" }]",
            ),
            ("array of arrays of integers", "[[1], []]"),
            ("array", "[1, \"a\"]"),
            ("table", "{}"),
            ("table {index, url}", "{ index = \"d\" }"),
            ("string or integer", "3"),
            (" integer ", " 4 "),
            // Outside the vocabulary: only TOML is required.
            ("duration", "\"5s\""),
        ] {
            assert_eq!(check(ty, default), Ok(()), "{ty} = {default}");
        }
        assert!(check_config_key("acme/x", &ConfigKey::required("k", "integer", "doc")).is_ok());
    }

    #[test]
    fn a_default_of_another_type_is_refused_naming_everything() {
        let cases = [
            ("integer", "\"six\"", "is a string"),
            ("integer", "4.5", "is a float"),
            ("string", "4", "is an integer"),
            ("boolean", "\"true\"", "is a string"),
            ("float", "true", "is a boolean"),
            ("table", "[]", "is an array"),
            ("array of strings", "\"a\"", "is a string"),
            ("array of strings", "[\"a\", 1]", "holds an integer"),
            ("array of tables {q}", "[{}, 2]", "holds an integer"),
            ("string or integer", "true", "is a boolean"),
            ("datetime", "{}", "is a table"),
        ];
        for (ty, default, problem) in cases {
            assert_eq!(
                check(ty, default),
                Err(format!(
                    "`acme/x` describes config key `k` as {ty}, but its default `{default}` {problem}"
                )),
            );
        }
    }

    #[test]
    fn a_default_that_is_not_toml_is_refused_with_a_hint_for_strings() {
        assert_eq!(
            check("string", "none"),
            Err("`acme/x` describes config key `k` as string, but its default `none` is not a \
                 TOML value (invalid float, expected `nan`); a string is written in quotes: \"none\""
                .to_string())
        );
        assert_eq!(
            check("integer", "six"),
            Err(
                "`acme/x` describes config key `k` as integer, but its default `six` is not a \
                 TOML value (string values must be quoted, expected literal string)"
                    .to_string()
            )
        );
        assert_eq!(
            check("path", ""),
            Err(
                "`acme/x` describes config key `k` as path, but its default `` is not a TOML \
                 value (string values must be quoted, expected literal string)"
                    .to_string()
            )
        );
    }

    #[test]
    fn a_manifest_is_checked_key_by_key_with_plugin_and_component() {
        let spec = PluginSpec::new("acme", "1.0.0")
            .reward("ok", "", |_| Ok(Fixed))
            .config_keys([ConfigKey::optional("a", "integer", "1", "")])
            .reward("bad", "", |_| Ok(Fixed))
            .config_keys([
                ConfigKey::optional("b", "string", "\"x\"", ""),
                ConfigKey::optional("c", "integer", "1.5", ""),
            ]);
        let err = check_manifest_config_keys(&spec.manifest()).unwrap_err();
        assert_eq!(
            err.message(),
            "`acme/bad` describes config key `c` as integer, but its default `1.5` is a float"
        );
        let good = PluginSpec::new("acme", "1.0.0").reward("ok", "", |_| Ok(Fixed));
        assert!(check_manifest_config_keys(&good.manifest()).is_ok());
    }

    struct Fixed;
    impl Reward for Fixed {
        fn score(&self, _: &crate::EpisodeRecord) -> PluginResult<f32> {
            Ok(1.0)
        }
    }

    #[test]
    fn the_with_methods_parse_the_table_they_describe() {
        crate::config_table! {
            struct Scaled {
                /// the score
                score: f32 = 0.5,
            }
        }
        struct Score(f32);
        impl Reward for Score {
            fn score(&self, _: &crate::EpisodeRecord) -> PluginResult<f32> {
                Ok(self.0)
            }
        }
        let spec = PluginSpec::new("acme", "1.0.0")
            .reward_with("score", "", |c: Scaled| Ok(Score(c.score)));
        let entry = spec.entry(ComponentKind::Reward, "score").unwrap();
        assert_eq!(
            entry.config,
            Some(vec![ConfigKey::optional(
                "score",
                "float",
                "0.5",
                "the score"
            )])
        );
        let ComponentFactory::Reward(make) = &entry.factory else {
            panic!("not a reward")
        };
        let record = crate::EpisodeRecord::default();
        assert_eq!(make("").unwrap().score(&record).unwrap(), 0.5);
        assert_eq!(make("score = 2.0").unwrap().score(&record).unwrap(), 2.0);
        let err = make("scor = 2.0").err().unwrap();
        assert_eq!(
            err.message(),
            "unknown field `scor`, expected `score` (at `scor`)"
        );
    }
}
