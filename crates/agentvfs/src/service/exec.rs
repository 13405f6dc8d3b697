//! Where a proxied command runs: in a running session's mount, or in a mount made for
//! this call, in the selected workspace or in a fork made on first use.

use std::path::Path;

use super::WorkspaceService;
use super::mounter::Mounter;
use super::policy::{CommandRequest, PolicyEngine};
use super::proxy::{Envelope, ExecOptions, ProxyRuntime};
use super::session;
use crate::error::Result;

/// The workspace a command runs in.
#[derive(Debug, Clone)]
pub enum Place {
    /// The workspace a selector names (`None`: the current one).
    Selected(Option<String>),
    /// Fork `fork`, made from workspace `fork_from` if it does not exist yet.
    Fork {
        fork: String,
        fork_from: Option<String>,
    },
    /// The mount of a running session (`avfs session start`).
    Session(String),
}

/// Run one command through the proxy at `place`, under the policy in file `policy` (else
/// the built-in one; a session's own policy when it has one and `policy` is `None`).
/// `observer` sees the command's output as it comes (in a session too).
pub fn exec(
    service: &WorkspaceService,
    mounter: &dyn Mounter,
    place: &Place,
    policy: Option<&Path>,
    req: CommandRequest,
    mut opts: ExecOptions,
    observer: Option<super::runner::Observer>,
) -> Result<Envelope> {
    if let Place::Session(name) = place {
        let rec = session::find(service.registry(), name)?;
        // The daemon runs the command with its client's environment, not its own.
        if opts.env.is_none() {
            opts.env = Some(std::env::vars().collect());
        }
        return session::exec(&rec, req, opts, policy, observer);
    }
    // The policy first: one that does not load must not leave a new fork behind.
    let policy = PolicyEngine::from_path(policy)?;
    let (target, ws) = match place {
        Place::Fork { fork, fork_from } => service.open_fork(fork, fork_from.as_deref())?,
        Place::Selected(selector) => service.open(selector.as_deref())?,
        Place::Session(_) => unreachable!("handled above"),
    };
    let registry = service.registry();
    // The command's envelope is audited as one record; its checkpoint, ingest and mount
    // file operations are that record's steps.
    let ws = ws.as_steps();
    ProxyRuntime {
        ws: &ws,
        policy: &policy,
        vault_name: target.name.clone(),
        mounter,
        runtime_dir: Some(registry.private_dir("run")?),
        hide: vec![
            registry.home().to_path_buf(),
            ws.vault().path().to_path_buf(),
        ],
        tree_cache: Some(registry.private_dir("trees")?),
        session: None,
        observer,
    }
    .exec(req, &opts)
}
