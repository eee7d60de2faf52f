//! Loading one plugin file from a private copy of its checked bytes: abi_stable's
//! version and layout checks and the manifest, each failure mapped to one line.

use super::{
    error::LoadError,
    layout::{package_version_mismatch, summarize_layout_report},
    private_copy::PrivateCopy,
};
use abi_stable::library::{LibraryError, lib_header_from_path};
use drmas_plugin_api::{
    API_VERSION, Manifest,
    ffi::{PluginModRef, decode, decode_error},
};
use std::path::{Path, PathBuf};

/// A loaded plugin library. The library stays mapped for the life of the process:
/// components created from it may be alive anywhere. It was loaded from a private copy
/// (see [`super::private_copy`]), so the file at `path` may be replaced or rewritten
/// while the process runs without touching the code it runs.
#[derive(Clone)]
pub struct DynamicPlugin {
    /// The plugin file as found in its folder (what every message names).
    pub path: PathBuf,
    pub module: PluginModRef,
    pub manifest: Manifest,
}

/// Loads `path` as a drmas plugin, without the trust checks (see
/// [`super::trust::check_file`], which reads a file for [`load_plugin_bytes`]).
pub fn load_plugin_file(path: &Path) -> Result<DynamicPlugin, LoadError> {
    let bytes = std::fs::read(path).map_err(|e| LoadError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    load_plugin_bytes(path, &bytes)
}

/// Loads the plugin whose file `path` held `bytes` when it was read and checked: the
/// bytes go to a private copy, which is opened and removed again, so what runs is
/// exactly what was checked, whatever happens to `path` afterwards.
pub fn load_plugin_bytes(path: &Path, bytes: &[u8]) -> Result<DynamicPlugin, LoadError> {
    let path_buf = path.to_path_buf();
    check_elf(path, bytes)?;
    let name = path
        .file_name()
        .unwrap_or(std::ffi::OsStr::new("plugin.so"));
    let copy = PrivateCopy::write(name, bytes).map_err(|e| LoadError::PrivateCopy {
        path: path_buf.clone(),
        dir: std::env::temp_dir(),
        reason: e.to_string(),
    })?;
    let header =
        lib_header_from_path(copy.path()).map_err(|e| map_library_error(&path_buf, &copy, e))?;
    // Open: the mapping holds the file now, and the copy is removed when `copy` drops
    // at the end of this function, whether the rest succeeds or not.
    let module = header
        .init_root_module::<PluginModRef>()
        .map_err(|e| map_library_error(&path_buf, &copy, e))?;
    let bad_manifest = |reason: String| LoadError::Manifest {
        path: path_buf.clone(),
        reason,
    };
    let manifest: Manifest = match (module.manifest())().into_result() {
        Ok(json) => decode("manifest", json.as_str()).map_err(|e| bad_manifest(e.to_string()))?,
        Err(e) => return Err(bad_manifest(decode_error(e.as_str()).to_string())),
    };
    check_api_version(&manifest.api_version).map_err(|found| LoadError::ApiVersion {
        path: path_buf.clone(),
        found,
        host: API_VERSION.to_string(),
    })?;
    validate_manifest(&manifest).map_err(bad_manifest)?;
    Ok(DynamicPlugin {
        path: path_buf,
        module,
        manifest,
    })
}

/// The compatibility promise: a plugin built against API 1.x runs in a host 1.y with
/// y ≥ x. Anything else is refused with what the plugin says it was built against.
pub(crate) fn check_api_version(plugin_api: &str) -> Result<(), String> {
    let host = semver::Version::parse(API_VERSION).expect("API_VERSION is semver");
    let plugin = semver::Version::parse(plugin_api)
        .map_err(|e| format!("`{plugin_api}`, which is not a version ({e})"))?;
    if plugin.major == host.major && plugin.minor <= host.minor {
        Ok(())
    } else {
        Err(plugin_api.to_string())
    }
}

/// Refuses files that cannot be shared libraries before handing them to the dynamic
/// loader, whose messages for those are cryptic.
fn check_elf(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.is_empty() {
        return Err(LoadError::Empty {
            path: path.to_path_buf(),
        });
    }
    if !bytes.starts_with(b"\x7fELF") {
        return Err(LoadError::NotSharedLibrary {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// The loader's error about the private copy, told about the file the user named: the
/// copy's path, which the loader's text contains, means nothing to them.
fn map_library_error(path: &Path, copy: &PrivateCopy, err: LibraryError) -> LoadError {
    let named = |text: String| {
        text.replace(
            &copy.path().display().to_string(),
            &path.display().to_string(),
        )
    };
    let path = path.to_path_buf();
    match err {
        LibraryError::OpenError { err, .. } => {
            let mut reason = named(err.to_string());
            // A temporary folder mounted `noexec` refuses to map any library from it.
            if reason.contains("failed to map segment") {
                reason.push_str(&format!(
                    " (drmas loads plugins from a private copy in {}; if that folder is \
                     mounted noexec, set TMPDIR to a folder that is not)",
                    copy.dir().parent().unwrap_or(copy.dir()).display()
                ));
            }
            LoadError::Open { path, reason }
        }
        LibraryError::GetSymbolError { .. } => LoadError::NotAPlugin { path },
        // The binary interface itself differs: a plugin of API 0.x (whose ABI version
        // was its API version) or of a future 2.x.
        LibraryError::IncompatibleVersionNumber { actual_version, .. } => LoadError::ApiVersion {
            path,
            found: actual_version.to_string(),
            host: API_VERSION.to_string(),
        },
        LibraryError::ParseVersionError(e) => LoadError::ApiVersion {
            path,
            found: format!("an unparseable version ({e})"),
            host: API_VERSION.to_string(),
        },
        // abi_stable compares the package version of every type of the interface: a
        // plugin of another major API version fails there, before its manifest can say.
        LibraryError::AbiInstability(e) => {
            let report = e.to_string();
            match package_version_mismatch(&report) {
                Some(found) => LoadError::ApiVersion {
                    path,
                    found,
                    host: API_VERSION.to_string(),
                },
                None => LoadError::Layout {
                    path,
                    detail: summarize_layout_report(&report),
                },
            }
        }
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
            reason: named(other.to_string()),
        },
    }
}

fn validate_manifest(manifest: &Manifest) -> Result<(), String> {
    let name = manifest.plugin.as_str();
    if !is_valid_name(name) {
        return Err(format!(
            "plugin name `{name}` must be non-empty and use only letters, digits, `-` and `_`"
        ));
    }
    semver::Version::parse(&manifest.version).map_err(|e| {
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
