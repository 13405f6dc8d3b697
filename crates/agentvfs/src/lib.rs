//! agentvfs: a single-file vault for an AI agent's workspace, with O(1) forks, checkpoints
//! that cost in proportion to what changed, and a typed JSON contract for every operation.
//!
//! Layers (see DESIGN.md): [`store`] (SQLite), [`model`] (workspaces, trees, quotas, audit),
//! [`service`] (what adapters call). The `avfs` binary is a thin adapter over `service`.

pub mod error;
#[cfg(feature = "fuse")]
pub mod fuse;
pub mod model;
pub mod schema;
pub mod service;
pub mod store;

pub use error::{Error, Result};
