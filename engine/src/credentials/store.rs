//! The keychain-backed credential store and its non-secret index file.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use agentloom_core::{BoundHosts, error_chain};
use serde::{Deserialize, Serialize};

use super::{CredentialError, CredentialInfo, StoredSecret, check_name};

/// The keychain service every credential is stored under (the user is the credential name).
pub const KEYCHAIN_SERVICE: &str = "agentloom";
/// The index file's name in the data directory.
pub const INDEX_FILE: &str = "credentials.json";

/// Credentials in the OS keychain, listed through an index file that holds no secret.
pub struct CredentialStore {
    /// Connected on first use, so a process that resolves no credential never asks the
    /// keychain.
    backend: OnceLock<Result<Arc<keyring_core::CredentialStore>, CredentialError>>,
    index_path: PathBuf,
    /// Serializes read-modify-write of the index within this process.
    lock: Mutex<()>,
}

impl std::fmt::Debug for CredentialStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialStore")
            .field("index_path", &self.index_path)
            .field("keychain", &self.backend.get().map(Result::is_ok))
            .finish()
    }
}

impl Drop for CredentialStore {
    fn drop(&mut self) {
        // Dropping the Secret Service client blocks on its own runtime too.
        if let Some(backend) = self.backend.take() {
            off_runtime(move || drop(backend));
        }
    }
}

#[derive(Default, Serialize, Deserialize)]
struct IndexFile {
    version: u32,
    credentials: Vec<CredentialInfo>,
}

impl CredentialStore {
    /// The platform keychain (Secret Service on Linux, connected when a secret is first
    /// read or written) with the index in `data_dir`. Never fails: when the keychain cannot
    /// be reached, listing still works and every secret operation returns
    /// [`CredentialError::Unavailable`].
    pub fn open(data_dir: &Path) -> Self {
        Self {
            backend: OnceLock::new(),
            index_path: data_dir.join(INDEX_FILE),
            lock: Mutex::new(()),
        }
    }

    /// [`CredentialStore::open`] in the per-user data directory.
    pub fn open_default() -> Result<Self, CredentialError> {
        Ok(Self::open(&default_data_dir()?))
    }

    /// A store over a given keychain backend (e.g. `keyring_core::mock::Store` in tests).
    pub fn with_backend(backend: Arc<keyring_core::CredentialStore>, data_dir: &Path) -> Self {
        Self {
            backend: OnceLock::from(Ok(backend)),
            index_path: data_dir.join(INDEX_FILE),
            lock: Mutex::new(()),
        }
    }

    fn backend(&self) -> &Result<Arc<keyring_core::CredentialStore>, CredentialError> {
        self.backend.get_or_init(|| off_runtime(platform_backend))
    }

    pub fn index_path(&self) -> &Path {
        &self.index_path
    }

