//! `countdown/player`: the agent. It shows the model the numbers, the target and the
//! tools the environment offers, replays its earlier calculations as a chat, and reads
//! `<calc>expr</calc>` as a calculator call and `<answer>expr</answer>` as its answer.

use crate::{game::CALCULATOR, puzzle::Puzzle};
use drmas_plugin_api::{
    parse_config, Action, Agent, EpisodeView, Message, Parsed, PluginError, PluginResult,
};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlayerConfig {
    #[serde(default = "default_system_prompt")]
    pub system_prompt: String,
    /// The name of the environment's calculator tool.
    #[serde(default = "default_tool")]
    pub tool: String,
}

pub fn default_system_prompt() -> String {
    "You play Countdown: combine some of the given numbers with + - * / and parentheses \
     to reach the target exactly. Each number may be used at most once."
        .to_string()
}

pub fn default_tool() -> String {
    CALCULATOR.to_string()
}

pub struct Player {
    config: PlayerConfig,
}

impl Player {
    pub fn from_config(text: &str) -> PluginResult<Self> {
        Ok(Self {
            config: parse_config(text)?,
        })
    }

    /// The first user message: the puzzle, the tools and the answer format.
    fn instructions(&self, view: &EpisodeView) -> PluginResult<String> {
        let puzzle = Puzzle::from_task(&view.task).map_err(PluginError::input)?;
        let mut text = format!(
            "Numbers: {}\nTarget: {}\n",
            puzzle.numbers_text(),
            puzzle.target
        );
        // Only the tools the experiment's environment really offers are mentioned:
        // without an environment the model must answer directly.
        let calculator = view.tools.iter().find(|t| t.name == self.config.tool);
        if !view.tools.is_empty() {
            text.push_str("\nTools:\n");
            for tool in &view.tools {
                text.push_str(&format!("- {}: {}", tool.name, tool.description));
                if let Some(format) = &tool.input_format {
                    text.push_str(&format!(" (input: {format})"));
                }
                text.push('\n');
            }
        }
        if calculator.is_some() {
            text.push_str("\nTo use the calculator, write <calc>expression</calc>.");
        }
        text.push_str("\nWhen you have it, write <answer>expression</answer>.");
        Ok(text)
    }
}

impl Agent for Player {
    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        let mut messages = vec![
            Message::system(self.config.system_prompt.as_str()),
            Message::user(self.instructions(view)?),
        ];
        // Earlier turns as a conversation: what the model wrote, what the tool said.
        for turn in view.transcript.iter().filter(|t| t.agent == view.agent) {
            messages.push(Message::assistant(turn.completion.as_str()));
            if let Some(output) = &turn.tool_output {
                messages.push(Message::user(format!("Calculator: {output}")));
            }
        }
        Ok(messages)
    }

    fn parse(&self, _view: &EpisodeView, completion: &str) -> PluginResult<Parsed> {
        // The first tag decides: a model that calculates and then "answers" in the same
        // turn has not seen the result yet.
        Ok(match first_tag(completion, &["calc", "answer"]) {
            Some(("calc", expr)) => Parsed::valid(Action::tool(self.config.tool.as_str(), expr)),
            Some((_, expr)) => Parsed::valid(Action::finish(expr)),
            None => Parsed::invalid(
                Action::invalid("no <calc> or <answer>"),
                "expected <calc>expression</calc> or <answer>expression</answer>",
            ),
        })
    }

    fn tools_used(&self) -> Vec<String> {
        vec![self.config.tool.clone()]
    }
}

