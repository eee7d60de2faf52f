//! What a plugin author writes: a [`PluginSpec`] listing the plugin's components and
//! how to build each from its configuration text.

use crate::{
    data::{ComponentInfo, ComponentKind, Manifest},
    error::{PluginError, PluginResult},
    traits::{Agent, Environment, Normalizer, Reward},
};
use abi_stable::std_types::RVec;

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
            factory,
        });
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

    /// The agents the agent `name`, built from `config`, names
    /// ([`Agent::linked_agents`]).
    pub fn agent_links(&self, name: &str, config: &str) -> PluginResult<Vec<String>> {
        match self.entry(ComponentKind::Agent, name).map(|e| &e.factory) {
            Some(ComponentFactory::Agent(make)) => Ok(make(config)?.linked_agents()),
            _ => Err(PluginError::not_found(format!(
                "plugin `{}` has no agent named `{name}`",
                self.name
            ))),
        }
    }

    pub fn manifest(&self) -> Manifest {
        Manifest {
            plugin: self.name.as_str().into(),
            version: self.version.as_str().into(),
            api_version: crate::API_VERSION.into(),
            components: self
                .entries
                .iter()
                .map(|e| ComponentInfo {
                    kind: e.factory.kind(),
                    name: e.name.as_str().into(),
                    summary: e.summary.as_str().into(),
                })
                .collect::<RVec<_>>(),
        }
    }
}

/// A plugin crate linked into the host as an `rlib` registers itself with this
/// (through [`crate::register_builtin!`]).
pub struct BuiltinPlugin {
    pub spec: fn() -> PluginSpec,
}

inventory::collect!(BuiltinPlugin);
