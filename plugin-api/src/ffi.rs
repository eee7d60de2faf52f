//! The ABI itself. Plugin authors never use this module directly; the host adapts the
//! objects below back to the ordinary traits of [`crate::traits`].
//!
//! # Why it can grow
//!
//! The binary interface is frozen at [`ABI_VERSION`] for every 1.x release: a root
//! module with two functions (`manifest`, `create`) and one object type with one method,
//! `call(method, input) -> output`, where the method is a name (`agent.render`) and the
//! input and output are JSON. Nothing about the data's shape is in the binary layout,
//! so a 1.y host loads a plugin built against 1.x unchanged:
//!
//! - a new field reaches an older plugin as an unknown JSON key, which it ignores, and
//!   an older host's value reaches a newer plugin without the key, which it reads as
//!   the field's default;
//! - a new enum variant is read by older code as the enum's `Unknown` variant;
//! - a new method is answered by an older plugin with [`PluginErrorKind::Unsupported`],
//!   and the host then uses the method's documented default.
//!
//! The semver rule itself (a plugin built against 1.x loads in a host 1.y with
//! y ≥ x) is checked by the host from [`Manifest::api_version`](crate::Manifest::api_version).

// `#[sabi_trait]` generates impls inside a const block.
#![allow(non_local_definitions)]

use crate::{
    data::{
        ComponentKind, EpisodeEnd, EpisodeRecord, EpisodeStart, EpisodeView, SampleRow, Task,
        ToolCall, ToolContext,
    },
    error::{PluginError, PluginErrorKind, PluginResult, guard},
    spec::{ComponentFactory, PluginSpec},
    traits::{Agent, Environment, Normalizer, Reward},
};
use abi_stable::{
    StableAbi, declare_root_module_statics,
    library::RootModule,
    prefix_type::PrefixTypeTrait,
    sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RBox, RResult, RStr, RString},
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

/// The version of the binary interface (the root module and the object below), frozen
/// for all of API 1.x. abi_stable checks it and the layouts when a library is loaded;
/// the API's own version travels in the manifest.
pub const ABI_VERSION: &str = "1.0.0";

/// The symbol under which every plugin exports its library header. It is abi_stable's
/// mangled name for the root-module loader, written out because the export macro must
/// name it literally (checked by a test against abi_stable's own constant).
pub const ROOT_MODULE_SYMBOL: &str = "_1as_0lib_1header_0root_bmodule_bloader";

/// One component on the other side of the boundary. Errors are a JSON [`PluginError`].
#[sabi_trait]
pub trait FfiComponent: Send + Sync {
    fn call(&self, method: RStr<'_>, input: RStr<'_>) -> RResult<RString, RString>;
}

pub type FfiComponentBox = FfiComponent_TO<'static, RBox<()>>;

/// The root module every plugin exports. Frozen: abi_stable refuses a library whose
/// root module has fewer fields than the host's, so growth happens in methods (names)
/// and JSON fields, never here.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    /// The JSON [`Manifest`].
    pub manifest: extern "C" fn() -> RResult<RString, RString>,
    /// Builds the component `name` of kind `kind` (as in [`ComponentKind::as_str`])
    /// from the TOML text of its config table.
    #[sabi(last_prefix_field)]
    pub create: extern "C" fn(
        kind: RStr<'_>,
        name: RStr<'_>,
        config: RStr<'_>,
    ) -> RResult<FfiComponentBox, RString>,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "drmas_plugin";
    const NAME: &'static str = "drmas_plugin";
    const VERSION_STRINGS: VersionStrings = VersionStrings::new(ABI_VERSION);
}

