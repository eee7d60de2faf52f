//! Prompt templates: `{name}` placeholders filled in one pass, so text substituted
//! for one placeholder (a question containing `{previous}`) is never expanded again.
//! Any other braces (LaTeX such as `\boxed{}`) are left alone.

use drmas_plugin_api::{PluginError, PluginResult};

/// `template` with each `{name}` of `values` replaced by its value.
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let hit = values.iter().find_map(|(name, value)| {
            let placeholder_len = name.len() + 2;
            (tail.len() >= placeholder_len
                && tail[1..].starts_with(name)
                && tail[1 + name.len()..].starts_with('}'))
            .then_some((*value, placeholder_len))
        });
        match hit {
            Some((value, len)) => {
                out.push_str(value);
                rest = &tail[len..];
            }
            None => {
                out.push('{');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Refuses a template (the config key `key`) that lacks one of `required`.
pub fn require(key: &str, template: &str, required: &[&str]) -> PluginResult<()> {
    for name in required {
        if !template.contains(&format!("{{{name}}}")) {
            return Err(PluginError::config(format!(
                "`{key}` must contain the placeholder {{{name}}} (got {template:?})"
            )));
        }
    }
    Ok(())
}

/// The start of a few-shot prompt: the system message (none when empty), then each
/// worked example as a user turn and the assistant's reply.
pub fn few_shot<'a>(
    system_prompt: &str,
    examples: impl ExactSizeIterator<Item = (String, &'a str)>,
) -> Vec<drmas_plugin_api::Message> {
    use drmas_plugin_api::Message;
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
