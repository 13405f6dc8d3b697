//! Runtime services: what adapters (the CLI, later the mount and the proxy) call. They
//! resolve names to vaults and workspaces and orchestrate the model; no parsing, no printing.

pub mod apply;
pub mod confine;
pub mod files;
pub mod history;
pub mod mount;
pub mod mounts;
pub mod policy;
pub mod proxy;
pub mod registry;
pub mod runner;
pub mod search;
pub mod secrets;
pub mod session;
pub mod transfer;
pub mod workspace;

pub use registry::Registry;
pub use workspace::{DeleteReport, Target, VaultListEntry, WorkspaceService};