    /// Ok when the keychain can be used; else why not and what to do.
    pub fn check_available(&self) -> Result<(), CredentialError> {
        self.backend().as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// Every credential in the index, sorted by name. Needs no keychain.
    pub fn list(&self) -> Result<Vec<CredentialInfo>, CredentialError> {
        let mut list = self.read_index()?.credentials;
        list.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(list)
    }

    /// The index entry of `name`, if there is one.
    pub fn info(&self, name: &str) -> Result<Option<CredentialInfo>, CredentialError> {
        Ok(self.list()?.into_iter().find(|c| c.name == name))
    }

    /// Stores `secret` as credential `name` (replacing any) and updates the index. The
    /// hosts it was bound to stay (a refresh, a new sign-in); a new credential gets its
    /// provider's ([`super::default_hosts`]).
    pub fn put(
        &self,
        name: &str,
        secret: &StoredSecret,
    ) -> Result<CredentialInfo, CredentialError> {
        off_runtime(|| self.put_here(name, secret, None))
    }

    /// [`CredentialStore::put`], bound to `hosts` (the provider's when empty).
    pub fn put_with_hosts(
        &self,
        name: &str,
        secret: &StoredSecret,
        hosts: &BoundHosts,
    ) -> Result<CredentialInfo, CredentialError> {
        off_runtime(|| self.put_here(name, secret, Some(hosts)))
    }

    /// Binds credential `name` to `hosts` (its provider's when empty). Needs no keychain.
    pub fn set_hosts(
        &self,
        name: &str,
        hosts: &BoundHosts,
    ) -> Result<CredentialInfo, CredentialError> {
        check_name(name)?;
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let mut index = self.read_index()?;
        let info = index
            .credentials
            .iter_mut()
            .find(|c| c.name == name)
            .ok_or_else(|| CredentialError::NotFound {
                name: name.to_owned(),
            })?;
        info.hosts = if hosts.is_empty() {
            super::default_hosts(&info.provider)
        } else {
            hosts.to_strings()
        };
        let info = info.clone();
        self.write_index(index)?;
        tracing::info!(credential = name, hosts = %info.hosts.join(", "), "credential hosts set");
        Ok(info)
    }

    /// The hosts credential `name` may be sent to: those in the index, else the defaults
    /// of `provider` (the stored secret's).
    pub fn hosts(&self, name: &str, provider: &str) -> Result<BoundHosts, CredentialError> {
        let listed = self.info(name)?.map(|info| info.hosts).unwrap_or_default();
        let hosts = if listed.is_empty() {
            super::default_hosts(provider)
        } else {
            listed
        };
        BoundHosts::parse(&hosts).map_err(|problem| CredentialError::Hosts {
            name: name.to_owned(),
            problem: format!(
                "{problem} (in {}); fix it with `agentloom credentials hosts {name} --set HOST`",
                self.index_path.display()
            ),
        })
    }

    fn put_here(
        &self,
        name: &str,
        secret: &StoredSecret,
        hosts: Option<&BoundHosts>,
    ) -> Result<CredentialInfo, CredentialError> {
        check_name(name)?;
        secret.redact_from_logs();
        let json = serde_json::to_string(secret).map_err(|e| CredentialError::Corrupt {
            name: name.to_owned(),
            detail: e.to_string(),
        })?;
        let entry = self.entry(name)?;
        entry
            .set_password(&json)
            .map_err(|e| keychain_error(name, &e))?;
        let mut info = secret.info(name);
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let mut index = self.read_index()?;
        match hosts {
            Some(hosts) if !hosts.is_empty() => info.hosts = hosts.to_strings(),
            Some(_) => {}
            None => {
                let kept = index.credentials.iter().find(|c| c.name == name);
                if let Some(kept) = kept.filter(|c| !c.hosts.is_empty()) {
                    info.hosts.clone_from(&kept.hosts);
                }
            }
        }
        index.credentials.retain(|c| c.name != name);
        index.credentials.push(info.clone());
        self.write_index(index)?;
        tracing::info!(credential = name, kind = %info.kind, "credential stored");
        Ok(info)
    }

    /// The secret of credential `name`.
    pub fn get(&self, name: &str) -> Result<StoredSecret, CredentialError> {
        off_runtime(|| self.get_here(name))
    }

    fn get_here(&self, name: &str) -> Result<StoredSecret, CredentialError> {
        check_name(name)?;
        let text = self
            .entry(name)?
            .get_password()
            .map_err(|e| keychain_error(name, &e))?;
        let secret: StoredSecret =
            serde_json::from_str(&text).map_err(|e| CredentialError::Corrupt {
                name: name.to_owned(),
                // serde's message may quote the input: keep only its position.
                detail: format!("not valid JSON at line {} column {}", e.line(), e.column()),
            })?;
        secret.redact_from_logs();
        Ok(secret)
    }

    /// Deletes credential `name` from the keychain and the index; returns what it held
    /// (for revocation), or `None` if only an index entry was left.
    pub fn delete(&self, name: &str) -> Result<Option<StoredSecret>, CredentialError> {
        off_runtime(|| self.delete_here(name))
    }

    fn delete_here(&self, name: &str) -> Result<Option<StoredSecret>, CredentialError> {
        check_name(name)?;
        let entry = self.entry(name)?;
        let previous = match entry.get_password() {
            Ok(text) => serde_json::from_str(&text).ok(),
            Err(keyring_core::Error::NoEntry) => None,
            Err(e) => return Err(keychain_error(name, &e)),
        };
        match entry.delete_credential() {
            Ok(()) | Err(keyring_core::Error::NoEntry) => {}
            Err(e) => return Err(keychain_error(name, &e)),
        }
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let mut index = self.read_index()?;
        let before = index.credentials.len();
        index.credentials.retain(|c| c.name != name);
        let was_listed = index.credentials.len() != before;
        if was_listed {
            self.write_index(index)?;
        }
        if previous.is_none() && !was_listed {
            return Err(CredentialError::NotFound {
                name: name.to_owned(),
            });
        }
        tracing::info!(credential = name, "credential removed");
        Ok(previous)
    }

    fn entry(&self, name: &str) -> Result<keyring_core::Entry, CredentialError> {
        let backend = self.backend().as_ref().map_err(Clone::clone)?;
        backend
            .build(KEYCHAIN_SERVICE, name, None)
            .map_err(|e| keychain_error(name, &e))
    }

    fn read_index(&self) -> Result<IndexFile, CredentialError> {
        match std::fs::read(&self.index_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| CredentialError::Index {
                path: self.index_path.display().to_string(),
                action: "read",
                detail: format!("{e}; fix or delete the file (it holds no secret)"),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(IndexFile::default()),
            Err(e) => Err(self.index_error("read", &e)),
        }
    }

    fn write_index(&self, mut index: IndexFile) -> Result<(), CredentialError> {
        index.version = 1;
        index.credentials.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(dir) = self.index_path.parent() {
            crate::private_files::create_dir_all(dir)
                .map_err(|e| self.index_error("written", &e))?;
        }
        let text = serde_json::to_string_pretty(&index).map_err(|e| CredentialError::Index {
            path: self.index_path.display().to_string(),
            action: "written",
            detail: e.to_string(),
        })?;
        let tmp = self.index_path.with_extension("json.tmp");
        crate::private_files::write(&tmp, text).map_err(|e| self.index_error("written", &e))?;
        std::fs::rename(&tmp, &self.index_path).map_err(|e| self.index_error("written", &e))
    }

    fn index_error(&self, action: &'static str, err: &std::io::Error) -> CredentialError {
        CredentialError::Index {
            path: self.index_path.display().to_string(),
            action,
            detail: err.to_string(),
        }
    }
}

/// The per-user data directory (where the run log also lives).
pub fn default_data_dir() -> Result<PathBuf, CredentialError> {
    agentloom_core::user_data_dir().ok_or_else(|| CredentialError::Index {
        path: "(data directory)".to_owned(),
        action: "located",
        detail: "no home directory is known for this user".to_owned(),
    })
}

/// The operating system's keychain that holds the secrets, as its users know it.
pub const KEYCHAIN_NAME: &str = if cfg!(target_os = "linux") {
    "the Secret Service (GNOME Keyring, KWallet or KeePassXC)"
} else if cfg!(target_os = "macos") {
    "the macOS login Keychain"
} else if cfg!(target_os = "windows") {
    "the Windows Credential Manager"
} else {
    "no keychain (none is supported on this system)"
};

#[cfg(target_os = "linux")]
fn platform_backend() -> Result<Arc<keyring_core::CredentialStore>, CredentialError> {
    match zbus_secret_service_keyring_store::Store::new() {
        Ok(store) => Ok(store),
        Err(e) => Err(unavailable(&e)),
    }
}

/// The login keychain.
#[cfg(target_os = "macos")]
fn platform_backend() -> Result<Arc<keyring_core::CredentialStore>, CredentialError> {
    match apple_native_keyring_store::keychain::Store::new() {
        Ok(store) => Ok(store),
        Err(e) => Err(native_unavailable(&e, "the macOS login keychain")),
    }
}

/// The Windows Credential Manager.
#[cfg(target_os = "windows")]
fn platform_backend() -> Result<Arc<keyring_core::CredentialStore>, CredentialError> {
    match windows_native_keyring_store::Store::new() {
        Ok(store) => Ok(store),
        Err(e) => Err(native_unavailable(&e, "the Windows Credential Manager")),
    }
}

#[cfg(any(target_os = "macos", target_os = "windows"))]
fn native_unavailable(err: &keyring_core::Error, what: &str) -> CredentialError {
    CredentialError::Unavailable {
        detail: error_chain(err),
        hint: format!("check that {what} can be used by this user, {ENV_HINT}"),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "windows")))]
