//! `remote/agent`: an agent for environments it knows nothing about but their text. It
//! sees the task (or the environment's first observation, which `remote/openenv` puts
//! in `{question}` with `reset_question`), then its own turns and the observations that
//! answered them as a chat, and either acts — the last `<action>…</action>` of its
//! completion (its closing tag may be cut off by a stop string) is a call of the
//! environment's step tool — or, with `handoff_to`, writes a
//! plan that the named agent reads before it acts.

use drmas_plugin_api::kit::{Template, blocks};
use drmas_plugin_api::{
    Action, Agent, EpisodeView, Message, Parsed, PluginError, PluginResult, config_table,
};

pub const DEFAULT_SYSTEM_PROMPT: &str = "You act in an environment. Read the task and what \
     the environment answered so far, think briefly, then act.";
pub const DEFAULT_USER_TEMPLATE: &str = "{question}\n\n{tools}Write your action inside \
     <action></action>.";

const USER_PLACEHOLDERS: [&str; 2] = ["question", "tools"];
const USER_REQUIRED: [&str; 1] = ["question"];

config_table! {
    /// `[agents.config]` of `remote/agent`.
    #[derive(Debug, Clone)]
    pub struct ActorConfig {
        /// the system message of every turn; "" for none
        pub system_prompt: String = DEFAULT_SYSTEM_PROMPT.to_string(),
        /// the first user turn: {question} is the task's question, {tools} lists the
        /// environment's tools as a paragraph ending in a blank line
        pub user_template: String = DEFAULT_USER_TEMPLATE.to_string(),
        /// the tag around the action: its last block is the step tool's input; "": the
        /// whole completion is
        pub tag: String = "action".to_string(),
        /// the environment's tool an action calls (`remote/openenv`'s `tool`)
        pub tool: String = "step".to_string(),
        /// the agent this one hands its completion to instead of acting ("": it acts)
        pub handoff_to: String = String::new(),
    }
}

#[derive(Debug)]
pub struct RemoteAgent {
    config: ActorConfig,
    user: Template,
}

impl RemoteAgent {
    pub fn new(config: ActorConfig) -> PluginResult<Self> {
        let user = Template::new(
            "user_template",
            &config.user_template,
            &USER_PLACEHOLDERS,
            &USER_REQUIRED,
        )?;
        let tag_ok = config.tag.is_empty()
            || config
                .tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !tag_ok {
            return Err(PluginError::config(format!(
                "tag: `{}` is not a tag name (letters, digits, `_` and `-`)",
                config.tag
            )));
        }
        Ok(Self { config, user })
    }

    fn tools_text(view: &EpisodeView) -> String {
        if view.tools.is_empty() {
            return String::new();
        }
        let mut text = String::from("Tools:\n");
        for tool in &view.tools {
            text.push_str(&format!("- {}: {}", tool.name, tool.description));
            if let Some(format) = &tool.input_format {
                text.push_str(&format!(" (input: {format})"));
            }
            text.push('\n');
        }
        text.push('\n');
        text
    }
}

/// Appends `content` as a `role` message, joined to the previous one when it has the
/// same role: chat templates that insist on alternating roles accept the result.
fn push(messages: &mut Vec<Message>, role: &str, content: String) {
    match messages.last_mut() {
        Some(last) if last.role == role => {
            last.content.push_str("\n\n");
            last.content.push_str(&content);
        }
        _ => messages.push(Message::new(role, content)),
    }
}

