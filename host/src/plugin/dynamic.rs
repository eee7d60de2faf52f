//! Loading one plugin file: file checks, abi_stable's version and layout checks, and
//! the manifest, each failure mapped to one line.

use super::{error::LoadError, layout::summarize_layout_error};
use abi_stable::library::{LibraryError, lib_header_from_path};
use drmas_plugin_api::{
    API_VERSION, Manifest,
    ffi::{AGENT_LINKS_SYMBOL, AgentLinksFn, PluginModRef},
};
use std::{
    io::Read,
    path::{Path, PathBuf},
};

/// A loaded plugin library. The library stays mapped for the life of the process:
/// components created from it may be alive anywhere.
#[derive(Clone)]
pub struct DynamicPlugin {
    pub path: PathBuf,
    pub module: PluginModRef,
    /// The optional agent-links function (absent in plugins built before it).
    pub agent_links: Option<AgentLinksFn>,
    pub manifest: Manifest,
}

/// Loads `path` as a drmas plugin.
pub fn load_plugin_file(path: &Path) -> Result<DynamicPlugin, LoadError> {
    let path_buf = path.to_path_buf();
    check_elf(path)?;
    let header = lib_header_from_path(path).map_err(|e| map_library_error(&path_buf, e))?;
    let module = header
        .init_root_module::<PluginModRef>()
        .map_err(|e| map_library_error(&path_buf, e))?;
    let manifest = (module.manifest())()
        .into_result()
        .map_err(|e| LoadError::Manifest {
            path: path_buf.clone(),
            reason: e.to_string(),
        })?;
    validate_manifest(&manifest).map_err(|reason| LoadError::Manifest {
        path: path_buf.clone(),
        reason,
    })?;
    let agent_links = optional_symbol::<AgentLinksFn>(path, AGENT_LINKS_SYMBOL);
    Ok(DynamicPlugin {
        path: path_buf,
        module,
        agent_links,
        manifest,
    })
}

/// A function the plugin may export beside its root module. The library is already
/// loaded (abi_stable keeps it for the life of the process), so opening it again only
/// takes another reference, which is kept too: the function must stay callable.
fn optional_symbol<F: Copy>(path: &Path, name: &str) -> Option<F> {
    // SAFETY: the file was just loaded as a drmas plugin, so opening it runs no new
    // initialisers; the symbol, when present, was exported by `export_plugin!` with
    // the type `F` of the same API version (checked above).
    unsafe {
        let lib = libloading::Library::new(path).ok()?;
        let f = lib.get::<F>(name.as_bytes()).ok().map(|s| *s);
        std::mem::forget(lib);
        f
    }
}

/// Refuses files that cannot be shared libraries before handing them to the dynamic
/// loader, whose messages for those are cryptic.
fn check_elf(path: &Path) -> Result<(), LoadError> {
    let unreadable = |e: std::io::Error| LoadError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut file = std::fs::File::open(path).map_err(unreadable)?;
    let mut magic = [0u8; 4];
    let n = file.read(&mut magic).map_err(unreadable)?;
    if n == 0 {
        return Err(LoadError::Empty {
            path: path.to_path_buf(),
        });
    }
    if n < 4 || &magic != b"\x7fELF" {
        return Err(LoadError::NotSharedLibrary {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

fn map_library_error(path: &Path, err: LibraryError) -> LoadError {
    let path = path.to_path_buf();
    match err {
        LibraryError::OpenError { err, .. } => LoadError::Open {
            path,
            reason: err.to_string(),
        },
        LibraryError::GetSymbolError { .. } => LoadError::NotAPlugin { path },
        LibraryError::IncompatibleVersionNumber { actual_version, .. } => LoadError::ApiVersion {
            path,
            found: actual_version.to_string(),
            needed: compatible_range(),
        },
        LibraryError::ParseVersionError(e) => LoadError::ApiVersion {
            path,
            found: format!("an unparseable version ({e})"),
            needed: compatible_range(),
        },
        LibraryError::AbiInstability(e) => LoadError::Layout {
            path,
            detail: summarize_layout_error(&e),
        },
        LibraryError::InvalidAbiHeader(h) => LoadError::AbiHeader {
            path,
            reason: format!("abi header {h:?}"),
        },
        LibraryError::InvalidCAbi { expected, found } => LoadError::AbiHeader {
            path,
            reason: format!("C ABI check failed: expected {expected}, found {found}"),
        },
        other => LoadError::Init {
            path,
            reason: other.to_string(),
        },
    }
}

/// The API versions this host accepts, as a semver requirement (abi_stable's rule:
/// same major, and for 0.x the same minor).
fn compatible_range() -> String {
    let version = semver::Version::parse(API_VERSION).expect("API_VERSION is semver");
    if version.major == 0 {
        format!("0.{}.x", version.minor)
    } else {
        format!("{}.x", version.major)
    }
}

fn validate_manifest(manifest: &Manifest) -> Result<(), String> {
    let name = manifest.plugin.as_str();
    if !is_valid_name(name) {
        return Err(format!(
            "plugin name `{name}` must be non-empty and use only letters, digits, `-` and `_`"
        ));
    }
    semver::Version::parse(manifest.version.as_str()).map_err(|e| {
        format!(
            "plugin `{name}` version `{}` is not semver: {e}",
            manifest.version
        )
    })?;
    for c in manifest.components.iter() {
        if !is_valid_name(c.name.as_str()) {
            return Err(format!(
                "plugin `{name}`: component name `{}` must be non-empty and use only letters, \
                 digits, `-` and `_`",
                c.name
            ));
        }
    }
    Ok(())
}

pub(crate) fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
