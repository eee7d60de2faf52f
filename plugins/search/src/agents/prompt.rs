//! What the search agents show the model: templates with `{name}` placeholders, the
//! information gathered so far and the queries already made, read from the transcript.

use drmas_plugin_api::{Action, EpisodeView, Message, PluginError, PluginResult};

/// What `{information}` renders as before any search returned something.
pub const NOTHING_RETRIEVED: &str = "(nothing retrieved yet)";
/// What `{queries}` renders as before the first search.
pub const NO_QUERIES: &str = "(no searches yet)";

/// A `{name}` placeholder found in a template: its byte range and name. A name is ASCII
/// letters, digits and `_`, starting with a letter or `_`; other braces (`{}`,
/// `{"a": 1}`) are plain text.
struct Placeholder<'a> {
    start: usize,
    end: usize,
    name: &'a str,
}

fn placeholders(template: &str) -> Vec<Placeholder<'_>> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = template[from..].find('{') {
        let start = from + at;
        from = start + 1;
        let rest = &template[start + 1..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..len];
        let named = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        if named && rest[len..].starts_with('}') {
            let end = start + 1 + len + 1;
            found.push(Placeholder { start, end, name });
            from = end;
        }
    }
    found
}

/// Refuses a template (the config key `key`) with a placeholder not in `allowed` or
/// without one of `required`.
pub fn check_template(
    key: &str,
    template: &str,
    allowed: &[&str],
    required: &[&str],
) -> PluginResult<()> {
    let names = |list: &[&str]| {
        list.iter()
            .map(|n| format!("{{{n}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(unknown) = placeholders(template)
        .into_iter()
        .find(|p| !allowed.contains(&p.name))
    {
        return Err(PluginError::config(format!(
            "`{key}` has the unknown placeholder {{{}}}; it may use {}",
            unknown.name,
            names(allowed)
        )));
    }
    for name in required {
        if !placeholders(template).iter().any(|p| p.name == *name) {
            return Err(PluginError::config(format!(
                "`{key}` must contain the placeholder {{{name}}} (got {template:?})"
            )));
        }
    }
    Ok(())
}

/// `template` with each `{name}` of `values` replaced by its value, in one pass: text
/// substituted for one placeholder (a question containing `{queries}`) is never
/// expanded again.
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut at = 0;
    for p in placeholders(template) {
        if let Some((_, value)) = values.iter().find(|(name, _)| *name == p.name) {
            out.push_str(&template[at..p.start]);
            out.push_str(value);
            at = p.end;
        }
    }
    out.push_str(&template[at..]);
    out
}

/// Every tool output of the episode so far (the `<information>…</information>` blocks),
/// in order, each trimmed, one per line; [`NOTHING_RETRIEVED`] when there is none.
pub fn information(view: &EpisodeView) -> String {
    let outputs: Vec<&str> = view
        .transcript
        .iter()
        .filter_map(|t| t.tool_output.as_deref())
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .collect();
    if outputs.is_empty() {
        NOTHING_RETRIEVED.to_string()
    } else {
        outputs.join("\n")
    }
}

/// The inputs of the episode's calls of the tool `tool`, in order.
pub fn queries<'v>(view: &'v EpisodeView, tool: &str) -> Vec<&'v str> {
    view.transcript
        .iter()
        .filter_map(|t| match &t.action {
            Action::Tool { name, input } if name == tool => Some(input.as_str()),
            _ => None,
        })
        .collect()
}

/// Queries as numbered lines (`1. first query`); [`NO_QUERIES`] when there is none.
pub fn numbered(queries: &[impl AsRef<str>]) -> String {
    if queries.is_empty() {
        return NO_QUERIES.to_string();
    }
    queries
        .iter()
        .enumerate()
        .map(|(i, q)| format!("{}. {}", i + 1, q.as_ref()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The information of a few-shot example: as written, or [`NOTHING_RETRIEVED`] when
/// empty (as in a real first turn).
pub fn example_information(information: &str) -> &str {
    if information.trim().is_empty() {
        NOTHING_RETRIEVED
    } else {
        information
    }
}

/// The start of a prompt: the system message (none when empty), then each worked
/// example as a user turn and the assistant's reply.
pub fn few_shot<'a>(
    system_prompt: &str,
    examples: impl ExactSizeIterator<Item = (String, &'a str)>,
) -> Vec<Message> {
    let mut messages = Vec::with_capacity(2 + 2 * examples.len());
    if !system_prompt.is_empty() {
        messages.push(Message::system(system_prompt));
    }
    for (user, reply) in examples {
        messages.push(Message::user(user));
        messages.push(Message::assistant(reply));
    }
    messages
}

/// A string as TOML writes it: the default of a described config key.
pub fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_named_placeholders_once_and_leaves_other_braces() {
        let filled = fill(
            "Q: {question} {} {\"k\": 1} {other}\n{information}",
            &[("question", "why {information}?"), ("information", "none")],
        );
        assert_eq!(filled, "Q: why {information}? {} {\"k\": 1} {other}\nnone");
    }

    #[test]
    fn check_template_names_the_key_and_the_placeholder() {
        let allowed = ["question", "information"];
        assert!(check_template("t", "{question} {information}", &allowed, &allowed).is_ok());
        let err = check_template("user_template", "{question} {info}", &allowed, &[]).unwrap_err();
        assert_eq!(
            err.message(),
            "`user_template` has the unknown placeholder {info}; it may use {question}, {information}"
        );
        let err = check_template("user_template", "{information}", &allowed, &allowed).unwrap_err();
        assert_eq!(
            err.message(),
            "`user_template` must contain the placeholder {question} (got \"{information}\")"
        );
    }

    #[test]
    fn toml_string_escapes() {
        assert_eq!(toml_string("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
    }
}
