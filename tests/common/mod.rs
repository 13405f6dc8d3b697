//! The one helper module every integration test shares. Each test file says `mod common;`
//! and takes what it needs:
//! - `cli`: a throwaway `$AVFS_HOME` (`TestEnv`) and the real binary, with every `--json`
//!   output checked against the committed schema;
//! - `history`: the history tests' throwaway `$AVFS_HOME` (`Env`) and their host-tree helpers;
//! - `host`: host trees to import, export and compare;
//! - `mount`: vaults mounted through FUSE, proxy environments, FUSE request traces;
//! - `skip`: what a test needs (FUSE, git, root…) fails it when missing, unless a deliberate
//!   opt-out variable turns it into a visible `SKIP` line;
//! - `wait`: waiting on a condition instead of sleeping.

#![allow(dead_code, unused_imports)]

pub mod cli;
pub mod history;
pub mod host;
pub mod mount;
pub mod skip;
pub mod wait;

pub use cli::*;
pub use host::*;

/// The engine library-level tests make their vaults in: `AVFS_ENGINE` (the binary reads the
/// same variable), else SQLite.
pub fn test_engine() -> agentvfs::store::Engine {
    skip::engine().parse().expect("AVFS_ENGINE names an engine")
}
