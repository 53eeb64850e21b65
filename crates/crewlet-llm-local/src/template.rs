//! The model's own chat template (`tokenizer.chat_template`, Jinja) turning
//! a conversation into the prompt text, with ChatML when the file has none.

use minijinja::{Environment, Error, ErrorKind, Value, context};

use crate::LocalModelError;

/// ChatML, for a model file without a template of its own.
const CHATML: &str = "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// One message as a chat template sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: &'static str,
    pub content: String,
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    /// Whether the file brought its own (false: ChatML).
    pub own: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("own", &self.own)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `source` (the GGUF's template, or ChatML when `None`).
    pub fn new(
        path: &std::path::Path,
        source: Option<&str>,
        bos: &str,
        eos: &str,
    ) -> Result<Self, LocalModelError> {
        let mut env = Environment::new();
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_template_owned("chat", source.unwrap_or(CHATML).to_owned())
            .map_err(|e| LocalModelError::Template {
                path: path.to_path_buf(),
                detail: e.to_string(),
            })?;
        let template = Self {
            env,
            bos: bos.to_owned(),
            eos: eos.to_owned(),
            own: source.is_some(),
        };
        // A template that cannot render a plain exchange is refused at load.
        template
            .render(&[
                ChatMessage {
                    role: "system",
                    content: "s".into(),
                },
                ChatMessage {
                    role: "user",
                    content: "u".into(),
                },
            ])
            .map_err(|e| LocalModelError::Template {
                path: path.to_path_buf(),
                detail: e.to_string(),
            })?;
        Ok(template)
    }

    /// The prompt for `messages`, ending where the assistant's answer starts.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<String, LocalModelError> {
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| LocalModelError::Runtime(e.to_string()))?;
        template
            .render(context! {
                messages => Value::from(messages.iter().map(|m| context! { role => m.role, content => m.content.as_str() }).collect::<Vec<Value>>()),
                add_generation_prompt => true,
                bos_token => self.bos.as_str(),
                eos_token => self.eos.as_str(),
            })
            .map_err(|e| LocalModelError::Runtime(format!("the chat template: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_is_used_when_the_file_has_no_template() {
        let t = ChatTemplate::new(std::path::Path::new("m.gguf"), None, "", "").unwrap();
        let out = t
            .render(&[ChatMessage {
                role: "user",
                content: "hi".into(),
            }])
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(!t.own);
    }

    #[test]
    fn a_template_that_raises_is_refused_with_the_file_named() {
        let err = ChatTemplate::new(
            std::path::Path::new("/m/x.gguf"),
            Some("{{ raise_exception('no system role') }}"),
            "",
            "",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("/m/x.gguf") && err.contains("no system role"),
            "{err}"
        );
    }
}
