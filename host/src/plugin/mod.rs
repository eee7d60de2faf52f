//! Plugins: discovery of `.so` files, the trust checks before any is opened, loading
//! from a private copy of the checked bytes with per-file checks, the registry of built-in and dynamic components, and the
//! host-side handles that check what a component returns.

mod checked;
mod discovery;
mod dynamic;
mod error;
mod foreign;
mod layout;
mod private_copy;
mod registry;
mod trust;

pub use checked::{AgentHandle, ComponentId, EnvironmentHandle, NormalizerHandle, RewardHandle};
pub use discovery::{PluginFolder, distinct_folders, find_plugin_files};
pub use dynamic::{load_plugin_bytes, load_plugin_file};
pub use error::{ComponentError, LoadError, ResolveError};
pub use registry::{LoadFailure, PluginRecord, Registry, ResolvePolicy, Source};
pub use trust::{
    ALLOW_UNTRUSTED_ENV, ALLOW_UNTRUSTED_FLAG, Distrust, TrustPolicy, Untrusted, distrust,
    is_sha256_hex, plugin_folder_problem,
};
