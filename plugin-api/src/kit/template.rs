//! Prompt templates with `{name}` placeholders, and few-shot prompts.
//!
//! A placeholder is `{` + a name + `}`, the name being ASCII letters, digits and `_`,
//! starting with a letter or `_`. Every other brace is plain text, so LaTeX (`\boxed{}`,
//! `\frac{1}{2}`) and JSON (`{"a": 1}`) pass through untouched. `{{name}}` is the
//! literal text `{name}`, for a template that must show braces around a word
//! (`\text{{cm}}` renders as `\text{cm}`).

use crate::{Message, PluginError, PluginResult};

/// A placeholder found in a template: its byte range and name, or an escaped
/// `{{name}}` (rendered as `{name}`).
struct Found<'a> {
    start: usize,
    end: usize,
    name: &'a str,
    escaped: bool,
}

fn is_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Every placeholder and escaped placeholder of `template`, in order.
fn scan(template: &str) -> Vec<Found<'_>> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = template[from..].find('{') {
        let start = from + at;
        from = start + 1;
        let rest = &template[start + 1..];
        // `{{name}}`: an escape, checked first so `{{` never starts a placeholder.
        if let Some(inner) = rest.strip_prefix('{') {
            let len = inner.find('}').unwrap_or(inner.len());
            if is_name(&inner[..len]) && inner[len..].starts_with("}}") {
                let end = start + 2 + len + 2;
                found.push(Found {
                    start,
                    end,
                    name: &inner[..len],
                    escaped: true,
                });
                from = end;
            }
            continue;
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if is_name(&rest[..len]) && rest[len..].starts_with('}') {
            let end = start + 1 + len + 1;
            found.push(Found {
                start,
                end,
                name: &rest[..len],
                escaped: false,
            });
            from = end;
        }
    }
    found
}

/// The names of the placeholders of `template`, in order, repeats included (an
/// escaped `{{name}}` is not a placeholder).
///
/// ```
/// use drmas_plugin_api::kit::placeholders;
///
/// let names = placeholders(r"Q: {question} \boxed{} {{literal}} {question}");
/// assert_eq!(names, ["question", "question"]);
/// ```
pub fn placeholders(template: &str) -> Vec<&str> {
    scan(template)
        .into_iter()
        .filter(|f| !f.escaped)
        .map(|f| f.name)
        .collect()
}

/// `template` with each `{name}` of `values` replaced by its value, in one pass: text
/// substituted for one placeholder (a question containing `{previous}`) is never
/// expanded again. A placeholder without a value stays as it is; `{{name}}` becomes
/// `{name}`. Check the template first with [`Template::new`], which refuses
/// placeholders the component does not fill.
///
/// ```
/// use drmas_plugin_api::kit::fill;
///
/// let text = fill(
///     r"{question} Put the answer in \boxed{}.",
///     &[("question", "What is {x} + 1?")],
/// );
/// assert_eq!(text, r"What is {x} + 1? Put the answer in \boxed{}.");
/// ```
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut at = 0;
    for p in scan(template) {
        let replacement = if p.escaped {
            Some(&template[p.start + 1..p.end - 1])
        } else {
            values
                .iter()
                .find(|(name, _)| *name == p.name)
                .map(|(_, value)| *value)
        };
        if let Some(text) = replacement {
            out.push_str(&template[at..p.start]);
            out.push_str(text);
            at = p.end;
        }
    }
    out.push_str(&template[at..]);
    out
}

/// A template checked against the placeholders a component fills: built from the
/// config key `key`, it uses only `allowed` placeholders and every `required` one.
/// A misspelt placeholder (`{questoin}`) is a config error when the component is
/// created, instead of text the model reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    text: String,
}

impl Template {
    /// Checks `text`, the value of the config key `key`. The error names the key, the
    /// placeholder and the placeholders allowed (or the one missing).
    ///
    /// ```
    /// use drmas_plugin_api::kit::Template;
    ///
    /// let allowed = ["question", "previous"];
    /// let retry = Template::new("retry_template", "{question}\nWrong: {previous}", &allowed, &allowed)?;
    /// assert_eq!(
    ///     retry.fill(&[("question", "2+2?"), ("previous", "5")]),
    ///     "2+2?\nWrong: 5"
    /// );
    ///
    /// let err = Template::new("retry_template", "{questoin} {previous}", &allowed, &[]).unwrap_err();
    /// assert_eq!(
    ///     err.message(),
    ///     "`retry_template` has the unknown placeholder {questoin}; it may use {question}, {previous}"
    /// );
    /// # Ok::<(), drmas_plugin_api::PluginError>(())
    /// ```
    pub fn new(key: &str, text: &str, allowed: &[&str], required: &[&str]) -> PluginResult<Self> {
        debug_assert!(
            required.iter().all(|r| allowed.contains(r)),
            "a required placeholder must be allowed"
        );
        let used = placeholders(text);
        if let Some(unknown) = used.iter().find(|name| !allowed.contains(name)) {
            let may = if allowed.is_empty() {
                "it may use none".to_string()
            } else {
                format!("it may use {}", braced(allowed))
            };
            return Err(PluginError::config(format!(
                "`{key}` has the unknown placeholder {{{unknown}}}; {may}"
            )));
        }
        if let Some(missing) = required.iter().find(|name| !used.contains(name)) {
            return Err(PluginError::config(format!(
                "`{key}` must contain the placeholder {{{missing}}} (got {text:?})"
            )));
        }
        Ok(Self {
            text: text.to_string(),
        })
    }