/// Builds the root module from the two exported functions the macro generates.
pub fn root_module(
    manifest: extern "C" fn() -> RResult<RString, RString>,
    create: extern "C" fn(RStr<'_>, RStr<'_>, RStr<'_>) -> RResult<FfiComponentBox, RString>,
) -> PluginModRef {
    PluginMod { manifest, create }.leak_into_prefix()
}

/// The method names of [`FfiComponent::call`], with the JSON each takes and returns.
pub mod method {
    /// [`EpisodeView`](crate::EpisodeView) → `[Message]`.
    pub const AGENT_RENDER: &str = "agent.render";
    /// [`ParseInput`](super::ParseInput) → [`Parsed`](crate::Parsed).
    pub const AGENT_PARSE: &str = "agent.parse";
    /// `null` → `[string]`.
    pub const AGENT_LINKED_AGENTS: &str = "agent.linked_agents";
    /// `null` → `[string]`.
    pub const AGENT_TOOLS_USED: &str = "agent.tools_used";
    /// [`Task`](crate::Task) → [`Task`](crate::Task).
    pub const ENV_PREPARE: &str = "environment.prepare";
    /// `null` → `[ToolSpec]`.
    pub const ENV_TOOLS: &str = "environment.tools";
    /// [`EpisodeStart`](crate::EpisodeStart) → `null`.
    pub const ENV_START_EPISODE: &str = "environment.start_episode";
    /// [`CallToolInput`](super::CallToolInput) → [`ToolResult`](crate::ToolResult).
    pub const ENV_CALL_TOOL: &str = "environment.call_tool";
    /// [`EpisodeEnd`](crate::EpisodeEnd) → `null`.
    pub const ENV_END_EPISODE: &str = "environment.end_episode";
    /// `EpisodeId` → `{name: WireNumber}` (since 1.1; values cross in single precision).
    pub const ENV_EPISODE_METRICS: &str = "environment.episode_metrics";
    /// [`EpisodeRecord`](crate::EpisodeRecord) → `{name: WireNumber}` (since 1.3).
    pub const ENV_RECORD_METRICS: &str = "environment.record_metrics";
    /// `null` → `bool`.
    pub const ENV_IS_SLOW: &str = "environment.is_slow";
    /// `null` → `[string]` (since 1.4).
    pub const ENV_PROBE: &str = "environment.probe";
    /// `null` → `number` or `null` (since 1.4).
    pub const ENV_MAX_EPISODES: &str = "environment.max_episodes";
    /// [`EpisodeRecord`](crate::EpisodeRecord) → [`WireNumber`](super::WireNumber).
    pub const REWARD_SCORE: &str = "reward.score";
    /// [`EpisodeRecord`](crate::EpisodeRecord) → `[WireNumber]` or `null` (since 1.3).
    pub const REWARD_TURN_SCORES: &str = "reward.turn_scores";
    /// `[SampleRow]` → `[WireNumber]`.
    pub const NORMALIZER_ADVANTAGES: &str = "normalizer.advantages";
}

/// The input of [`method::AGENT_PARSE`].
#[derive(Serialize, Deserialize)]
pub struct ParseInput<V, S> {
    pub view: V,
    pub completion: S,
}

/// The input of [`method::ENV_CALL_TOOL`].
#[derive(Serialize, Deserialize)]
pub struct CallToolInput<C, T> {
    pub context: C,
    pub call: T,
}

/// A number that crosses the boundary: JSON has no NaN or infinity, so those cross as
/// the strings `"NaN"`, `"inf"` and `"-inf"`, and the host can name the exact value it
/// refuses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WireNumber(pub f32);

impl Serialize for WireNumber {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            v if v.is_finite() => s.serialize_f32(v),
            v if v.is_nan() => s.serialize_str("NaN"),
            v if v > 0.0 => s.serialize_str("inf"),
            _ => s.serialize_str("-inf"),
        }
    }
}

