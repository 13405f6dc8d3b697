//! The registry of named vaults under `$AVFS_HOME` (default `~/.avfs`): which name points to
//! which vault file and workspace, and which one is current. Updates hold an exclusive lock
//! on `registry.lock` and replace the file atomically, so concurrent `avfs` runs never lose one.
//! The home and the directories avfs makes in it are its owner's alone (0700).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// One registered name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RegistryEntry {
    pub path: PathBuf,
    pub workspace: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RegistryData {
    pub current: Option<String>,
    pub vaults: BTreeMap<String, RegistryEntry>,
}

/// The registry directory.
#[derive(Debug, Clone)]
pub struct Registry {
    home: PathBuf,
}

impl Registry {
    /// `$AVFS_HOME`, else `~/.avfs`.
    pub fn from_env() -> Registry {
        let home = std::env::var_os("AVFS_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".avfs")))
            .unwrap_or_else(|| PathBuf::from(".avfs"));
        Registry { home }
    }

    pub fn at(home: impl Into<PathBuf>) -> Registry {
        Registry { home: home.into() }
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    /// `$AVFS_HOME/sub`, created if missing, as is the home itself (`sub` empty: the home).
    /// A directory avfs creates here is its owner's alone (0700), whatever the umask: the
    /// home holds vaults, and with them everything an agent's workspace holds.
    pub fn private_dir(&self, sub: &str) -> Result<PathBuf> {
        create_private_dir(&self.home)?;
        if sub.is_empty() {
            return Ok(self.home.clone());
        }
        let dir = self.home.join(sub);
        create_private_dir(&dir)?;
        Ok(dir)
    }

    /// Where a newly created vault named `name` is stored.
    pub fn vault_file(&self, name: &str) -> PathBuf {
        self.home.join("vaults").join(format!("{name}.avfs"))
    }

    fn file(&self) -> PathBuf {
        self.home.join("registry.json")
    }

    pub fn load(&self) -> Result<RegistryData> {
        let path = self.file();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::InvalidArgument {
                message: format!("{} is not valid registry JSON: {e}", path.display()),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RegistryData::default()),
            Err(e) => Err(Error::io("reading", path, e)),
        }
    }

    /// Read, change and write the registry under an exclusive lock.
    pub fn update<R>(&self, f: impl FnOnce(&mut RegistryData) -> Result<R>) -> Result<R> {
        self.private_dir("")?;
        let lock_path = self.home.join("registry.lock");
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::io("opening", &lock_path, e))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| Error::io("locking", &lock_path, e.into()))?;
        let mut data = self.load()?;
        let out = f(&mut data)?;
        let path = self.file();
        let tmp = self
            .home
            .join(format!("registry.json.{}.tmp", std::process::id()));
        let json = serde_json::to_vec_pretty(&data).map_err(|e| Error::Storage(e.to_string()))?;
        let write = || -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(&json)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| Error::io("writing", &path, e))?;
        Ok(out)
    }
}

/// Create `dir` with mode 0700 unless it exists; its parents are created as usual. A
/// directory that already exists is left as it is: it may be the user's own choice.
fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::io("creating", parent, e))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        // The umask may have taken bits away (0o700 & !umask); set exactly 0700.
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io("restricting", dir, e)),
        // Another avfs created it meanwhile.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(Error::io("creating", dir, e)),
    }
}

/// Registered names close to `name`, best first: for "did you mean" hints.
pub fn close_names<'a>(name: &str, candidates: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut scored: Vec<(usize, &String)> = candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| {
            *d <= 2.max(name.len() / 3) || c.starts_with(name) || name.starts_with(c.as_str())
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, c)| c.clone()).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names() {
        let names = [
            "project".to_string(),
            "prod".to_string(),
            "zeta".to_string(),
        ];
        assert_eq!(
            close_names("projct", names.iter()),
            vec!["project".to_string()]
        );
        assert!(close_names("qqqqqqqq", names.iter()).is_empty());
    }
}
