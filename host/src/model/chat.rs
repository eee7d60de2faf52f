//! Chat templates: the Jinja template of `tokenizer_config.json` (or
//! `chat_template.jinja`) rendered with minijinja the way transformers renders it
//! (`trim_blocks`, `lstrip_blocks`, Python string methods, `raise_exception`).

use super::error::{ModelError, Result};
use drmas_plugin_api::Message;
use minijinja::{Environment, Error, ErrorKind, context};
use serde::Serialize;

pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

#[derive(Serialize)]
struct Msg<'a> {
    role: &'a str,
    content: &'a str,
}

impl ChatTemplate {
    pub fn new(source: String, bos_token: String, eos_token: String) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, Error> {
                Err(Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_function("strftime_now", |fmt: String| -> String {
            // Templates use it to print today's date; a fixed date keeps prompts (and so
            // training samples) reproducible.
            fmt.replace("%d", "01")
                .replace("%B", "January")
                .replace("%b", "Jan")
                .replace("%Y", "2025")
                .replace("%m", "01")
        });
        env.add_template_owned("chat", source)
            .map_err(|e| ModelError::Other {
                what: "chat template".into(),
                message: e.to_string(),
            })?;
        Ok(Self {
            env,
            bos_token,
            eos_token,
        })
    }

    /// The prompt text for `messages`, ending with the assistant header when
    /// `add_generation_prompt` (as transformers' `apply_chat_template(..., tokenize=False)`).
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let msgs: Vec<Msg> = messages
            .iter()
            .map(|m| Msg {
                role: m.role.as_str(),
                content: m.content.as_str(),
            })
            .collect();
        let template = self.env.get_template("chat").expect("added in new");
        template
            .render(context! {
                messages => msgs,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            })
            .map_err(|e| ModelError::Other {
                what: "chat template".into(),
                message: format!("{e:#}"),
            })
    }
}
