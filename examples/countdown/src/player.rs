//! `countdown/player`: the agent. It shows the model the numbers, the target and the
//! tools the environment offers, replays its earlier calculations as a chat, and reads
//! `<calc>expr</calc>` as a calculator call and `<answer>expr</answer>` as its answer.

use crate::{game::CALCULATOR, puzzle::Puzzle};
use drmas_plugin_api::kit::{few_shot, first_block, Template};
use drmas_plugin_api::{
    config_table, Action, Agent, EpisodeView, Message, Parsed, PluginError, PluginResult,
};

pub const DEFAULT_SYSTEM_PROMPT: &str =
    "You play Countdown: combine some of the given numbers with + - * / and parentheses \
     to reach the target exactly. Each number may be used at most once.";
pub const DEFAULT_USER_TEMPLATE: &str = "Numbers: {numbers}\nTarget: {target}\n\n{tools}\
     When you have it, write <answer>expression</answer>.";

/// The placeholders `user_template` may use.
const USER_PLACEHOLDERS: [&str; 3] = ["numbers", "target", "tools"];
/// The ones it must use: without the puzzle there is no game to play.
const USER_REQUIRED: [&str; 2] = ["numbers", "target"];

config_table! {
    /// The `[agents.config]` table of `countdown/player`.
    pub struct PlayerConfig {
        /// the system message of every turn; "" for none
        pub system_prompt: String = DEFAULT_SYSTEM_PROMPT.to_string(),
        /// the first user turn: {numbers} and {target} are the puzzle's, {tools} lists
        /// the environment's tools and how to call the calculator, as a paragraph
        /// ending in a blank line (empty without an environment)
        pub user_template: String = DEFAULT_USER_TEMPLATE.to_string(),
        /// the environment's calculator tool, which <calc> calls
        pub tool: String = CALCULATOR.to_string(),
    }
}

pub struct Player {
    config: PlayerConfig,
    user: Template,
}

impl Player {
    pub fn new(config: PlayerConfig) -> PluginResult<Self> {
        // Checked when the component is created: a misspelt placeholder fails
        // `drmas check` instead of reaching the model as text.
        let user = Template::new(
            "user_template",
            &config.user_template,
            &USER_PLACEHOLDERS,
            &USER_REQUIRED,
        )?;
        Ok(Self { config, user })
    }

    /// The first user message: the puzzle, the tools and the answer format.
    fn instructions(&self, view: &EpisodeView) -> PluginResult<String> {
        let puzzle = Puzzle::from_task(&view.task).map_err(PluginError::input)?;
        Ok(self.user.fill(&[
            ("numbers", &puzzle.numbers_text()),
            ("target", &puzzle.target.to_string()),
            ("tools", &self.tools_text(view)),
        ]))
    }

    /// What `{tools}` stands for. Only the tools the experiment's environment really
    /// offers are mentioned: without an environment the model must answer directly.
    fn tools_text(&self, view: &EpisodeView) -> String {
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
        if view.tools.iter().any(|t| t.name == self.config.tool) {
            text.push_str("To use the calculator, write <calc>expression</calc>.\n");
        }
        text
    }
}

impl Agent for Player {
    fn render(&self, view: &EpisodeView) -> PluginResult<Vec<Message>> {
        // The system message ("" for none, as every kit prompt), no worked examples.
        let no_examples = std::iter::empty::<(&str, &str)>();
        let mut messages = few_shot(&self.config.system_prompt, no_examples);
        messages.push(Message::user(self.instructions(view)?));
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
        // turn has not seen the result yet. A block cut off at the end counts: an
        // experiment usually stops generation at `</calc>` and `</answer>`, and the
        // stop string may be cut off.
        let tag = first_block(completion, &["calc", "answer"])
            .map(|(name, block)| (name, block.content.trim()))
            .filter(|(_, expr)| !expr.is_empty());
        Ok(match tag {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::{Game, GameConfig};
    use drmas_plugin_api::{parse_config, Environment, Task, TurnRecord};

    fn make(config: &str) -> PluginResult<Player> {
        Player::new(parse_config(config)?)
    }

    fn view(transcript: Vec<TurnRecord>) -> EpisodeView {
        let task = Task {
            id: "t1".into(),
            question: "Use 3, 5, 8 and 25 to reach the target 48.".into(),
            ..Task::default()
        };
        let game = Game::new(GameConfig::default()).unwrap();
        EpisodeView {
            task: game.prepare(&task).unwrap(),
            agent: "player".into(),
            tools: game.tools(),
            transcript,
            ..EpisodeView::default()
        }
    }

    fn parse(completion: &str) -> Parsed {
        let player = make("").unwrap();
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
        // Small models' spellings of the tags are read too.
        assert_eq!(
            parse("< Answer > 8 + 3 * 5 + 25 </ANSWER>"),
            Parsed::valid(Action::finish("8 + 3 * 5 + 25"))
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
        let player = make("system_prompt = \"Play.\"").unwrap();
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
        let player = make("").unwrap();
        let mut view = view(vec![]);
        view.tools.clear();
        let text = player.render(&view).unwrap()[1].content.clone();
        assert_eq!(
            text,
            "Numbers: 3, 5, 8, 25\nTarget: 48\n\nWhen you have it, write <answer>expression</answer>."
        );
        assert_eq!(player.tools_used(), ["calculator"]);
    }

    #[test]
    fn bad_tables_and_templates_are_refused_when_the_player_is_made() {
        let err = make("max_call = 3").err().unwrap();
        assert_eq!(
            err.message,
            "unknown field `max_call`, expected one of `system_prompt`, `user_template`, \
             `tool` (at `max_call`)"
        );
        let err = make("user_template = \"{numbers} -> {taget}\"")
            .err()
            .unwrap();
        assert_eq!(
            err.message,
            "`user_template` has the unknown placeholder {taget}; it may use {numbers}, \
             {target}, {tools}"
        );
        let err = make("user_template = \"Reach {target}.\"").err().unwrap();
        assert_eq!(
            err.message,
            "`user_template` must contain the placeholder {numbers} (got \"Reach {target}.\")"
        );
    }

    #[test]
    fn a_template_of_its_own_places_the_puzzle_and_tools() {
        let player =
            make("system_prompt = \"\"\nuser_template = \"{tools}Reach {target} from {numbers}.\"")
                .unwrap();
        let mut view = view(vec![]);
        view.tools.clear();
        // No system message: the chat template's own default applies.
        assert_eq!(
            player.render(&view).unwrap(),
            [Message::user("Reach 48 from 3, 5, 8, 25.")]
        );
    }
}