fn platform_backend() -> Result<Arc<keyring_core::CredentialStore>, CredentialError> {
    Err(CredentialError::Unavailable {
        detail: "this build has no keychain support for this operating system".to_owned(),
        hint: "set AGENTLOOM_SECRET_<NAME> environment variables instead".to_owned(),
    })
}

const ENV_HINT: &str = "or, for headless runs, set the environment variable AGENTLOOM_SECRET_<NAME> (the credential name upper-cased, other characters as `_`)";

/// Why the keychain cannot be used, and what to do about it.
fn unavailable(err: &keyring_core::Error) -> CredentialError {
    let detail = error_chain(err);
    let lower = detail.to_ascii_lowercase();
    let hint = if lower.contains("serviceunknown") || lower.contains("org.freedesktop.secrets") {
        format!(
            "no Secret Service is running on the session bus: start one (e.g. `gnome-keyring-daemon --start --components=secrets`, or KeePassXC with Secret Service integration) and unlock it, {ENV_HINT}"
        )
    } else if matches!(err, keyring_core::Error::NoStorageAccess(_))
        || lower.contains("locked")
        || lower.contains("no such object")
    {
        format!(
            "the keyring is locked or has no default collection: unlock it (e.g. log in to the desktop, or `echo -n PASSWORD | gnome-keyring-daemon --unlock --components=secrets`), {ENV_HINT}"
        )
    } else if lower.contains("connection")
        || lower.contains("notfound")
        || lower.contains("no such file")
        || lower.contains("address")
    {
        format!(
            "no D-Bus session bus could be reached (check DBUS_SESSION_BUS_ADDRESS, or run inside `dbus-run-session`) with a Secret Service such as gnome-keyring started and unlocked, {ENV_HINT}"
        )
    } else {
        format!(
            "make sure a Secret Service (gnome-keyring, KeePassXC) is running and unlocked, {ENV_HINT}"
        )
    };
    CredentialError::Unavailable { detail, hint }
}