    /// The template with its placeholders replaced by `values` (see [`fill`]).
    pub fn fill(&self, values: &[(&str, &str)]) -> String {
        fill(&self.text, values)
    }

    /// The template's text, as configured.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// `{a}, {b}`.
fn braced(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{{{n}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The start of a few-shot prompt: the system message (none when `system_prompt` is
/// empty, so the chat template's own default applies), then each worked example as a
/// user turn and the assistant's reply to it. Push the real user turn after it.
///
/// ```
/// use drmas_plugin_api::{kit::few_shot, Message};
///
/// let mut messages = few_shot("Answer briefly.", [("1+1?", "2"), ("2+2?", "4")]);
/// messages.push(Message::user("3+3?"));
/// assert_eq!(
///     messages,
///     [
///         Message::system("Answer briefly."),
///         Message::user("1+1?"),
///         Message::assistant("2"),
///         Message::user("2+2?"),
///         Message::assistant("4"),
///         Message::user("3+3?"),
///     ]
/// );
/// assert_eq!(few_shot("", [("q", "a")])[0], Message::user("q"));
/// ```
pub fn few_shot<U, R>(
    system_prompt: &str,
    examples: impl IntoIterator<Item = (U, R)>,
) -> Vec<Message>
where
    U: Into<String>,
    R: Into<String>,
{
    let mut messages = Vec::new();
    if !system_prompt.is_empty() {
        messages.push(Message::system(system_prompt));
    }
    for (user, reply) in examples {
        messages.push(Message::user(user));
        messages.push(Message::assistant(reply));
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_named_placeholders_once_and_leaves_other_braces() {
        let filled = fill(
            "Q: {question} {} {\"k\": 1} {other} \\frac{1}{2}\n{information}",
            &[("question", "why {information}?"), ("information", "none")],
        );
        assert_eq!(
            filled,
            "Q: why {information}? {} {\"k\": 1} {other} \\frac{1}{2}\nnone"
        );
    }

    #[test]
    fn doubled_braces_around_a_name_are_literal_text() {
        let t = "\\text{{cm}} {question} {{question}} {{ x }} {{}}";
        assert_eq!(placeholders(t), ["question"]);
        assert_eq!(
            fill(t, &[("question", "Q")]),
            "\\text{cm} Q {question} {{ x }} {{}}"
        );
        // An escape is not a use: a required placeholder written only escaped is missing.
        let err = Template::new("t", "{{question}}", &["question"], &["question"]).unwrap_err();
        assert_eq!(
            err.message(),
            "`t` must contain the placeholder {question} (got \"{{question}}\")"
        );
    }

    #[test]
    fn a_placeholder_at_the_very_end_and_unclosed_braces() {
        assert_eq!(fill("a {x}", &[("x", "1")]), "a 1");
        assert_eq!(fill("a {x", &[("x", "1")]), "a {x");
        assert_eq!(fill("{{x}", &[("x", "1")]), "{1");
        assert_eq!(fill("é{x}é", &[("x", "ü")]), "éüé");
    }

    #[test]
    fn unknown_and_missing_placeholders_are_refused_with_the_key() {
        let allowed = ["question", "information"];
        assert!(Template::new("t", "{question} {information}", &allowed, &allowed).is_ok());
        let err = Template::new("user_template", "{question} {info}", &allowed, &[]).unwrap_err();
        assert_eq!(err.kind, crate::PluginErrorKind::Config);
        assert_eq!(
            err.message(),
            "`user_template` has the unknown placeholder {info}; it may use {question}, {information}"
        );
        let err = Template::new("user_template", "{information}", &allowed, &allowed).unwrap_err();
        assert_eq!(
            err.message(),
            "`user_template` must contain the placeholder {question} (got \"{information}\")"
        );
        let err = Template::new("system", "hi {name}", &[], &[]).unwrap_err();
        assert_eq!(
            err.message(),
            "`system` has the unknown placeholder {name}; it may use none"
        );
    }

    #[test]
    fn a_template_fills_what_it_was_checked_for() {
        let t = Template::new("t", "{a}-{b}-{a}", &["a", "b"], &["a"]).unwrap();
        assert_eq!(t.fill(&[("a", "1"), ("b", "2")]), "1-2-1");
        assert_eq!(t.as_str(), "{a}-{b}-{a}");
    }

    #[test]
    fn few_shot_takes_owned_and_borrowed_text() {
        let owned = vec![(String::from("q"), String::from("a"))];
        assert_eq!(
            few_shot("s", owned),
            [
                Message::system("s"),
                Message::user("q"),
                Message::assistant("a")
            ]
        );
        assert!(few_shot("", Vec::<(&str, &str)>::new()).is_empty());
    }
}
