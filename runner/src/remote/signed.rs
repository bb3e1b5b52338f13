//! Decisions on a remote run's approvals, signed. NATS carries no sender identity: anyone
//! who may publish to the queue could approve a run's side effect. A worker started with
//! approver keys (NKey public keys, ed25519) resumes a run only with a decision signed by
//! one of them; the signature covers the run, the node, the decision and its arguments.

use agentloom_core::ApprovalDecision;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// A decision's signature and the public key that made it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Signed {
    /// The signer's NKey public key (`U…`).
    pub key: String,
    /// The ed25519 signature, lowercase hex.
    pub signature: String,
}

/// What is signed: the run, the node and the decision with its arguments (their SHA-256),
/// so a signature for one of them says nothing of another.
fn signed_text(run_id: &str, node: &str, decision: &ApprovalDecision) -> Vec<u8> {
    let decision = serde_json::to_vec(decision).unwrap_or_default();
    let digest: String = Sha256::digest(&decision)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("agentloom approval\nrun {run_id}\nnode {node}\ndecision {digest}\n").into_bytes()
}

/// Signs `decision` on `node` of run `run_id` with the NKey seed in `seed` (the text of a
/// seed file: its first line starting with `S`).
pub fn sign(
    seed: &str,
    run_id: &str,
    node: &str,
    decision: &ApprovalDecision,
) -> Result<Signed, String> {
    let seed = seed
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with('S'))
        .ok_or("no NKey seed (a line starting with S) in the file")?;
    let pair = nkeys::KeyPair::from_seed(seed).map_err(|e| format!("not an NKey seed: {e}"))?;
    let signature = pair
        .sign(&signed_text(run_id, node, decision))
        .map_err(|e| format!("cannot sign: {e}"))?;
    Ok(Signed {
        key: pair.public_key(),
        signature: signature.iter().map(|b| format!("{b:02x}")).collect(),
    })
}

/// Whether `signed` is a signature of `decision` on `node` of run `run_id` by one of
/// `approvers` (NKey public keys); the error says why not and what to do.
pub fn verify(
    approvers: &[String],
    signed: Option<&Signed>,
    run_id: &str,
    node: &str,
    decision: &ApprovalDecision,
) -> Result<(), String> {
    if approvers.is_empty() {
        return Err(
            "this worker takes no decision from the queue: start it with --approver-key PUBLIC_KEY (the NKey of each person who may approve), and approve with `agentloom approve RUN --nats URL --sign-with SEED_FILE`".to_owned(),
        );
    }
    let Some(signed) = signed else {
        return Err(
            "the decision is not signed: approve with `agentloom approve RUN --nats URL --sign-with SEED_FILE`, the seed of a key this worker was started with (--approver-key)".to_owned(),
        );
    };
    if !approvers.iter().any(|key| key == &signed.key) {
        return Err(format!(
            "the decision is signed by {}, which is not one of this worker's approver keys",
            agentloom_core::escape_control(&signed.key)
        ));
    }
    let pair =
        nkeys::KeyPair::from_public_key(&signed.key).map_err(|e| format!("not a key: {e}"))?;
    let signature = from_hex(&signed.signature).ok_or("the signature is not hex")?;
    pair.verify(&signed_text(run_id, node, decision), &signature)
        .map_err(|_| {
            "the signature does not match this run, node and decision (signed for another one, or changed since)".to_owned()
        })
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    #[test]
    fn a_signature_holds_for_its_run_node_and_decision_only() {
        let pair = nkeys::KeyPair::new_user();
        let seed = pair.seed().unwrap();
        let approvers = vec![pair.public_key()];
        let approve = ApprovalDecision::Approved {
            arguments: agentloom_core::Value::from("a"),
        };
        let signed = sign(&seed, "run1", "post", &approve).unwrap();
        assert_eq!(
            verify(&approvers, Some(&signed), "run1", "post", &approve),
            Ok(())
        );
        for (run, node) in [("run2", "post"), ("run1", "other")] {
            assert!(verify(&approvers, Some(&signed), run, node, &approve).is_err());
        }
        let edited = ApprovalDecision::Approved {
            arguments: agentloom_core::Value::from("b"),
        };
        assert!(verify(&approvers, Some(&signed), "run1", "post", &edited).is_err());
        assert!(verify(&approvers, None, "run1", "post", &approve).is_err());
        assert!(verify(&[], Some(&signed), "run1", "post", &approve).is_err());
        let stranger = nkeys::KeyPair::new_user();
        let theirs = sign(&stranger.seed().unwrap(), "run1", "post", &approve).unwrap();
        assert!(verify(&approvers, Some(&theirs), "run1", "post", &approve).is_err());
        // A stranger's signature under an approver's key does not verify.
        let forged = Signed {
            key: pair.public_key(),
            signature: theirs.signature,
        };
        assert!(verify(&approvers, Some(&forged), "run1", "post", &approve).is_err());
    }
}
