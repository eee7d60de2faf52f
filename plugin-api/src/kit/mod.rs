//! The plugin author's kit: what agents and components of most plugins need, written
//! once. Nothing here crosses the boundary; it is ordinary Rust on the plugin's side.
//!
//! - [`template`]: prompt templates whose placeholders are checked against the ones the
//!   component fills (`{questoin}` is a config error, not text the model reads), and
//!   few-shot prompts;
//! - [`tags`]: `<answer>…</answer>`-style blocks read out of completions;
//! - [`config`]: config tables declared once with [`config_table!`](crate::config_table),
//!   from which the parser and the described keys are both derived.
//!
//! ```
//! use drmas_plugin_api::kit::{few_shot, last_content, Template};
//! use drmas_plugin_api::Message;
//!
//! let user = Template::new("user_template", "Q: {question}", &["question"], &["question"])?;
//! let mut messages = few_shot("Answer in <answer> tags.", [("Q: 1+1?", "<answer>2</answer>")]);
//! messages.push(Message::user(user.fill(&[("question", "2+2?")])));
//! assert_eq!(messages.len(), 4);
//! assert_eq!(last_content("so <answer> 4 </answer>", "answer").map(str::trim), Some("4"));
//! # Ok::<(), drmas_plugin_api::PluginError>(())
//! ```

pub mod config;
pub mod tags;
pub mod template;

pub use config::{ConfigTable, ConfigType, NoConfig, toml_text};
pub use tags::{Block, Blocks, blocks, first_block, last_content, shorten, strip_markup};
pub use template::{Template, few_shot, fill, placeholders};
