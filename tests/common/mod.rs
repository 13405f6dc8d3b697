//! The one helper module every integration test shares. Each test file says `mod common;`
//! and takes what it needs:
//! - `cli`: a throwaway `$AVFS_HOME` (`TestEnv`) and the real binary, with every `--json`
//!   output checked against the committed schema;
//! - `history`: the history tests' throwaway `$AVFS_HOME` (`Env`) and their host-tree helpers;
//! - `host`: host trees to import, export and compare;
//! - `mount`: vaults mounted through FUSE, proxy environments, FUSE request traces;
//! - `shared`: hosts sharing a vault on the test PostgreSQL server and S3 gateway;
//! - `skip`: what a test needs (FUSE, git, root…) fails it when missing, unless a deliberate
//!   opt-out variable turns it into a visible `SKIP` line;
//! - `wait`: waiting on a condition instead of sleeping.

#![allow(dead_code, unused_imports)]

pub mod cli;
pub mod history;
pub mod host;
pub mod mount;
pub mod shared;
pub mod skip;
pub mod wait;

pub use cli::*;
pub use host::*;

/// The engine library-level tests make their vaults in: `AVFS_ENGINE` (the binary reads the
/// same variable), else SQLite.
pub fn test_engine() -> agentvfs::store::Engine {
    skip::engine().parse().expect("AVFS_ENGINE names an engine")
}

/// Every file of a vault, by path below it, with its bytes: a vault file alone, or every file
/// of a vault directory (sled's), so a test can say a vault was left untouched.
pub fn tree_bytes(
    path: &std::path::Path,
) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![path.to_path_buf()];
    while let Some(p) = todo.pop() {
        if p.is_dir() {
            todo.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        } else {
            let rel = p.strip_prefix(path).unwrap().to_path_buf();
            out.insert(rel, std::fs::read(&p).unwrap());
        }
    }
    out
}
