//! An output never overwrites what the same command reads. `score in.jsonl --out
//! in.jsonl` or `model merge --base M --out M` would replace the input before (or
//! while) it is read, so every command that reads and writes compares, before any
//! work, each output with each input: by resolved path (symbolic links, `..`) and by
//! device and inode (hard links, bind mounts), and refuses an output that is, holds or
//! lies inside one of its inputs.

use super::OutputError;
use std::{
    fs,
    os::unix::fs::MetadataExt,
    path::{Component, Path, PathBuf},
};

/// Something a command reads: what it is (`"the completions"`, `"--base"`) and where.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub what: &'a str,
    pub path: &'a Path,
}

impl<'a> Input<'a> {
    pub fn new(what: &'a str, path: &'a Path) -> Self {
        Self { what, path }
    }
}

/// Refuses `output` when it is one of `inputs`, holds one, or lies inside one.
pub fn check_not_an_input(output: &Path, inputs: &[Input<'_>]) -> Result<(), OutputError> {
    for input in inputs {
        if let Some(how) = overlap(output, input.path) {
            return Err(OutputError::Target {
                path: output.to_path_buf(),
                message: format!(
                    "{how} {} {}, which this command reads; write somewhere else",
                    input.what,
                    input.path.display()
                ),
            });
        }
    }
    Ok(())
}

/// How `output` overlaps `input`, if it does.
fn overlap(output: &Path, input: &Path) -> Option<&'static str> {
    let input_id = identity(input)?;
    let out = resolve(output);
    // The output itself or one of its folders is the input.
    for (i, a) in out.ancestors().enumerate() {
        if identity(a) == Some(input_id) {
            return Some(if i == 0 { "is" } else { "is inside" });
        }
    }
    // The output is a folder the input lies in.
    let out_id = identity(&out)?;
    resolve(input)
        .ancestors()
        .skip(1)
        .any(|a| identity(a) == Some(out_id))
        .then_some("holds")
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    if path.as_os_str().is_empty() {
        return None;
    }
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// `path` made absolute with its existing part's links resolved and every `..` applied.
fn resolve(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for c in absolute.components() {
        match c {
            Component::ParentDir => {
                // Resolve what exists so far first: `link/..` is the link target's parent.
                if let Ok(real) = fs::canonicalize(&out) {
                    out = real;
                }
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    // The longest existing prefix, with its links resolved; the rest as written.
    let mut rest = Vec::new();
    let mut head = out.as_path();
    loop {
        if let Ok(real) = fs::canonicalize(head) {
            let mut r = real;
            r.extend(rest.iter().rev());
            return r;
        }
        match (head.file_name(), head.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                head = parent;
            }
            _ => return out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(output: &Path, input: &Path) -> String {
        check_not_an_input(output, &[Input::new("--base", input)])
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_same_file_by_any_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let input = d.join("in.jsonl");
        fs::write(&input, "{}\n").unwrap();
        fs::create_dir(d.join("sub")).unwrap();
        let via_dots = d.join("sub/../in.jsonl");
        let via_missing = d.join("nope/../in.jsonl");
        std::os::unix::fs::symlink(&input, d.join("link.jsonl")).unwrap();
        fs::hard_link(&input, d.join("hard.jsonl")).unwrap();
        for out in [
            input.clone(),
            via_dots,
            via_missing,
            d.join("link.jsonl"),
            d.join("hard.jsonl"),
        ] {
            assert_eq!(
                refusal(&out, &input),
                format!(
                    "output {}: is --base {}, which this command reads; write somewhere else",
                    out.display(),
                    input.display()
                )
            );
        }
        // A new file beside it is fine.
        check_not_an_input(&d.join("out.jsonl"), &[Input::new("x", &input)]).unwrap();
    }

    #[test]
    fn an_output_inside_or_around_an_input_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let model = d.join("models/m");
        fs::create_dir_all(&model).unwrap();
        assert!(refusal(&model.join("merged"), &model).contains(": is inside --base "));
        assert!(refusal(&model.join("a/b/c.json"), &model).contains(": is inside --base "));
        assert!(refusal(&d.join("models"), &model).contains(": holds --base "));
        assert!(refusal(d, &model).contains(": holds --base "));
        check_not_an_input(&d.join("models/m2"), &[Input::new("x", &model)]).unwrap();
        // An input that does not exist cannot be overwritten.
        check_not_an_input(&model, &[Input::new("x", &d.join("gone"))]).unwrap();
    }
}