impl<'de> Deserialize<'de> for WireNumber {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A visitor rather than an untagged enum: this runs once per advantage, and an
        // untagged enum buffers every value before trying its variants.
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = WireNumber;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number, or \"NaN\", \"inf\" or \"-inf\"")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<WireNumber, E> {
                Ok(WireNumber(v as f32))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<WireNumber, E> {
                Ok(WireNumber(v as f32))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<WireNumber, E> {
                Ok(WireNumber(v as f32))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<WireNumber, E> {
                match v {
                    "NaN" => Ok(WireNumber(f32::NAN)),
                    "inf" => Ok(WireNumber(f32::INFINITY)),
                    "-inf" => Ok(WireNumber(f32::NEG_INFINITY)),
                    other => Err(E::custom(format!("`{other}` is not a number"))),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Decodes a JSON value crossing the boundary; a value that does not decode is the
/// caller's fault ([`PluginErrorKind::Input`]).
pub fn decode<T: DeserializeOwned>(what: &str, json: &str) -> PluginResult<T> {
    serde_json::from_str(json)
        .map_err(|e| PluginError::input(format!("cannot read the {what} sent across: {e}")))
}

/// Encodes a value for the boundary. (Numbers that may be non-finite cross as
/// [`WireNumber`].)
pub fn encode<T: Serialize>(value: &T) -> PluginResult<String> {
    serde_json::to_string(value)
        .map_err(|e| PluginError::other(format!("cannot encode a value for the host: {e}")))
}

/// A [`PluginError`] as it crosses the boundary.
pub fn encode_error(err: &PluginError) -> RString {
    serde_json::to_string(err)
        .unwrap_or_else(|_| format!("{{\"kind\":\"other\",\"message\":{:?}}}", err.message))
        .into()
}

/// Reads an error that crossed the boundary; text that is not a JSON error is kept as
/// the message.
pub fn decode_error(text: &str) -> PluginError {
    serde_json::from_str(text).unwrap_or_else(|_| PluginError::other(text))
}

fn to_ffi(result: PluginResult<String>) -> RResult<RString, RString> {
    match result {
        Ok(s) => RResult::ROk(s.into()),
        Err(e) => RResult::RErr(encode_error(&e)),
    }
}

/// The error of a panic while the export macro built the plugin spec.
#[doc(hidden)]
pub fn spec_panic(payload: Box<dyn std::any::Any + Send>) -> PluginError {
    spec_panic_at(payload, None)
}

fn spec_panic_at(payload: Box<dyn std::any::Any + Send>, at: Option<String>) -> PluginError {
    let panic = PluginError::from_panic(payload, at);
    PluginError::new(
        PluginErrorKind::Panic,
        format!("{} while building the plugin spec", panic.message),
    )
}

/// Builds the plugin spec with `make` (the export macro's), a panic caught quietly and
/// returned as the encoded error.
#[doc(hidden)]
pub fn build_spec(
    make: impl FnOnce() -> &'static PluginSpec,
) -> Result<&'static PluginSpec, RString> {
    crate::quiet_panic::catch_quietly(make)
        .map_err(|(payload, at)| encode_error(&spec_panic_at(payload, at)))
}

/// Body of the exported `manifest` function.
pub fn export_manifest(spec: &PluginSpec) -> RResult<RString, RString> {
    to_ffi(guard(|| encode(&spec.manifest())))
}

/// Body of the exported `create` function: finds the entry and builds the component,
/// with panics in the author's constructor turned into errors.
pub fn export_create(
    spec: &PluginSpec,
    kind: RStr<'_>,
    name: RStr<'_>,
    config: RStr<'_>,
) -> RResult<FfiComponentBox, RString> {
    let built = guard(|| {
        let kind = ComponentKind::parse(kind.as_str()).ok_or_else(|| {
            PluginError::not_found(format!("no component kind `{}`", kind.as_str()))
        })?;
        let entry = spec.entry(kind, name.as_str()).ok_or_else(|| {
            PluginError::not_found(format!(
                "plugin `{}` has no {kind} named `{}`",
                spec.name,
                name.as_str()
            ))
        })?;
        let config = config.as_str();
        Ok(match &entry.factory {
            ComponentFactory::Agent(make) => Exported::Agent(make(config)?),
            ComponentFactory::Environment(make) => Exported::Environment(make(config)?),
            ComponentFactory::Reward(make) => Exported::Reward(make(config)?),
            ComponentFactory::Normalizer(make) => Exported::Normalizer(make(config)?),
        })
    });
    match built {
        Ok(component) => RResult::ROk(FfiComponent_TO::from_value(
            component,
            sabi_trait::TD_Opaque,
        )),
        Err(e) => RResult::RErr(encode_error(&e)),
    }
}

/// An author's component behind [`FfiComponent`]: every call decoded, guarded and
/// encoded.
enum Exported {
    Agent(Box<dyn Agent>),
    Environment(Box<dyn Environment>),
    Reward(Box<dyn Reward>),
    Normalizer(Box<dyn Normalizer>),
}

impl FfiComponent for Exported {
    fn call(&self, method: RStr<'_>, input: RStr<'_>) -> RResult<RString, RString> {
        to_ffi(guard(|| self.dispatch(method.as_str(), input.as_str())))
    }
}

/// Metrics as they cross the boundary (single precision, non-finite values named).
fn encode_metrics(metrics: crate::Metrics) -> PluginResult<String> {
    encode(
        &metrics
            .into_iter()
            .map(|(k, v)| (k, WireNumber(v as f32)))
            .collect::<std::collections::BTreeMap<_, _>>(),
    )
}

impl Exported {
    fn dispatch(&self, name: &str, input: &str) -> PluginResult<String> {
        use method::*;
        match (self, name) {
            (Exported::Agent(a), AGENT_RENDER) => {
                encode(&a.render(&decode::<EpisodeView>("episode view", input)?)?)
            }
            (Exported::Agent(a), AGENT_PARSE) => {
                let p: ParseInput<EpisodeView, String> = decode("parse input", input)?;
                encode(&a.parse(&p.view, &p.completion)?)
            }
            (Exported::Agent(a), AGENT_LINKED_AGENTS) => encode(&a.linked_agents()),
            (Exported::Agent(a), AGENT_TOOLS_USED) => encode(&a.tools_used()),
            (Exported::Environment(e), ENV_PREPARE) => {
                encode(&e.prepare(&decode::<Task>("task", input)?)?)
            }
            (Exported::Environment(e), ENV_TOOLS) => encode(&e.tools()),
            (Exported::Environment(e), ENV_START_EPISODE) => {
                encode(&e.start_episode(&decode::<EpisodeStart>("episode start", input)?)?)
            }
            (Exported::Environment(e), ENV_CALL_TOOL) => {
                let c: CallToolInput<ToolContext, ToolCall> = decode("tool call", input)?;
                encode(&e.call_tool(&c.context, &c.call)?)
            }
            (Exported::Environment(e), ENV_END_EPISODE) => {
                encode(&e.end_episode(&decode::<EpisodeEnd>("episode end", input)?)?)
            }
            (Exported::Environment(e), ENV_EPISODE_METRICS) => {
                encode_metrics(e.episode_metrics(decode("episode id", input)?)?)
            }
            (Exported::Environment(e), ENV_RECORD_METRICS) => encode_metrics(
                e.record_metrics(&decode::<EpisodeRecord>("episode record", input)?)?,
            ),
            (Exported::Environment(e), ENV_IS_SLOW) => encode(&e.is_slow()),
            (Exported::Environment(e), ENV_PROBE) => encode(&e.probe()?),
            (Exported::Environment(e), ENV_MAX_EPISODES) => encode(&e.max_episodes()),
            (Exported::Reward(r), REWARD_SCORE) => {
                encode(&WireNumber(
                    r.score(&decode::<EpisodeRecord>("episode record", input)?)?,
                ))
            }
            (Exported::Reward(r), REWARD_TURN_SCORES) => encode(
                &r.turn_scores(&decode::<EpisodeRecord>("episode record", input)?)?
                    .map(|v| v.into_iter().map(WireNumber).collect::<Vec<_>>()),
            ),
            (Exported::Normalizer(n), NORMALIZER_ADVANTAGES) => {
                let rows: Vec<SampleRow> = decode("sample rows", input)?;
                let out = n.advantages(&rows)?;
                encode(&out.into_iter().map(WireNumber).collect::<Vec<_>>())
            }
            _ => Err(PluginError::new(
                PluginErrorKind::Unsupported,
                format!(
                    "this plugin (drmas-plugin-api {}) has no call `{name}`",
                    crate::API_VERSION
                ),
            )),
        }
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
/// ```standalone_crate
/// # use drmas_plugin_api::PluginSpec;
/// fn plugin() -> PluginSpec {
///     PluginSpec::new("norms", env!("CARGO_PKG_VERSION"))
/// }
///
/// #[cfg(feature = "builtin")]
/// drmas_plugin_api::register_builtin!(plugin);
/// #[cfg(not(feature = "builtin"))]
/// drmas_plugin_api::export_plugin!(plugin);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($spec:path) => {
        const _: () = {
            use $crate::abi_stable::std_types::{RResult, RStr, RString};
            static SPEC: ::std::sync::OnceLock<$crate::PluginSpec> = ::std::sync::OnceLock::new();

            // Building the spec runs author code: a panic there becomes an error too,
            // with the panic's message (a default `config_table!` cannot write says so).
            fn spec() -> Result<&'static $crate::PluginSpec, RString> {
                $crate::ffi::build_spec(|| SPEC.get_or_init($spec))
            }

            extern "C" fn manifest() -> RResult<RString, RString> {
                match spec() {
                    Ok(spec) => $crate::ffi::export_manifest(spec),
                    Err(e) => RResult::RErr(e),
                }
            }

            extern "C" fn create(
                kind: RStr<'_>,
                name: RStr<'_>,
                config: RStr<'_>,
            ) -> RResult<$crate::ffi::FfiComponentBox, RString> {
                match spec() {
                    Ok(spec) => $crate::ffi::export_create(spec, kind, name, config),
                    Err(e) => RResult::RErr(e),
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
    use super::*;

    #[test]
    fn root_module_symbol_matches_abi_stable() {
        assert_eq!(
            ROOT_MODULE_SYMBOL,
            abi_stable::library::ROOT_MODULE_LOADER_NAME
        );
        // The macro spells the symbol out too; keep both in step.
        let source = include_str!("ffi.rs");
        let literal = format!("export_name = \"{ROOT_MODULE_SYMBOL}\"");
        assert!(
            source.contains(&literal),
            "export_plugin! must export `{literal}`"
        );
    }

    #[test]
    fn a_panic_building_the_spec_keeps_its_message() {
        let payload = std::panic::catch_unwind(|| panic!("bad default")).unwrap_err();
        let err = spec_panic(payload);
        assert_eq!(err.kind, PluginErrorKind::Panic);
        assert_eq!(
            err.message,
            "panicked: bad default while building the plugin spec"
        );
    }

    #[test]
    fn errors_round_trip_and_unknown_kinds_read_as_other() {
        let e = PluginError::new(PluginErrorKind::Unsupported, "no call `x`");
        assert_eq!(decode_error(encode_error(&e).as_str()), e);
        let newer = r#"{"kind":"rate_limited","message":"slow down"}"#;
        assert_eq!(decode_error(newer), PluginError::other("slow down"));
        assert_eq!(decode_error("not json"), PluginError::other("not json"));
    }

    #[test]
    fn non_finite_numbers_cross_by_name() {
        let values = [1.5f32, f32::NAN, f32::INFINITY, f32::NEG_INFINITY].map(WireNumber);
        let text = encode(&values).unwrap();
        assert_eq!(text, r#"[1.5,"NaN","inf","-inf"]"#);
        let back: Vec<WireNumber> = decode("numbers", &text).unwrap();
        assert_eq!(back[0].0, 1.5);
        assert!(back[1].0.is_nan());
        assert_eq!((back[2].0, back[3].0), (f32::INFINITY, f32::NEG_INFINITY));
        let err = decode::<WireNumber>("number", r#""lots""#).unwrap_err();
        assert!(err.message.contains("`lots` is not a number"), "{err}");
    }
}