/// The name and trimmed content of the first `<name>...</name>` in `text`, unless that
/// content is empty.
/// The closing tag may be missing at the very end: an experiment usually stops
/// generation at `</calc>` and `</answer>`, and the stop string may be cut off.
fn first_tag<'t>(text: &'t str, names: &[&'static str]) -> Option<(&'static str, &'t str)> {
    let (start, name) = names
        .iter()
        .filter_map(|&name| Some((text.find(&format!("<{name}>"))?, name)))
        .min()?;
    let body = &text[start + name.len() + 2..];
    let content = match body.find(&format!("</{name}>")) {
        Some(end) => &body[..end],
        None => body,
    };
    let content = content.trim();
    (!content.is_empty()).then_some((name, content))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::Game;
    use drmas_plugin_api::{Environment, Task, TurnRecord};

    fn view(transcript: Vec<TurnRecord>) -> EpisodeView {
        let task = Task {
            id: "t1".into(),
            question: "Use 3, 5, 8 and 25 to reach the target 48.".into(),
            ..Task::default()
        };
        let game = Game::from_config("").unwrap();
        EpisodeView {
            task: game.prepare(&task).unwrap(),
            agent: "player".into(),
            tools: game.tools(),
            transcript,
            ..EpisodeView::default()
        }
    }

    fn parse(completion: &str) -> Parsed {
        let player = Player::from_config("").unwrap();
        player.parse(&view(vec![]), completion).unwrap()
    }

    #[test]
    fn completions_become_calls_answers_or_invalid_turns() {
        assert_eq!(
            parse("Let me try <calc>(25 - 8) * 3</calc>"),
            Parsed::valid(Action::tool("calculator", "(25 - 8) * 3"))
        );
        assert_eq!(
            parse("<answer> (25 - 8) * 3 - 3 </answer> done"),
            Parsed::valid(Action::finish("(25 - 8) * 3 - 3"))
        );
        // Cut at the stop string.
        assert_eq!(
            parse("<calc>3 + 5"),
            Parsed::valid(Action::tool("calculator", "3 + 5"))
        );
        // The first tag decides.
        assert_eq!(
            parse("<calc>3 + 5</calc> so <answer>8</answer>"),
            Parsed::valid(Action::tool("calculator", "3 + 5"))
        );
        let invalid = Parsed::invalid(
            Action::invalid("no <calc> or <answer>"),
            "expected <calc>expression</calc> or <answer>expression</answer>",
        );
        assert_eq!(parse("The answer is 48."), invalid);
        assert_eq!(parse("<answer>  </answer>"), invalid);
    }

    #[test]
    fn the_prompt_lists_numbers_tools_and_earlier_calculations() {
        let player = Player::from_config("system_prompt = \"Play.\"").unwrap();
        let earlier = TurnRecord {
            agent: "player".into(),
            completion: "<calc>25 - 8".into(),
            action: Action::tool("calculator", "25 - 8"),
            valid: true,
            tool_output: Some("25 - 8 = 17 (3 calls left)".into()),
            ..TurnRecord::default()
        };
        let messages = player.render(&view(vec![earlier])).unwrap();
        assert_eq!(
            messages,
            vec![
                Message::system("Play."),
                Message::user(
                    "Numbers: 3, 5, 8, 25\nTarget: 48\n\nTools:\n- calculator: computes an \
                     expression exactly, using only the task's numbers, each at most once \
                     (input: an arithmetic expression with + - * / and parentheses, e.g. \
                     (25 - 8) * 3)\n\nTo use the calculator, write <calc>expression</calc>.\n\
                     When you have it, write <answer>expression</answer>."
                ),
                Message::assistant("<calc>25 - 8"),
                Message::user("Calculator: 25 - 8 = 17 (3 calls left)"),
            ]
        );
    }

    #[test]
    fn without_an_environment_the_prompt_offers_no_tool() {
        let player = Player::from_config("").unwrap();
        let mut view = view(vec![]);
        view.tools.clear();
        let text = player.render(&view).unwrap()[1].content.clone();
        assert_eq!(
            text,
            "Numbers: 3, 5, 8, 25\nTarget: 48\n\nWhen you have it, write <answer>expression</answer>."
        );
        assert_eq!(player.tools_used(), ["calculator"]);
        let err = Player::from_config("max_call = 3").err().unwrap();
        assert_eq!(
            err.message,
            "unknown field `max_call`, expected `system_prompt` or `tool` (at `max_call`)"
        );
    }
}