impl Agent for RemoteAgent {
    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        let mut messages = Vec::new();
        if !self.config.system_prompt.is_empty() {
            messages.push(Message::system(self.config.system_prompt.clone()));
        }
        let tools = Self::tools_text(view);
        push(
            &mut messages,
            "user",
            self.user
                .fill(&[("question", &view.task.question), ("tools", &tools)]),
        );
        for turn in &view.transcript {
            if turn.agent == view.agent {
                push(&mut messages, "assistant", turn.completion.clone());
            } else {
                push(
                    &mut messages,
                    "user",
                    format!("{} wrote:\n{}", turn.agent, turn.completion.trim()),
                );
            }
            if let Some(observation) = &turn.tool_output {
                push(&mut messages, "user", format!("Observation: {observation}"));
            }
        }
        Ok(messages)
    }

    fn parse(&self, _view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        if !self.config.handoff_to.is_empty() {
            return Ok(Parsed::valid(Action::handoff(&self.config.handoff_to)));
        }
        let tag = &self.config.tag;
        if tag.is_empty() {
            let action = completion.trim();
            return Ok(if action.is_empty() {
                Parsed::invalid(
                    Action::invalid("an empty completion"),
                    "an empty completion",
                )
            } else {
                Parsed::valid(Action::tool(&self.config.tool, action))
            });
        }
        // The last block, or one cut off at the end: with `stop = ["</action>"]` the
        // completion ends before its closing tag.
        let found = blocks(completion, tag);
        let last = match (found.last(), found.cut) {
            (Some(b), Some(cut)) if cut.start > b.start => Some(cut),
            (Some(b), _) => Some(b),
            (None, cut) => cut,
        };
        Ok(match last.map(|b| b.content) {
            Some(action) if !action.trim().is_empty() => {
                Parsed::valid(Action::tool(&self.config.tool, action.trim()))
            }
            _ => Parsed::invalid(
                Action::invalid(format!("no <{tag}>…</{tag}> with an action")),
                format!("no <{tag}>…</{tag}> with an action"),
            ),
        })
    }

    fn linked_agents(&self) -> Vec<String> {
        if self.config.handoff_to.is_empty() {
            Vec::new()
        } else {
            vec![self.config.handoff_to.clone()]
        }
    }

    fn tools_used(&self) -> Vec<String> {
        if self.config.handoff_to.is_empty() {
            vec![self.config.tool.clone()]
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drmas_plugin_api::{Task, ToolSpec, TurnRecord, parse_config};

    fn agent(text: &str) -> RemoteAgent {
        RemoteAgent::new(parse_config(text).unwrap()).unwrap()
    }

    fn view(agent: &str, transcript: Vec<TurnRecord>) -> EpisodeView {
        EpisodeView {
            agent: agent.into(),
            task: Task {
                question: "Numbers: 2, 3. Target: 6.".into(),
                ..Task::default()
            },
            tools: vec![ToolSpec::new("step", "one step").with_input_format("an expression")],
            transcript,
            ..EpisodeView::default()
        }
    }

    fn turn(agent: &str, completion: &str, observation: Option<&str>) -> TurnRecord {
        TurnRecord {
            agent: agent.into(),
            completion: completion.into(),
            tool_output: observation.map(str::to_string),
            ..TurnRecord::default()
        }
    }

    #[test]
    fn the_chat_holds_the_task_the_turns_and_the_observations() {
        let a = agent("system_prompt = \"S\"");
        let v = view(
            "actor",
            vec![
                turn("planner", "multiply them ", None),
                turn("actor", "<action>2*3+1</action>", Some("7, not 6.")),
                turn("planner", "drop the +1", None),
            ],
        );
        let m = a.render(&v).unwrap();
        let roles: Vec<&str> = m.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert_eq!(
            m[1].content,
            "Numbers: 2, 3. Target: 6.\n\nTools:\n- step: one step (input: an expression)\n\n\
             Write your action inside <action></action>.\n\nplanner wrote:\nmultiply them"
        );
        assert_eq!(m[2].content, "<action>2*3+1</action>");
        assert_eq!(
            m[3].content,
            "Observation: 7, not 6.\n\nplanner wrote:\ndrop the +1"
        );
    }

    #[test]
    fn the_last_action_block_is_a_step_and_none_is_invalid() {
        let a = agent("");
        let v = view("actor", vec![]);
        let p = a
            .parse(&v, "<action>1</action> no: <action> 2*3 </action>")
            .unwrap();
        assert_eq!(p, Parsed::valid(Action::tool("step", "2*3")));
        let p = a.parse(&v, "I give up").unwrap();
        assert!(!p.valid);
        assert_eq!(
            p.action,
            Action::invalid("no <action>…</action> with an action")
        );
        assert!(!a.parse(&v, "<action> </action>").unwrap().valid);
        // Cut off by the stop string `</action>`, after an earlier closed block.
        let p = a
            .parse(&v, "<action>1</action> then <action>2 * 3")
            .unwrap();
        assert_eq!(p, Parsed::valid(Action::tool("step", "2 * 3")));
        // Without a tag the whole completion is the action.
        let whole = agent("tag = \"\"");
        let p = whole.parse(&v, " 2 * 3\n").unwrap();
        assert_eq!(p, Parsed::valid(Action::tool("step", "2 * 3")));
        assert!(!whole.parse(&v, "  ").unwrap().valid);
    }

    #[test]
    fn a_planner_hands_off_whatever_it_wrote() {
        let a = agent("handoff_to = \"actor\"");
        let p = a.parse(&view("planner", vec![]), "just try 2*3").unwrap();
        assert_eq!(p, Parsed::valid(Action::handoff("actor")));
        assert_eq!(a.linked_agents(), ["actor"]);
        assert!(a.tools_used().is_empty());
        assert_eq!(agent("").tools_used(), ["step"]);
    }

    #[test]
    fn bad_templates_and_tags_are_refused_at_their_key() {
        let err =
            RemoteAgent::new(parse_config("user_template = \"{task}\"").unwrap()).unwrap_err();
        assert_eq!(
            err.message(),
            "`user_template` has the unknown placeholder {task}; it may use {question}, {tools}"
        );
        let err = RemoteAgent::new(parse_config("tag = \"a b\"").unwrap()).unwrap_err();
        assert_eq!(
            err.message(),
            "tag: `a b` is not a tag name (letters, digits, `_` and `-`)"
        );
    }
}
