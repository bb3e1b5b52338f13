//! Whether an output may be wired to an input, and why not: one answer for the canvas and
//! for every other editor of a graph (the editing tools of `agentloom mcp --edit`).

use crate::block::PortSpec;
use crate::types::{TypeMismatch, compatibility};

/// Why a wire was not made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConnectError {
    #[error("no node `{0}` in this graph")]
    UnknownNode(String),
    #[error("node `{node}` has no {side} `{port}`")]
    UnknownPort {
        node: String,
        port: String,
        side: &'static str,
    },
    #[error("a node cannot be wired to itself")]
    SelfLoop,
    #[error("{0}")]
    Types(#[from] TypeMismatch),
}

/// Checks whether output `out` of node `from_node` may be wired to input `inp` of node
/// `to_node`, with the one compatibility function (a many-wire input takes its items).
pub fn check_wire_ports(
    from_node: &str,
    out: &PortSpec,
    to_node: &str,
    inp: &PortSpec,
) -> Result<(), ConnectError> {
    if from_node == to_node {
        return Err(ConnectError::SelfLoop);
    }
    compatibility(&out.ty, inp.wire_type())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ValueType;

    #[test]
    fn a_refused_wire_says_why() {
        let text = PortSpec::new("text", ValueType::Text);
        let number = PortSpec::new("n", ValueType::Number);
        assert_eq!(
            check_wire_ports("a", &text, "a", &number),
            Err(ConnectError::SelfLoop)
        );
        let err = check_wire_ports("a", &text, "b", &number).unwrap_err();
        assert!(
            err.to_string().starts_with("cannot connect text to number"),
            "{err}"
        );
        assert!(check_wire_ports("a", &number, "b", &text).is_ok());
    }
}
