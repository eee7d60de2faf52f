//! Turning abi_stable's layout report (thousands of lines) into one line.
//!
//! The report crosses the library boundary as a boxed error whose concrete type cannot
//! be downcast here (each side has its own copy of abi_stable's types), so the summary
//! reads the report's text: the first block with errors names the chain of types that
//! leads to the mismatch, then `Error:` lines say what differs.

/// The version the plugin's copy of the API crate has, when the report says the
/// package versions of the interface's types are incompatible (another major version).
pub fn package_version_mismatch(report: &str) -> Option<String> {
    let lines: Vec<&str> = report.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| *l == "Error:incompatible package versions")?;
    let rest = &lines[at + 1..];
    let found = rest.iter().position(|l| *l == "Found:")?;
    rest.get(found + 1)
        .filter(|v| !v.is_empty())
        .map(|v| v.to_string())
}

/// "type `Task` (via PluginMod -> ... -> EpisodeView): unexpected field". Of all the
/// blocks with errors, the deepest is named: a field added to `Task` also changes the
/// size of every type that holds a `Task`, but `Task` is the cause.
pub fn summarize_layout_report(report: &str) -> String {
    let lines: Vec<&str> = report.lines().collect();
    let starts: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            l.split_once(" error(s)")
                .and_then(|(n, _)| n.trim().parse::<usize>().ok())
                .is_some_and(|n| n > 0)
        })
        .map(|(i, _)| i)
        .collect();
    let deepest = starts
        .iter()
        .map(|&start| {
            let end = lines[start + 1..]
                .iter()
                .position(|l| l.contains(" error(s)"))
                .map_or(lines.len(), |p| start + 1 + p);
            summarize_block(&lines[start + 1..end])
        })
        .max_by_key(|(chain, _)| chain.len());
    let Some((mut chain, problems)) = deepest else {
        return "an unnamed type (abi_stable reported no details)".to_string();
    };
    let culprit = chain.pop().unwrap_or("unknown");
    let via = if chain.is_empty() {
        String::new()
    } else {
        format!(" (via {})", chain.join(" -> "))
    };
    let what = if problems.is_empty() {
        "layouts differ".to_string()
    } else {
        problems.join("; ")
    };
    format!("type `{culprit}`{via}: {what}")
}

/// The chain of types leading to the mismatch, and up to three distinct problems.
fn summarize_block<'a>(block: &[&'a str]) -> (Vec<&'a str>, Vec<&'a str>) {
    let trace_end = block
        .iter()
        .position(|l| l.trim_start().starts_with("Layout of expected type"))
        .unwrap_or(block.len());
    let mut chain: Vec<&str> = block[..trace_end]
        .iter()
        .filter_map(|l| l.trim().strip_prefix("type:"))
        .map(str::trim)
        .filter(|t| !t.starts_with("AFunctionPointer") && !t.starts_with('&'))
        .collect();
    chain.dedup();
    let mut problems: Vec<&str> = Vec::new();
    for p in block
        .iter()
        .filter_map(|l| l.trim().strip_prefix("Error:"))
        .map(str::trim)
    {
        if !problems.contains(&p) && problems.len() < 3 {
            problems.push(p);
        }
    }
    (chain, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_mismatched_type_from_a_real_report() {
        // A real report: a plugin built against an API whose `Task` has an extra field.
        let report = include_str!("../../tests/data/layout-report.txt");
        let summary = summarize_layout_report(report);
        assert!(
            summary.starts_with("type `Task` (via PluginMod -> RResult -> FfiComponent"),
            "{summary}"
        );
        assert!(
            summary.ends_with(
                "EpisodeView): incompatible type size; too many fields; unexpected field"
            ),
            "{summary}"
        );
        assert!(summary.len() < 400, "{summary}");
    }

    #[test]
    fn another_major_version_is_read_from_the_report() {
        let report = "\n\nError:incompatible package versions\nExpected:\n    1.0.0\nFound:\n    \
                      9.0.0\n0 error(s)inside:\n";
        assert_eq!(package_version_mismatch(report).as_deref(), Some("9.0.0"));
        assert_eq!(package_version_mismatch("Error:unexpected field"), None);
    }

    #[test]
    fn a_report_without_errors_still_gives_a_line() {
        assert_eq!(
            summarize_layout_report("0 error(s)."),
            "an unnamed type (abi_stable reported no details)"
        );
    }
}
