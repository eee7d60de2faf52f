//! Plugins: discovery of `.so` files, loading with per-file checks, the registry of
//! built-in and dynamic components, and the host-side handles that check what a
//! component returns.

mod checked;
mod discovery;
mod dynamic;
mod error;
mod foreign;
mod layout;
mod registry;

pub use checked::{AgentHandle, ComponentId, EnvironmentHandle, NormalizerHandle, RewardHandle};
pub use discovery::find_plugin_files;
pub use dynamic::load_plugin_file;
pub use error::{ComponentError, LoadError, ResolveError};
pub use registry::{LoadFailure, PluginRecord, Registry, ResolvePolicy, Source};
