//! The ABI itself: the exported root module and the `#[sabi_trait]` objects that carry
//! components across. Plugin authors never use this module directly; the host adapts
//! these objects back to the ordinary traits of [`crate::traits`].

// `#[sabi_trait]` generates impls inside a const block.
#![allow(non_local_definitions)]

use crate::{
    data::{
        ComponentKind, EpisodeRecord, EpisodeView, Manifest, Message, Parsed, SampleRow, Task,
        ToolCall, ToolResult,
    },
    error::{PluginError, guard},
    spec::{ComponentFactory, PluginSpec},
    traits::{Agent, Environment, Normalizer, Reward},
};
use abi_stable::{
    StableAbi, declare_root_module_statics,
    library::RootModule,
    package_version_strings,
    prefix_type::PrefixTypeTrait,
    sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RBox, RResult, RSlice, RStr, RString, RVec},
};

/// The symbol under which every plugin exports its library header. It is abi_stable's
/// mangled name for the root-module loader, written out because the export macro must
/// name it literally (checked by a test against abi_stable's own constant).
pub const ROOT_MODULE_SYMBOL: &str = "_1as_0lib_1header_0root_bmodule_bloader";

#[sabi_trait]
pub trait FfiAgent: Send + Sync {
    fn render(&self, view: &EpisodeView) -> RResult<RVec<Message>, PluginError>;
    fn parse(&self, view: &EpisodeView, completion: RStr<'_>) -> RResult<Parsed, PluginError>;
}

#[sabi_trait]
pub trait FfiEnvironment: Send + Sync {
    fn prepare(&self, task: &Task) -> RResult<Task, PluginError>;
    fn call_tool(&self, task: &Task, call: &ToolCall) -> RResult<ToolResult, PluginError>;
    fn is_slow(&self) -> bool;
}

#[sabi_trait]
pub trait FfiReward: Send + Sync {
    fn score(&self, episode: &EpisodeRecord) -> RResult<f32, PluginError>;
}

#[sabi_trait]
pub trait FfiNormalizer: Send + Sync {
    fn advantages(&self, samples: RSlice<'_, SampleRow>) -> RResult<RVec<f32>, PluginError>;
}

pub type FfiAgentBox = FfiAgent_TO<'static, RBox<()>>;
pub type FfiEnvironmentBox = FfiEnvironment_TO<'static, RBox<()>>;
pub type FfiRewardBox = FfiReward_TO<'static, RBox<()>>;
pub type FfiNormalizerBox = FfiNormalizer_TO<'static, RBox<()>>;

/// A freshly created component, tagged with its kind.
#[repr(u8)]
#[derive(StableAbi)]
pub enum FfiComponent {
    Agent(FfiAgentBox),
    Environment(FfiEnvironmentBox),
    Reward(FfiRewardBox),
    Normalizer(FfiNormalizerBox),
}

/// The root module every plugin exports. A prefix type: a host can load a plugin whose
/// root module has more fields than the host knows, but abi_stable refuses one with
/// fewer, so new functions are exported as separate symbols (see
/// [`AGENT_LINKS_SYMBOL`]) rather than appended here.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    pub manifest: extern "C" fn() -> RResult<Manifest, PluginError>,
    #[sabi(last_prefix_field)]
    pub create: extern "C" fn(
        kind: ComponentKind,
        name: RStr<'_>,
        config: RStr<'_>,
    ) -> RResult<FfiComponent, PluginError>,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "drmas_plugin";
    const NAME: &'static str = "drmas_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// Builds the root module from the two exported functions the macro generates.
pub fn root_module(
    manifest: extern "C" fn() -> RResult<Manifest, PluginError>,
    create: extern "C" fn(ComponentKind, RStr<'_>, RStr<'_>) -> RResult<FfiComponent, PluginError>,
) -> PluginModRef {
    PluginMod { manifest, create }.leak_into_prefix()
}

/// The symbol of the optional agent-links function ([`AgentLinksFn`]), looked up by
/// the host beside the root module. A plugin built before it existed lacks it, and the
/// host then has no names to check.
pub const AGENT_LINKS_SYMBOL: &str = "drmas_agent_links_v1";

/// `(agent name, config text) -> the agents it names` ([`Agent::linked_agents`]).
pub type AgentLinksFn = extern "C" fn(RStr<'_>, RStr<'_>) -> RResult<RVec<RString>, PluginError>;

/// Body of the exported agent-links function: builds the agent from its config and
/// asks it which agents it names.
pub fn export_agent_links(
    spec: &PluginSpec,
    name: RStr<'_>,
    config: RStr<'_>,
) -> RResult<RVec<RString>, PluginError> {
    guard(|| {
        spec.agent_links(name.as_str(), config.as_str())
            .map(|names| names.into_iter().map(RString::from).collect())
    })
    .into()
}

/// Body of the exported `manifest` function.
pub fn export_manifest(spec: &PluginSpec) -> RResult<Manifest, PluginError> {
    guard(|| Ok(spec.manifest())).into()
}

/// Body of the exported `create` function: finds the entry and builds the component,
/// with panics in the author's constructor turned into errors.
pub fn export_create(
    spec: &PluginSpec,
    kind: ComponentKind,
    name: RStr<'_>,
    config: RStr<'_>,
) -> RResult<FfiComponent, PluginError> {
    guard(|| {
        let entry = spec.entry(kind, name.as_str()).ok_or_else(|| {
            PluginError::not_found(format!(
                "plugin `{}` has no {kind} named `{}`",
                spec.name,
                name.as_str()
            ))
        })?;
        let config = config.as_str();
        Ok(match &entry.factory {
            ComponentFactory::Agent(make) => FfiComponent::Agent(FfiAgent_TO::from_value(
                ExportedAgent(make(config)?),
                sabi_trait::TD_Opaque,
            )),
            ComponentFactory::Environment(make) => {
                FfiComponent::Environment(FfiEnvironment_TO::from_value(
                    ExportedEnvironment(make(config)?),
                    sabi_trait::TD_Opaque,
                ))
            }
            ComponentFactory::Reward(make) => FfiComponent::Reward(FfiReward_TO::from_value(
                ExportedReward(make(config)?),
                sabi_trait::TD_Opaque,
            )),
            ComponentFactory::Normalizer(make) => {
                FfiComponent::Normalizer(FfiNormalizer_TO::from_value(
                    ExportedNormalizer(make(config)?),
                    sabi_trait::TD_Opaque,
                ))
            }
        })
    })
    .into()
}

// The exported side: author components behind the FFI traits, every call guarded.
struct ExportedAgent(Box<dyn Agent>);
struct ExportedEnvironment(Box<dyn Environment>);
struct ExportedReward(Box<dyn Reward>);
struct ExportedNormalizer(Box<dyn Normalizer>);

impl FfiAgent for ExportedAgent {
    fn render(&self, view: &EpisodeView) -> RResult<RVec<Message>, PluginError> {
        guard(|| self.0.render(view).map(RVec::from)).into()
    }
    fn parse(&self, view: &EpisodeView, completion: RStr<'_>) -> RResult<Parsed, PluginError> {
        guard(|| self.0.parse(view, completion.as_str())).into()
    }
}

impl FfiEnvironment for ExportedEnvironment {
    fn prepare(&self, task: &Task) -> RResult<Task, PluginError> {
        guard(|| self.0.prepare(task)).into()
    }
    fn call_tool(&self, task: &Task, call: &ToolCall) -> RResult<ToolResult, PluginError> {
        guard(|| self.0.call_tool(task, call)).into()
    }
    fn is_slow(&self) -> bool {
        guard(|| Ok(self.0.is_slow())).unwrap_or(true)
    }
}

impl FfiReward for ExportedReward {
    fn score(&self, episode: &EpisodeRecord) -> RResult<f32, PluginError> {
        guard(|| self.0.score(episode)).into()
    }
}

impl FfiNormalizer for ExportedNormalizer {
    fn advantages(&self, samples: RSlice<'_, SampleRow>) -> RResult<RVec<f32>, PluginError> {
        guard(|| self.0.advantages(samples.as_slice()).map(RVec::from)).into()
    }
}

/// Exports a plugin from a crate built as a `cdylib`. `$spec` is a function
/// `fn() -> PluginSpec`. It generates the library header the host looks up, with every
/// call into the spec guarded against panics.
///
/// A first-party plugin crate that is also linked into the host as an `rlib` must not
/// export the header there (two linked crates cannot both define the symbol); it uses
/// [`crate::register_builtin!`] behind a `builtin` feature instead:
///
/// ```ignore
/// #[cfg(feature = "builtin")]
/// drmas_plugin_api::register_builtin!(plugin);
/// #[cfg(not(feature = "builtin"))]
/// drmas_plugin_api::export_plugin!(plugin);
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($spec:path) => {
        const _: () = {
            use $crate::abi_stable::std_types::{RResult, RStr};
            static SPEC: ::std::sync::OnceLock<$crate::PluginSpec> = ::std::sync::OnceLock::new();

            fn spec() -> &'static $crate::PluginSpec {
                SPEC.get_or_init($spec)
            }

            extern "C" fn manifest() -> RResult<$crate::Manifest, $crate::PluginError> {
                // `spec()` runs author code: guard it too.
                match ::std::panic::catch_unwind(spec) {
                    Ok(spec) => $crate::ffi::export_manifest(spec),
                    Err(_) => RResult::RErr($crate::PluginError::new(
                        $crate::PluginErrorKind::Panic,
                        "panicked while building the plugin spec",
                    )),
                }
            }

            extern "C" fn create(
                kind: $crate::ComponentKind,
                name: RStr<'_>,
                config: RStr<'_>,
            ) -> RResult<$crate::ffi::FfiComponent, $crate::PluginError> {
                match ::std::panic::catch_unwind(spec) {
                    Ok(spec) => $crate::ffi::export_create(spec, kind, name, config),
                    Err(_) => RResult::RErr($crate::PluginError::new(
                        $crate::PluginErrorKind::Panic,
                        "panicked while building the plugin spec",
                    )),
                }
            }

            #[unsafe(export_name = "drmas_agent_links_v1")]
            extern "C" fn agent_links(
                name: RStr<'_>,
                config: RStr<'_>,
            ) -> RResult<
                $crate::abi_stable::std_types::RVec<$crate::abi_stable::std_types::RString>,
                $crate::PluginError,
            > {
                match ::std::panic::catch_unwind(spec) {
                    Ok(spec) => $crate::ffi::export_agent_links(spec, name, config),
                    Err(_) => RResult::RErr($crate::PluginError::new(
                        $crate::PluginErrorKind::Panic,
                        "panicked while building the plugin spec",
                    )),
                }
            }

            fn root() -> $crate::ffi::PluginModRef {
                $crate::ffi::root_module(manifest, create)
            }

            #[unsafe(export_name = "_1as_0lib_1header_0root_bmodule_bloader")]
            pub static LIB_HEADER: $crate::abi_stable::library::LibHeader = {
                extern "C" fn erased() -> $crate::abi_stable::library::RootModuleResult {
                    $crate::abi_stable::library::__call_root_module_loader(root)
                }
                // SAFETY: `erased` returns the root module of type `PluginModRef`, as
                // abi_stable's own `#[export_root_module]` would generate.
                unsafe {
                    $crate::abi_stable::library::LibHeader::from_constructor::<
                        $crate::ffi::PluginModRef,
                    >(erased, $crate::abi_stable::library::CheckTypeLayout::Yes)
                }
            };
        };
    };
}

/// Registers a plugin linked into the host as an `rlib` with the host's registry of
/// built-ins (through `inventory`).
#[macro_export]
macro_rules! register_builtin {
    ($spec:path) => {
        $crate::inventory::submit! { $crate::BuiltinPlugin { spec: $spec } }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn root_module_symbol_matches_abi_stable() {
        assert_eq!(
            super::ROOT_MODULE_SYMBOL,
            abi_stable::library::ROOT_MODULE_LOADER_NAME
        );
        // The macro spells the symbols out too; keep both in step.
        let source = include_str!("ffi.rs");
        let literal = format!("export_name = \"{}\"", super::AGENT_LINKS_SYMBOL);
        assert!(
            source.contains(&literal),
            "export_plugin! must export `{literal}`"
        );
        let literal = format!("export_name = \"{}\"", super::ROOT_MODULE_SYMBOL);
        assert!(
            source.contains(&literal),
            "export_plugin! must export `{literal}`"
        );
    }
}