fn keychain_error(name: &str, err: &keyring_core::Error) -> CredentialError {
    match err {
        keyring_core::Error::NoEntry => CredentialError::NotFound {
            name: name.to_owned(),
        },
        keyring_core::Error::BadEncoding(_) | keyring_core::Error::BadDataFormat(..) => {
            CredentialError::Corrupt {
                name: name.to_owned(),
                detail: "not readable text".to_owned(),
            }
        }
        keyring_core::Error::PlatformFailure(_) | keyring_core::Error::NoStorageAccess(_) => {
            unavailable(err)
        }
        other => CredentialError::Unavailable {
            detail: other.to_string(),
            hint: "the keychain refused the operation".to_owned(),
        },
    }
}

/// The Secret Service client blocks on a runtime of its own, which tokio refuses inside a
/// runtime's worker thread; from async code, keychain calls run on a plain thread instead.
fn off_runtime<T: Send>(call: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return call();
    }
    std::thread::scope(|scope| scope.spawn(call).join())
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::{CredentialKind, OAuthClientConfig, OAuthTokens};

    fn mock_store(dir: &Path) -> CredentialStore {
        let backend: Arc<keyring_core::CredentialStore> = keyring_core::mock::Store::new().unwrap();
        CredentialStore::with_backend(backend, dir)
    }

    #[test]
    fn put_get_list_delete_and_the_index_holds_no_secret() {
        let dir = tempfile::tempdir().unwrap();
        let store = mock_store(dir.path());
        assert!(store.list().unwrap().is_empty());
        store
            .put(
                "openai",
                &StoredSecret::ApiKey {
                    provider: "openai".into(),
                    key: "sk-SECRET-1".into(),
                },
            )
            .unwrap();
        let tokens = OAuthTokens {
            provider: "github".into(),
            access_token: "gho_SECRET-2".into(),
            refresh_token: Some("ghr_SECRET-3".into()),
            expires_at: Some(42),
            scopes: vec!["repo".into(), "read:user".into()],
            client: OAuthClientConfig {
                client_id: "Iv1.abc".into(),
                client_secret: None,
                token_url: "https://github.com/login/oauth/access_token".into(),
                revocation_url: None,
            },
        };
        store
            .put("gh", &StoredSecret::OAuth(tokens.clone()))
            .unwrap();
        let list = store.list().unwrap();
        assert_eq!(
            list.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            vec!["gh", "openai"]
        );
        assert_eq!(list[0].kind, CredentialKind::OAuth);
        assert_eq!(list[0].expires_at, Some(42));
        assert_eq!(list[1].provider, "openai");
        let index = std::fs::read_to_string(store.index_path()).unwrap();
        assert!(!index.contains("SECRET"), "{index}");
        assert!(index.contains("read:user"));

        assert_eq!(
            store.get("gh").unwrap(),
            StoredSecret::OAuth(tokens.clone())
        );
        let removed = store.delete("gh").unwrap();
        assert_eq!(removed, Some(StoredSecret::OAuth(tokens)));
        assert_eq!(store.list().unwrap().len(), 1);
        let err = store.get("gh").unwrap_err();
        assert_eq!(err, CredentialError::NotFound { name: "gh".into() });
        assert!(matches!(
            store.delete("gh").unwrap_err(),
            CredentialError::NotFound { .. }
        ));
        assert!(matches!(
            store.get("bad name").unwrap_err(),
            CredentialError::InvalidName { .. }
        ));
    }

    #[test]
    fn a_damaged_index_is_reported_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let store = mock_store(dir.path());
        std::fs::write(store.index_path(), "{not json").unwrap();
        let err = store.list().unwrap_err().to_string();
        assert!(
            err.contains(INDEX_FILE) && err.contains("holds no secret"),
            "{err}"
        );
    }

    #[test]
    fn unavailable_messages_say_what_to_do() {
        let no_service = unavailable(&keyring_core::Error::PlatformFailure(
            "org.freedesktop.DBus.Error.ServiceUnknown: The name org.freedesktop.secrets was not provided"
                .into(),
        ));
        assert!(
            no_service.to_string().contains("gnome-keyring-daemon"),
            "{no_service}"
        );
        assert!(
            no_service.to_string().contains("AGENTLOOM_SECRET_"),
            "{no_service}"
        );
        let locked = unavailable(&keyring_core::Error::NoStorageAccess("locked".into()));
        assert!(locked.to_string().contains("unlock"), "{locked}");
    }
}
