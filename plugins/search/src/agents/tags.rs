//! The validity rules the three search agents share on top of the kit's tag scanning
//! ([`drmas_plugin_api::kit::tags`]): exactly one block of the agent's tag, and
//! `<think>` blocks as the `think` setting allows.

use drmas_plugin_api::kit::{Block, ConfigType, blocks};
use drmas_plugin_api::{Action, Parsed};
use serde::{Deserialize, Serialize};

/// Whether a completion may, must or must not reason in a `<think>…</think>` block
/// before its tag (the `think` key of every search agent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Think {
    /// At most one `<think>` block, and if there is one it comes before the tag.
    #[default]
    Optional,
    /// Exactly one `<think>` block, before the tag.
    Required,
    /// No `<think>` block.
    Forbidden,
}

impl Think {
    pub const ALL: [Think; 3] = [Think::Optional, Think::Required, Think::Forbidden];

    /// The name the config uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Think::Optional => "optional",
            Think::Required => "required",
            Think::Forbidden => "forbidden",
        }
    }
}

impl ConfigType for Think {
    fn config_type() -> String {
        "string".to_string()
    }
}

impl Serialize for Think {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

// By hand rather than derived: serde's "unknown variant" message would not say which
// key is wrong, and this type is the value of every agent's `think` key.
impl<'de> Deserialize<'de> for Think {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Think::ALL
            .into_iter()
            .find(|t| t.as_str() == name)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "`think` must be \"optional\", \"required\" or \"forbidden\" (got {name:?})"
                ))
            })
    }
}

/// A completion read for one agent tag: its blocks and the format rules it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading<'a> {
    /// The last complete block of the agent's tag: the one that decides the action.
    pub last: Option<Block<'a>>,
    /// Why the completion is invalid, one entry per broken rule (empty when valid as
    /// far as the format goes; the agent adds its own rules about the content).
    pub issues: Vec<String>,
}

/// Reads `completion` for the tag `tag` under the `think` rule: more than one
/// `<tag>` block, an unpaired `<tag>` (next to a complete block) and each broken
/// `think` rule are issues. A missing block is left to the agent, which says what it
/// does instead.
pub fn read<'a>(completion: &'a str, tag: &str, think: Think) -> Reading<'a> {
    let found = blocks(completion, tag);
    let mut issues = Vec::new();
    let n = found.complete.len();
    if n > 1 {
        issues.push(format!(
            "{n} <{tag}> blocks; exactly one is allowed (the last one was used)"
        ));
    }
    if found.unpaired > 0 && !found.complete.is_empty() {
        issues.push(format!("a <{tag}> or </{tag}> without its partner"));
    }
    let first = found.complete.first().map(|b| b.start);
    issues.extend(think_issues(completion, think, tag, first));
    Reading {
        last: found.last(),
        issues,
    }
}

/// The `think` rules `completion` breaks; `first_tag` is where the agent's first
/// block starts, which every `<think>` block must end before.
fn think_issues(
    completion: &str,
    think: Think,
    tag: &str,
    first_tag: Option<usize>,
) -> Vec<String> {
    let thoughts = blocks(completion, "think");
    let n = thoughts.complete.len();
    let mut issues = Vec::new();
    match think {
        Think::Forbidden => {
            if n > 0 || thoughts.unpaired > 0 {
                issues.push("a <think> block, but think = \"forbidden\"".to_string());
            }
            return issues;
        }
        Think::Optional if n > 1 => {
            issues.push(format!(
                "{n} <think> blocks; at most one is allowed (think = \"optional\")"
            ));
        }
        Think::Required if n == 0 => {
            issues.push("no <think>…</think> block, but think = \"required\"".to_string());
        }
        Think::Required if n > 1 => {
            issues.push(format!(
                "{n} <think> blocks; exactly one is required (think = \"required\")"
            ));
        }
        Think::Optional | Think::Required => {}
    }
    if thoughts.unpaired > 0 {
        issues.push("a <think> or </think> without its partner".to_string());
    }
    if let Some(first_tag) = first_tag
        && thoughts.complete.iter().any(|t| t.end > first_tag)
    {
        issues.push(format!(
            "the <think> block must come before the <{tag}> block"
        ));
    }
    issues
}

/// A [`Parsed`] for `action`: valid when there are no issues, else invalid with the
/// issues joined into its note.
pub fn parsed(action: Action, issues: Vec<String>) -> Parsed {
    if issues.is_empty() {
        Parsed::valid(action)
    } else {
        Parsed::invalid(action, issues.join("; "))
    }
}
