//! How an agent's tool input becomes the action an OpenEnv server takes, and the check
//! of that shape against the action schema the server publishes (`GET /schema`), so
//! that a mismatch is found by `drmas check --online` before any model loads, not by
//! the server refusing every step of a run.

use serde_json::{Map, Value};

/// The action a step sends, from the agent's tool input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionShape {
    /// The input is the text of this one field: `{"expression": "<input>"}`.
    Field(String),
    /// The input is the action itself, a JSON object.
    Json,
}

impl ActionShape {
    pub fn from_field(field: &str) -> Self {
        if field.is_empty() {
            Self::Json
        } else {
            Self::Field(field.to_string())
        }
    }

    /// The action for `input`; `Err` says why the input is not one (the agent's mistake,
    /// which the agent reads as the step's observation).
    pub fn action(&self, input: &str) -> Result<Value, String> {
        match self {
            Self::Field(field) => {
                let mut action = Map::new();
                action.insert(field.clone(), Value::String(input.to_string()));
                Ok(Value::Object(action))
            }
            Self::Json => match serde_json::from_str::<Value>(input) {
                Ok(v @ Value::Object(_)) => Ok(v),
                Ok(_) => Err("the action must be a JSON object".to_string()),
                Err(e) => Err(format!("the action is not JSON: {e}")),
            },
        }
    }

    /// What the tool's input is, for prompts and `drmas plugins inspect`.
    pub fn input_format(&self) -> String {
        match self {
            Self::Field(field) => format!("the action's `{field}`, as text"),
            Self::Json => "the action as a JSON object".to_string(),
        }
    }

    /// Checks this shape against the server's action schema (a JSON Schema object).
    /// `Ok` says what the server's action is; `Err` says why the agent's actions cannot
    /// be the server's.
    pub fn check(&self, schema: &Value) -> Result<String, String> {
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let title = schema
            .get("title")
            .and_then(Value::as_str)
            .unwrap_or("the action");
        let fields = describe(&properties, &required);
        match self {
            Self::Json => Ok(format!(
                "{title} {{{fields}}}, written by the agent as JSON"
            )),
            Self::Field(field) => {
                let Some(property) = properties.get(field) else {
                    return Err(format!(
                        "action_field = \"{field}\", but the server's action ({title}) has no field `{field}`; its fields: {fields}"
                    ));
                };
                if !accepts_string(property) {
                    return Err(format!(
                        "action_field = \"{field}\": the server's `{field}` is {}, not text",
                        type_name(property)
                    ));
                }
                let others: Vec<&str> = required.iter().copied().filter(|r| r != field).collect();
                if !others.is_empty() {
                    return Err(format!(
                        "the server's action ({title}) also requires {}, which an action of `{field}` alone does not give (set action_field = \"\" and have the agent write the whole action as JSON)",
                        others
                            .iter()
                            .map(|r| format!("`{r}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                Ok(format!(
                    "{title} {{{fields}}}, its `{field}` the agent's text"
                ))
            }
        }
    }
}

/// `expression (required), metadata`: the fields of an action schema.
fn describe(properties: &Map<String, Value>, required: &[&str]) -> String {
    if properties.is_empty() {
        return "no fields".to_string();
    }
    properties
        .keys()
        .map(|k| {
            if required.contains(&k.as_str()) {
                format!("{k} (required)")
            } else {
                k.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a property's schema lets a string through: no `type`, `type` "string" (or a
/// list holding it), or an `anyOf`/`oneOf` with such a branch.
fn accepts_string(property: &Value) -> bool {
    let branches = ["anyOf", "oneOf"]
        .iter()
        .filter_map(|k| property.get(k).and_then(Value::as_array))
        .flatten()
        .collect::<Vec<_>>();
    if !branches.is_empty() {
        return branches.into_iter().any(accepts_string);
    }
    match property.get("type") {
        None => true,
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
        Some(_) => false,
    }
}

fn type_name(property: &Value) -> String {
    match property.get("type") {
        Some(Value::String(t)) => format!("of type {t}"),
        Some(other) => format!("of type {other}"),
        None => "not a string".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The action schema `openenv-core` 0.3 publishes for the Countdown example
    /// (examples/openenv-countdown/server.py), as its `/schema` returned it.
    fn countdown() -> Value {
        json!({
            "additionalProperties": false,
            "properties": {
                "metadata": {"additionalProperties": true, "title": "Metadata", "type": "object"},
                "expression": {"title": "Expression", "type": "string"}
            },
            "required": ["expression"],
            "title": "CountdownAction",
            "type": "object"
        })
    }

    #[test]
    fn a_text_field_the_server_requires_alone_fits() {
        let shape = ActionShape::from_field("expression");
        assert_eq!(
            shape.check(&countdown()).unwrap(),
            "CountdownAction {expression (required), metadata}, its `expression` the agent's text"
        );
        assert_eq!(shape.action("2*3").unwrap(), json!({"expression": "2*3"}));
    }

    #[test]
    fn a_field_the_server_lacks_or_types_otherwise_is_refused() {
        let err = ActionShape::from_field("answer")
            .check(&countdown())
            .unwrap_err();
        assert_eq!(
            err,
            "action_field = \"answer\", but the server's action (CountdownAction) has no field `answer`; its fields: expression (required), metadata"
        );
        let err = ActionShape::from_field("metadata")
            .check(&countdown())
            .unwrap_err();
        assert_eq!(
            err,
            "action_field = \"metadata\": the server's `metadata` is of type object, not text"
        );
        let mut two = countdown();
        two["properties"]["depth"] = json!({"type": "integer"});
        two["required"] = json!(["expression", "depth"]);
        let err = ActionShape::from_field("expression")
            .check(&two)
            .unwrap_err();
        assert!(
            err.starts_with("the server's action (CountdownAction) also requires `depth`"),
            "{err}"
        );
    }

    #[test]
    fn an_optional_string_fits_and_json_actions_must_be_objects() {
        let schema =
            json!({"properties": {"text": {"anyOf": [{"type": "string"}, {"type": "null"}]}}});
        assert!(ActionShape::from_field("text").check(&schema).is_ok());
        let json_shape = ActionShape::from_field("");
        assert_eq!(
            json_shape.action("{\"expression\": \"1\"}").unwrap(),
            json!({"expression": "1"})
        );
        assert_eq!(
            json_shape.action("[1]").unwrap_err(),
            "the action must be a JSON object"
        );
        assert!(
            json_shape
                .action("2*3")
                .unwrap_err()
                .starts_with("the action is not JSON: ")
        );
    }
}
