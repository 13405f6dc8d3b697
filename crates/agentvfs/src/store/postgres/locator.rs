//! The vault file on a host of a PostgreSQL vault: which vault on which server (its URL,
//! or the environment variable holding it), read, checked and written.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::super::Server;
use super::{MARK, URL_ENV};
use crate::error::{Error, Result};

/// What the vault file on this host says.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Locator {
    pub(super) engine: String,
    /// The vault's name on the server (`avfs_vaults.name`).
    pub(super) name: String,
    /// Its schema there.
    pub(super) schema: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) url_env: Option<String>,
}

impl Locator {
    /// The vault file for vault `server.name`, kept in `schema`: the URL, or the variable
    /// it came from.
    pub(super) fn new(server: &Server, schema: String) -> Locator {
        Locator {
            engine: "postgres".into(),
            name: server.name.clone(),
            schema,
            url: (!server.from_env).then(|| server.url.clone()),
            url_env: server.from_env.then(|| URL_ENV.to_string()),
        }
    }

    pub(super) fn read(path: &Path) -> Result<Locator> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
        // The parser's message quotes the line, which may hold a password: name the line only.
        let locator: Locator = toml::from_str(&text).map_err(|e| Error::NotAVault {
            path: path.to_path_buf(),
            reason: format!(
                "its PostgreSQL vault file does not parse (near byte {})",
                e.span().map_or(0, |s| s.start)
            ),
        })?;
        let ours = locator.engine == "postgres"
            && locator.url_env.as_deref().is_none_or(|v| v == URL_ENV)
            && locator.schema.starts_with("avfs_");
        if !ours {
            return Err(Error::NotAVault {
                path: path.to_path_buf(),
                reason: format!(
                    "its PostgreSQL vault file names an engine other than postgres, a schema not made by avfs, or a URL variable other than ${URL_ENV}"
                ),
            });
        }
        Ok(locator)
    }

    pub(super) fn write(&self, path: &Path) -> Result<()> {
        use std::io::Write;
        crate::store::sqlite::create_private_file(path)?;
        let body = toml::to_string(self).map_err(|e| Error::Storage(e.to_string()))?;
        let text = format!(
            "{MARK}: the records are on the server below (keep this file private).\n{body}"
        );
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| Error::io("writing", path, e))?;
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| Error::io("writing", path, e))
    }

    pub(super) fn url(&self) -> Result<String> {
        if let Some(url) = &self.url {
            return Ok(url.clone());
        }
        let var = self.url_env.as_deref().unwrap_or(URL_ENV);
        std::env::var(var).map_err(|_| {
            Error::invalid(format!(
                "vault `{}` is kept in PostgreSQL and its server URL comes from ${var}, which is not set",
                self.name
            ))
        })
    }
}
