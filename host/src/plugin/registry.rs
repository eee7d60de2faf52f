//! One registry for built-in and dynamic plugins. Components are named
//! `plugin/component`; resolution applies the experiment's version requirements and
//! overrides, and creation hands back the same checked handles for both origins.

use super::{
    checked::{AgentHandle, ComponentId, EnvironmentHandle, NormalizerHandle, RewardHandle},
    discovery::find_plugin_files,
    dynamic::{DynamicPlugin, load_plugin_bytes},
    error::{LoadError, ResolveError},
    foreign::Foreign,
    trust::{TrustPolicy, check_file, check_folder, current_uid},
};
use abi_stable::std_types::RStr;
use drmas_plugin_api::{
    Agent, BuiltinPlugin, ComponentFactory, ComponentInfo, ComponentKind, Environment, Normalizer,
    PluginError, PluginSpec, Reward, error::guard, ffi::decode_error,
};
use semver::{Version, VersionReq};
use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    path::{Path, PathBuf},
};

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Builtin,
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Builtin => f.write_str("built-in"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// What creates a plugin's components: its spec linked into this binary, or the
/// loaded library.
enum Factory {
    Builtin(PluginSpec),
    Dynamic(DynamicPlugin),
}

/// A plugin the registry knows.
pub struct PluginRecord {
    pub name: String,
    pub version: Version,
    pub source: Source,
    pub components: Vec<ComponentInfo>,
    factory: Factory,
}

impl PluginRecord {
    fn from_spec(spec: PluginSpec) -> Self {
        let manifest = spec.manifest();
        Self {
            name: spec.name.clone(),
            // A built-in with a malformed version is a bug in this repository; the
            // registry test catches it.
            version: Version::parse(&spec.version).unwrap_or(Version::new(0, 0, 0)),
            source: Source::Builtin,
            components: manifest.components,
            factory: Factory::Builtin(spec),
        }
    }

    fn from_dynamic(plugin: DynamicPlugin) -> Self {
        let m = &plugin.manifest;
        Self {
            name: m.plugin.clone(),
            version: Version::parse(&m.version).expect("validated at load"),
            source: Source::File(plugin.path.clone()),
            components: m.components.clone(),
            factory: Factory::Dynamic(plugin),
        }
    }

    pub fn component(&self, kind: ComponentKind, name: &str) -> Option<&ComponentInfo> {
        self.components
            .iter()
            .find(|c| c.kind == kind && c.name.as_str() == name)
    }
}

/// A file (or folder) that was skipped, and why.
pub type LoadFailure = LoadError;

/// What an experiment says about choosing between plugins.
#[derive(Debug, Clone, Default)]
pub struct ResolvePolicy {
    /// Plugin name → required version range.
    pub require: BTreeMap<String, VersionReq>,
    /// Plugins whose dynamic file may replace the built-in of the same name.
    pub overrides: BTreeSet<String>,
}

enum Created {
    Agent(Box<dyn Agent>),
    Environment(Box<dyn Environment>),
    Reward(Box<dyn Reward>),
    Normalizer(Box<dyn Normalizer>),
}

#[derive(Default)]
pub struct Registry {
    plugins: Vec<PluginRecord>,
    failures: Vec<LoadFailure>,
    /// Every `*.so` found in the plugin folders, loaded or not.
    files: Vec<PathBuf>,
}

impl Registry {
    /// The plugins linked into this binary.
    pub fn builtin() -> Self {
        let mut plugins: Vec<PluginRecord> = inventory::iter::<BuiltinPlugin>()
            .map(|b| PluginRecord::from_spec((b.spec)()))
            .collect();
        plugins.sort_by(|a, b| a.name.cmp(&b.name));
        Self {
            plugins,
            ..Self::default()
        }
    }

    /// The built-ins plus `specs` as further built-in plugins: components a test (or a
    /// program embedding drmas) defines in-process.
    pub fn with_specs(specs: impl IntoIterator<Item = PluginSpec>) -> Self {
        let mut registry = Self::builtin();
        registry
            .plugins
            .extend(specs.into_iter().map(PluginRecord::from_spec));
        registry.plugins.sort_by(|a, b| a.name.cmp(&b.name));
        registry
    }

    /// Built-ins plus every `*.so` in `dirs` that `policy` lets through (see
    /// [`super::trust`]): a folder or file is judged before anything in it is opened.
    /// Refused and broken files are skipped and remembered, silently: the caller reports
    /// each once, and they become hard errors if an experiment needs them.
    pub fn discover(dirs: &[PathBuf], policy: &TrustPolicy) -> Self {
        let mut registry = Self::builtin();
        let me = current_uid();
        for folder in find_plugin_files(dirs) {
            registry.files.extend(folder.files.iter().cloned());
            if let Err(e) = check_folder(&folder.dir, policy, me) {
                registry.failures.push(e);
                continue;
            }
            for file in &folder.files {
                // What was checked is what gets loaded: the bytes of one read.
                match check_file(file, policy, me) {
                    Ok(bytes) => registry.add_file(file, &bytes),
                    Err(e) => registry.failures.push(e),
                }
            }
        }
        registry
    }

    /// Loads one file whose `bytes` passed the trust checks.
    fn add_file(&mut self, path: &Path, bytes: &[u8]) {
        match load_plugin_bytes(path, bytes) {
            Ok(plugin) => self.plugins.push(PluginRecord::from_dynamic(plugin)),
            Err(e) => self.failures.push(e),
        }
    }

    pub fn plugins(&self) -> &[PluginRecord] {
        &self.plugins
    }

    pub fn failures(&self) -> &[LoadFailure] {
        &self.failures
    }

    /// Every `*.so` file found in the plugin folders, loaded, refused or broken.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Plugin names provided by more than one source, with those sources.
    pub fn duplicates(&self) -> Vec<(String, Vec<String>)> {
        let mut by_name: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for p in &self.plugins {
            by_name
                .entry(&p.name)
                .or_default()
                .push(p.source.to_string());
        }
        by_name
            .into_iter()
            .filter(|(_, s)| s.len() > 1)
            .map(|(n, s)| (n.to_string(), s))
            .collect()
    }

    /// The one plugin called `name` under `policy`.
    pub fn plugin(
        &self,
        name: &str,
        policy: &ResolvePolicy,
    ) -> Result<&PluginRecord, ResolveError> {
        let mut candidates: Vec<&PluginRecord> =
            self.plugins.iter().filter(|p| p.name == name).collect();
        if candidates.is_empty() {
            return Err(self.unknown_plugin(name));
        }
        if candidates.len() > 1 && policy.overrides.contains(name) {
            candidates.retain(|p| p.source != Source::Builtin);
        }
        if candidates.len() > 1 {
            let has_builtin = candidates.iter().any(|p| p.source == Source::Builtin);
            let hint = if has_builtin {
                format!(
                    ", or set `override = [\"{name}\"]` in [plugins] to let the file replace the built-in"
                )
            } else {
                String::new()
            };
            return Err(ResolveError::Duplicate {
                plugin: name.to_string(),
                sources: candidates
                    .iter()
                    .map(|p| p.source.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                hint,
            });
        }
        let plugin = candidates[0];
        if let Some(req) = policy.require.get(name)
            && !req.matches(&plugin.version)
        {
            return Err(ResolveError::Version {
                plugin: name.to_string(),
                found: plugin.version.to_string(),
                required: req.to_string(),
            });
        }
        Ok(plugin)
    }

    fn unknown_plugin(&self, name: &str) -> ResolveError {
        let loaded: Vec<&str> = self
            .plugins
            .iter()
            .map(|p| p.name.as_str())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let failures = if self.failures.is_empty() {
            String::new()
        } else {
            let lines: Vec<String> = self.failures.iter().map(|f| format!("\n  - {f}")).collect();
            format!("; these plugin files failed to load:{}", lines.concat())
        };
        ResolveError::UnknownPlugin {
            plugin: name.to_string(),
            loaded: if loaded.is_empty() {
                "none".into()
            } else {
                loaded.join(", ")
            },
            failures,
        }
    }

    /// Checks that `full_name` resolves to a component of `kind` without creating it.
    pub fn resolve(
        &self,
        kind: ComponentKind,
        full_name: &str,
        policy: &ResolvePolicy,
    ) -> Result<(&PluginRecord, &ComponentInfo), ResolveError> {
        let (plugin_name, component) = split_name(full_name)?;
        let plugin = self.plugin(plugin_name, policy)?;
        let info = plugin.component(kind, component).ok_or_else(|| {
            let available: Vec<&str> = plugin
                .components
                .iter()
                .filter(|c| c.kind == kind)
                .map(|c| c.name.as_str())
                .collect();
            ResolveError::UnknownComponent {
                plugin: plugin.name.clone(),
                version: plugin.version.to_string(),
                kind: kind.to_string(),
                component: component.to_string(),
                available: if available.is_empty() {
                    "none".into()
                } else {
                    available.join(", ")
                },
            }
        })?;
        Ok((plugin, info))
    }

    fn create(
        &self,
        kind: ComponentKind,
        full_name: &str,
        config: &str,
        policy: &ResolvePolicy,
    ) -> Result<(ComponentId, Created), ResolveError> {
        let (plugin, info) = self.resolve(kind, full_name, policy)?;
        let id = ComponentId {
            kind,
            name: full_name.to_string(),
            version: plugin.version.to_string(),
            source: plugin.source.to_string(),
        };
        let refused = |e: PluginError| ResolveError::Create {
            kind: kind.to_string(),
            component: full_name.to_string(),
            message: e.to_string(),
        };
        let created = match &plugin.factory {
            Factory::Builtin(spec) => {
                let entry = spec
                    .entry(kind, info.name.as_str())
                    .expect("resolved above");
                guard(|| {
                    Ok(match &entry.factory {
                        ComponentFactory::Agent(make) => Created::Agent(make(config)?),
                        ComponentFactory::Environment(make) => Created::Environment(make(config)?),
                        ComponentFactory::Reward(make) => Created::Reward(make(config)?),
                        ComponentFactory::Normalizer(make) => Created::Normalizer(make(config)?),
                    })
                })
                .map_err(refused)?
            }
            Factory::Dynamic(lib) => {
                let made = (lib.module.create())(
                    RStr::from(kind.as_str()),
                    RStr::from(info.name.as_str()),
                    RStr::from(config),
                )
                .into_result()
                .map_err(|e| refused(decode_error(e.as_str())))?;
                let made = Foreign(made);
                match kind {
                    ComponentKind::Agent => Created::Agent(Box::new(made)),
                    ComponentKind::Environment => Created::Environment(Box::new(made)),
                    ComponentKind::Reward => Created::Reward(Box::new(made)),
                    ComponentKind::Normalizer => Created::Normalizer(Box::new(made)),
                }
            }
        };
        Ok((id, created))
    }

    pub fn create_agent(
        &self,
        name: &str,
        config: &str,
        policy: &ResolvePolicy,
    ) -> Result<AgentHandle, ResolveError> {
        match self.create(ComponentKind::Agent, name, config, policy)? {
            (id, Created::Agent(c)) => Ok(AgentHandle::new(id, c)),
            (id, _) => Err(wrong_kind(&id)),
        }
    }

    pub fn create_environment(
        &self,
        name: &str,
        config: &str,
        policy: &ResolvePolicy,
    ) -> Result<EnvironmentHandle, ResolveError> {
        match self.create(ComponentKind::Environment, name, config, policy)? {
            (id, Created::Environment(c)) => Ok(EnvironmentHandle::new(id, c)),
            (id, _) => Err(wrong_kind(&id)),
        }
    }

    pub fn create_reward(
        &self,
        name: &str,
        config: &str,
        policy: &ResolvePolicy,
    ) -> Result<RewardHandle, ResolveError> {
        match self.create(ComponentKind::Reward, name, config, policy)? {
            (id, Created::Reward(c)) => Ok(RewardHandle::new(id, c)),
            (id, _) => Err(wrong_kind(&id)),
        }
    }

    pub fn create_normalizer(
        &self,
        name: &str,
        config: &str,
        policy: &ResolvePolicy,
    ) -> Result<NormalizerHandle, ResolveError> {
        match self.create(ComponentKind::Normalizer, name, config, policy)? {
            (id, Created::Normalizer(c)) => Ok(NormalizerHandle::new(id, c)),
            (id, _) => Err(wrong_kind(&id)),
        }
    }
}

impl Registry {
    /// The other agents the agent `full_name` with `config` names
    /// ([`Agent::linked_agents`]).
    pub fn agent_links(
        &self,
        full_name: &str,
        config: &str,
        policy: &ResolvePolicy,
    ) -> Result<Vec<String>, ResolveError> {
        Ok(self
            .create_agent(full_name, config, policy)?
            .linked_agents())
    }
}

/// A plugin that hands back a different kind than it was asked for is broken.
fn wrong_kind(id: &ComponentId) -> ResolveError {
    ResolveError::Create {
        kind: id.kind.to_string(),
        component: id.name.clone(),
        message: "the plugin returned a component of another kind".into(),
    }
}

fn split_name(full_name: &str) -> Result<(&str, &str), ResolveError> {
    match full_name.split_once('/') {
        Some((p, c)) if super::dynamic::is_valid_name(p) && super::dynamic::is_valid_name(c) => {
            Ok((p, c))
        }
        _ => Err(ResolveError::BadName {
            name: full_name.to_string(),
        }),
    }
}
