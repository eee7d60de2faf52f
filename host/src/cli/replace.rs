//! Whether a command may replace the folder it was told to write.

use anyhow::{Context, bail};

/// What marks a folder as one a command wrote itself (and may replace).
pub struct Ours {
    /// "a model folder drmas wrote", for messages.
    pub what: &'static str,
    /// The file that marks it, named in the refusal.
    pub marker: &'static str,
    pub is_ours: fn(&std::path::Path) -> bool,
}

/// A model folder drmas wrote (`model import`, `model merge`, checkpoints).
pub const MODEL_FOLDER: Ours = Ours {
    what: "a model folder drmas wrote",
    marker: drmas::model::MADE_BY_DRMAS,
    is_ours: drmas::model::is_made_by_drmas,
};

/// `out` may be written: it does not exist, is empty, or is a folder of `ours`'s kind
/// and `force` is given. A folder holding anything else (`.`, a home folder, someone's
/// checkpoint) is never replaced, forced or not.
pub fn check_replaceable(out: &std::path::Path, force: bool, ours: &Ours) -> anyhow::Result<()> {
    if out.is_file() {
        bail!("{} is a file, not a folder", out.display());
    }
    if !out.is_dir() {
        return Ok(());
    }
    let full = out
        .canonicalize()
        .with_context(|| format!("reading {}", out.display()))?;
    if let Ok(cwd) = std::env::current_dir()
        && cwd.starts_with(&full)
    {
        bail!(
            "{} is the current folder or holds it; refusing to replace it (give a new folder)",
            out.display()
        );
    }
    let mut entries =
        std::fs::read_dir(out).with_context(|| format!("reading {}", out.display()))?;
    if entries.next().is_none() {
        return Ok(());
    }
    if !(ours.is_ours)(out) {
        bail!(
            "{} exists and is not {} (no {}); refusing to replace it, even with --force (give a new folder or empty it yourself)",
            out.display(),
            ours.what,
            ours.marker
        );
    }
    if !force {
        bail!(
            "{} exists ({}); pass --force to replace it",
            out.display(),
            ours.what
        );
    }
    Ok(())
}
