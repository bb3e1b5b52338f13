//! What a bypassed node (`"bypass": true`) hands on instead of running: each output takes
//! the input of the same name, else the first input of the same type, else the first that
//! converts to it, else null.

use crate::block::Ports;
use crate::types::{coerce, compatibility};
use crate::value::{Value, ValueMap};

/// The outputs of a bypassed node with `ports` given `inputs`: each declared output gets
/// the input of its name, else the first input (in port order) of its type that has a
/// value, else the first whose value converts to its type (a template's `json` variable
/// into its `text`), else null.
pub fn bypass_outputs(ports: &Ports, inputs: &ValueMap) -> ValueMap {
    ports
        .outputs
        .iter()
        .map(|output| {
            let same_name = || inputs.get(&output.name).cloned();
            let same_type = || {
                ports
                    .inputs
                    .iter()
                    .filter(|input| input.ty == output.ty)
                    .find_map(|input| inputs.get(&input.name).cloned())
            };
            let converted = || {
                ports
                    .inputs
                    .iter()
                    .filter(|input| compatibility(&input.ty, &output.ty).is_ok())
                    .find_map(|input| coerce(inputs.get(&input.name)?.clone(), &output.ty).ok())
            };
            let value = same_name()
                .or_else(same_type)
                .or_else(converted)
                .unwrap_or(Value::Null);
            (output.name.clone(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::PortSpec;
    use crate::types::ValueType;

    #[test]
    fn outputs_take_the_input_of_their_name_else_of_their_type_else_null_or_converted() {
        let ports = Ports::new(
            vec![
                PortSpec::new("count", ValueType::Integer),
                PortSpec::new("body", ValueType::Text),
                PortSpec::new("url", ValueType::Text),
            ],
            vec![
                PortSpec::new("url", ValueType::Text),
                PortSpec::new("text", ValueType::Text),
                PortSpec::new("ok", ValueType::Bool),
            ],
        );
        let inputs = ValueMap::from([
            ("url".to_owned(), Value::text("http://a")),
            ("body".to_owned(), Value::text("hello")),
            ("count".to_owned(), Value::Integer(3)),
        ]);
        let outputs = bypass_outputs(&ports, &inputs);
        assert_eq!(outputs["url"], Value::text("http://a"));
        assert_eq!(outputs["text"], Value::text("hello"), "first text input");
        assert_eq!(
            outputs["ok"],
            Value::Null,
            "no input is or converts to a bool"
        );

        // A json input converts into a text output when no text input is there.
        let ports = Ports::new(
            vec![PortSpec::new("a", ValueType::Any)],
            vec![PortSpec::new("text", ValueType::Text)],
        );
        let inputs = ValueMap::from([("a".to_owned(), Value::text("hi"))]);
        assert_eq!(bypass_outputs(&ports, &inputs)["text"], Value::text("hi"));
    }
}
