//! What a plugin author writes: a [`PluginSpec`] listing the plugin's components and
//! how to build each from its configuration text.

use crate::{
    data::{ComponentInfo, ComponentKind, ConfigKey, Manifest},
    error::PluginResult,
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
    /// ```ignore
    /// spec.agent("player", "plays Countdown", Player::from_config)
    ///     .config_keys([ConfigKey::optional("max_calls", "integer", "4", "calculator calls allowed")])
    /// ```
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

/// A plugin crate linked into the host as an `rlib` registers itself with this
/// (through [`crate::register_builtin!`]).
pub struct BuiltinPlugin {
    pub spec: fn() -> PluginSpec,
}

inventory::collect!(BuiltinPlugin);
