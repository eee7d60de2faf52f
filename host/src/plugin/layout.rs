//! Turning abi_stable's layout report (often a thousand lines) into one line.

use abi_stable::{
    abi_stability::abi_checking::AbiInstabilityErrors, std_types::RBoxError,
    type_layout::TLFieldOrFunction,
};

/// "`Task.answer`: field count mismatch (expected 5, found 6)"-style summary of the
/// first mismatch abi_stable found.
pub fn summarize_layout_error(err: &RBoxError) -> String {
    let Some(errors) = err.downcast_ref::<AbiInstabilityErrors>() else {
        return first_line(&err.to_string());
    };
    let Some(first) = errors.errors.iter().next() else {
        return format!("type `{}`", errors.interface.full_type());
    };
    let path: Vec<String> = first
        .stack_trace
        .iter()
        .map(|step| match &step.expected {
            TLFieldOrFunction::Field(f) => format!("{}: {}", f.name(), f.layout().full_type()),
            TLFieldOrFunction::Function(f) => format!("fn {}", f.name),
        })
        .collect();
    let place = if path.is_empty() {
        format!("`{}`", errors.interface.full_type())
    } else {
        format!("`{}` at {}", errors.interface.full_type(), path.join(" -> "))
    };
    let what: Vec<String> = first.errs.iter().take(2).map(|e| first_line(&format!("{e:?}"))).collect();
    format!("{place}: {}", what.join("; "))
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.len() > 200 { format!("{}…", &line[..200]) } else { line.to_string() }
}
