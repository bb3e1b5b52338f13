//! The secret source an executor has unless given another: the environment only, for runs
//! with no keychain (tests, CI, a worker configured by its environment).

use agentloom_core::{Secret, SecretError, SecretSource};

/// Secrets from `AGENTLOOM_SECRET_<NAME>` environment variables only.
pub struct EnvSecrets;

impl SecretSource for EnvSecrets {
    fn secret(&self, name: &str) -> Result<Secret, SecretError> {
        let secret = agentloom_core::env_secret(name)?.ok_or_else(|| SecretError::Missing {
            name: name.to_owned(),
            env_var: agentloom_core::secret_env_var(name),
        })?;
        crate::redact::remember_process_wide(secret.expose());
        Ok(secret)
    }
}
