//! A proxied command in its sandbox: choosing the mode, running it there, and taking what
//! it wrote into the fork (see `service::sandbox`).

use std::path::Path;
use std::sync::Arc;

use super::super::mount::MountFs;
use super::super::policy::{CommandRequest, PolicyEngine};
use super::super::runner;
use super::super::sandbox::{self, Lower, Mode, RunDir, SandboxReport, Served};
use super::{EXEC_OP, ExecOptions, ProxyRuntime};
use crate::error::{Error, Result};
use crate::model::path::VPath;
use crate::service::confine::Confinement;

impl ProxyRuntime<'_> {
    /// The mode a command runs in, and why it gets no namespace if it does not. An overlay
    /// on a `lower` of `fuse` needs FUSE; on a `tree`, only the kernel's overlay.
    pub(crate) fn plan(&self, asked: Mode, lower: Lower) -> Result<(Mode, Option<String>)> {
        let why_not = sandbox::unavailable_reason().or_else(|| {
            self.runtime_dir
                .is_none()
                .then(|| "no runtime directory was given".to_string())
        });
        // A fuse run's workspace, and a FUSE lower layer, are FUSE mounts made inside the
        // sandbox: that needs a FUSE device this process may open, and root (the kernel
        // refuses a device opened outside a user namespace for a mount inside it). An
        // overlay is made as root only (the tree's owners are the fork's).
        const NOT_ROOT: &str = "FUSE and overlay mounts inside a user namespace are not \
                                made here; as a user who is not root, use --mode copy";
        let root = rustix::process::geteuid().is_root();
        let fuse = || {
            self.mounter
                .available()
                .and_then(|_| self.mounter.open_device().map(drop))
        };
        let not_root = || Error::SandboxUnavailable {
            reason: NOT_ROOT.into(),
        };
        let needs_fuse = |what: &str, e: Error| Error::SandboxUnavailable {
            reason: format!("{what} needs FUSE: {e}"),
        };
        let overlay = || match (root, lower) {
            (false, _) => Err(not_root()),
            (true, Lower::Tree) => Ok(()),
            (true, Lower::Fuse) => {
                fuse().map_err(|e| needs_fuse("the overlay's lower layer (--lower fuse)", e))
            }
        };
        match (asked, why_not) {
            (Mode::Auto, None) if overlay().is_ok() => Ok((Mode::Overlay, None)),
            (Mode::Auto, None) => Ok((Mode::Copy, None)),
            (Mode::Auto | Mode::Fuse, Some(why)) => Ok((Mode::Fuse, Some(why))),
            // A fuse run without root gets the mount it always had, on the host; without a
            // FUSE device it may open, none at all.
            (Mode::Fuse, None) => match fuse() {
                Ok(()) if root => Ok((Mode::Fuse, None)),
                Ok(()) => Ok((Mode::Fuse, Some(NOT_ROOT.into()))),
                Err(e) => Err(needs_fuse("a fuse run", e)),
            },
            (Mode::Overlay | Mode::Copy, Some(reason)) => Err(Error::SandboxUnavailable { reason }),
            (Mode::Overlay, None) => overlay().map(|()| (Mode::Overlay, None)),
            (Mode::Copy, None) => Ok((Mode::Copy, None)),
        }
    }

    /// Run in a sandbox of `mode`.
    pub(super) fn run_sandboxed(&self, mode: Mode, run: &Sandboxed<'_>) -> SandboxedRun {
        let mut exec_id = None;
        let mut own_change = None;
        let mut report = None;
        let result = (|| {
            let runtime = self
                .runtime_dir
                .as_deref()
                .expect("planned with a runtime dir");
            let dir = RunDir::create(runtime)?;
            let config = &sandbox_config(self.policy, run.opts)?;
            let (program, args) = program_and_args(run.req);
            let launch = sandbox::Launch {
                config,
                hide: self.hide.clone(),
                program,
                args,
                env: self.child_env(run.opts, Path::new(&config.workspace_path)),
                cwd: run.cwd,
                timeout: run.opts.timeout,
                cap: run.opts.output_cap,
                confinement: run.confinement,
                output: self.output(run.opts),
            };
            let secrets = self.policy.secret_paths().clone();
            let start = |secrets| sandbox::ingest::Start {
                before: run.before,
                secrets,
                userxattr: !rustix::process::geteuid().is_root(),
            };
            match mode {
                Mode::Overlay if self.session.is_some() => {
                    let session = self.session.as_ref().expect("matched");
                    let mut kept = session.kept.lock().unwrap_or_else(|p| p.into_inner());
                    let quota = if run.readonly {
                        None
                    } else {
                        self.quota_layer()?
                    };
                    let ran = kept.run(
                        &dir,
                        &launch,
                        run.before,
                        run.readonly,
                        || {
                            Ok(MountFs::at_root(self.ws.clone(), run.before)?
                                .with_hidden(secrets.clone()))
                        },
                        &secrets,
                        quota,
                        self.mounter,
                    );
                    let upper = kept.upper();
                    let ingest_it = upper.is_some()
                        && !matches!(&ran, Err(e) if !matches!(e, Error::SpawnFailed { .. } | Error::MountFailed { .. }));
                    let Some(upper) = upper.filter(|_| ingest_it) else {
                        kept.took(self.ws, None, &secrets);
                        return ran.map(|(result, r)| {
                            report = Some(r);
                            result
                        });
                    };
                    let ingested = sandbox::ingest::ingest(
                        self.ws,
                        &upper,
                        start(&secrets),
                        EXEC_OP,
                        run.text,
                    );
                    let taken = match &ingested {
                        Ok((i, op)) if i.refused.is_empty() => Some(op),
                        _ => None,
                    };
                    kept.took(self.ws, taken, &secrets);
                    took_in(ran, ingested, &mut exec_id, &mut own_change, &mut report)
                }
                Mode::Overlay if !run.readonly => {
                    let tree = self.tree(config, run, &secrets)?;
                    let served = match &tree {
                        Some(t) => Served::OverlayOn {
                            tree: t.path().to_path_buf(),
                            refuser: self.refuser(t, run, &secrets)?,
                        },
                        None => Served::Overlay(Arc::new(
                            MountFs::at_root(self.ws.clone(), run.before)?
                                .with_hidden(secrets.clone()),
                        )),
                    };
                    let layer = self.quota_layer()?;
                    let ran = sandbox::run(&dir, &launch, served, layer.as_ref(), self.mounter)
                        .map(|(result, r)| (result, lower_reported(r, tree.as_ref())));
                    // A sandbox that was never set up ran nothing; a command that ran (or
                    // could not start: an entry with no changes, as in every mode) is
                    // ingested.
                    if let Err(e) = &ran
                        && !matches!(e, Error::SpawnFailed { .. } | Error::MountFailed { .. })
                    {
                        return ran.map(|(result, _)| result);
                    }
                    let upper = sandbox::upper_dir(&dir, layer.as_ref());
                    let ingested = sandbox::ingest::ingest(
                        self.ws,
                        &upper,
                        start(&secrets),
                        EXEC_OP,
                        run.text,
                    );
                    // The tree moves on with the fork, taking the command's files from
                    // its layer (not over a quota's own file system: they would be
                    // copied), once nothing of the command is left to write into them.
                    if let (Some(t), Ok((i, op))) = (tree, &ingested)
                        && i.refused.is_empty()
                        && layer.is_none()
                        && runner::all_gone()
                    {
                        drop(t);
                        let _ = self
                            .tree_cache(config)
                            .and_then(|c| c.advance(self.ws, op.after, &secrets, &upper));
                    }
                    took_in(ran, ingested, &mut exec_id, &mut own_change, &mut report)
                }
                // Read-only: the fork's state as the command started, with no layer above.
                Mode::Overlay => {
                    let tree = self.tree(config, run, &secrets)?;
                    let served = match &tree {
                        Some(t) => Served::Bind {
                            dir: t.path().to_path_buf(),
                            readonly: true,
                            refuser: self.refuser(t, run, &secrets)?,
                        },
                        None => Served::Fuse(Arc::new(
                            MountFs::at_root(self.ws.clone(), run.before)?.with_hidden(secrets),
                        )),
                    };
                    let (result, r) = sandbox::run(&dir, &launch, served, None, self.mounter)?;
                    report = Some(lower_reported(r, tree.as_ref()));
                    Ok(result)
                }
                Mode::Copy => {
                    let copy = dir.path().join("copy");
                    std::fs::create_dir(&copy).map_err(|e| Error::io("creating", &copy, e))?;
                    let left_out = super::super::transfer::materialize(
                        self.ws,
                        run.before,
                        &copy,
                        &|view, path, node| secrets.refuses(view, path, Some(node)).unwrap_or(true),
                    )?;
                    let served = Served::Bind {
                        dir: copy.clone(),
                        readonly: run.readonly,
                        refuser: None,
                    };
                    let made = sandbox::ingest::CopyMade::stamp(&copy, left_out)?;
                    let ran = sandbox::run(&dir, &launch, served, None, self.mounter);
                    let ran_at_all = !matches!(
                        &ran,
                        Err(e) if !matches!(e, Error::SpawnFailed { .. } | Error::MountFailed { .. })
                    );
                    if run.readonly || !ran_at_all {
                        return ran.map(|(result, r)| {
                            report = Some(r);
                            result
                        });
                    }
                    let ingested = sandbox::ingest::ingest_copy(
                        self.ws,
                        &copy,
                        start(&secrets),
                        &made,
                        EXEC_OP,
                        run.text,
                    );
                    took_in(ran, ingested, &mut exec_id, &mut own_change, &mut report)
                }
                Mode::Fuse | Mode::Auto => {
                    let session = MountFs::new(self.ws.clone(), None, run.readonly)?
                        .with_label(EXEC_OP, run.text)?
                        .with_hidden(secrets);
                    let finished_as = session.finished_as();
                    let ran = sandbox::run(
                        &dir,
                        &launch,
                        Served::Fuse(Arc::new(session)),
                        None,
                        self.mounter,
                    );
                    exec_id = *finished_as.lock().unwrap_or_else(|p| p.into_inner());
                    let (result, r) = ran?;
                    report = Some(r);
                    Ok(result)
                }
            }
        })();
        SandboxedRun {
            result,
            exec_id,
            own_change,
            report,
        }
    }

    /// The materialized tree of the command's starting state, leased for the run, when the
    /// overlay's lower layer is a tree (`None`: a FUSE view).
    fn tree(
        &self,
        config: &sandbox::SandboxConfig,
        run: &Sandboxed<'_>,
        secrets: &crate::service::secrets::SecretPaths,
    ) -> Result<Option<sandbox::trees::TreeLease>> {
        if run.opts.lower.unwrap_or(config.lower) != Lower::Tree {
            return Ok(None);
        }
        self.tree_cache(config)?
            .lease(self.ws, run.before, secrets)
            .map(Some)
    }

    fn tree_cache(&self, config: &sandbox::SandboxConfig) -> Result<sandbox::trees::TreeCache> {
        let dir = self
            .tree_cache
            .as_ref()
            .ok_or_else(|| Error::SandboxUnavailable {
                reason: "no tree cache directory was given".into(),
            })?;
        sandbox::trees::TreeCache::open(dir.clone(), config.tree_cache_mb)
    }

    /// What covers the tree's placeholders for secrets: a FUSE view of the same root, which
    /// lists them unreadable. `None` when the tree holds none, or where FUSE cannot be had
    /// (the placeholders, empty and mode 000, then stand alone).
    fn refuser(
        &self,
        tree: &sandbox::trees::TreeLease,
        run: &Sandboxed<'_>,
        secrets: &crate::service::secrets::SecretPaths,
    ) -> Result<Option<sandbox::Refuser>> {
        let fuse = self
            .mounter
            .available()
            .and_then(|()| self.mounter.open_device().map(drop));
        if tree.refused.is_empty() || fuse.is_err() {
            return Ok(None);
        }
        let paths: Vec<VPath> = tree
            .refused
            .iter()
            .filter_map(|p| VPath::parse(p).ok())
            .collect();
        let view = MountFs::at_root(self.ws.clone(), run.before)?
            .with_hidden(secrets.clone())
            .showing_only(&paths);
        Ok(Some(sandbox::Refuser {
            view: Arc::new(view),
        }))
    }

    /// A file system for the run's upper layer sized to what the workspace's quota has
    /// left, so the write that crosses it fails with ENOSPC; `None` without quotas. A file
    /// copied up counts whole, and directories count against `max_files` here.
    fn quota_layer(&self) -> Result<Option<sandbox::Layer>> {
        let quota = self.ws.vault().quota()?;
        if quota.max_size_mb.is_none() && quota.max_files.is_none() {
            return Ok(None);
        }
        let (files, bytes) = self.ws.totals()?;
        // Whole pages, rounded down: a tmpfs rounds its size up to one.
        let room = quota
            .max_size_mb
            .map(|m| m.saturating_mul(1 << 20).saturating_sub(bytes) & !4095);
        let inodes = quota.max_files.map(|m| m.saturating_sub(files));
        sandbox::Layer::sized(room, inodes).map(Some)
    }
}

/// The policy's `[sandbox]` table with the run's own workspace path, checked.
pub(super) fn sandbox_config(
    policy: &PolicyEngine,
    opts: &ExecOptions,
) -> Result<sandbox::SandboxConfig> {
    let mut config = policy.sandbox().clone();
    if let Some(p) = &opts.workspace_path {
        config.workspace_path = p.clone();
    }
    config.validate()?;
    Ok(config)
}

/// `r` saying which lower layer the overlay had.
fn lower_reported(mut r: SandboxReport, tree: Option<&sandbox::trees::TreeLease>) -> SandboxReport {
    r.lower = Some(match tree {
        Some(t) => format!("tree ({})", t.how),
        None => "fuse".into(),
    });
    r
}

/// The end of an ingested run: the entry that records it, its report with what was
/// refused, and how the command ended.
fn took_in(
    ran: Result<(runner::RunResult, SandboxReport)>,
    ingested: Result<(sandbox::ingest::Ingested, crate::model::LoggedOp)>,
    exec_id: &mut Option<i64>,
    own_change: &mut Option<crate::model::LoggedOp>,
    report: &mut Option<SandboxReport>,
) -> Result<runner::RunResult> {
    let (ingested, op) = ingested?;
    *exec_id = Some(op.id);
    *own_change = Some(op);
    let (result, mut r) = ran?;
    r.refused = ingested.refused;
    *report = Some(r);
    Ok(result)
}

/// What a sandboxed run gives back: the command's end, the op-log entry that records it,
/// that entry's roots when the run was ingested, and the sandbox's report.
pub(super) struct SandboxedRun {
    pub(super) result: Result<runner::RunResult>,
    pub(super) exec_id: Option<i64>,
    pub(super) own_change: Option<crate::model::LoggedOp>,
    pub(super) report: Option<SandboxReport>,
}

/// One command on its way into a sandbox.
pub(super) struct Sandboxed<'r> {
    pub(super) req: &'r CommandRequest,
    pub(super) cwd: &'r VPath,
    pub(super) readonly: bool,
    pub(super) opts: &'r ExecOptions,
    pub(super) text: &'r str,
    pub(super) confinement: Confinement,
    /// The fork's state as the command starts.
    pub(super) before: crate::model::id::ObjectId,
}

/// The program and its arguments (`/bin/sh -c TEXT` for shell text).
pub(super) fn program_and_args(req: &CommandRequest) -> (String, Vec<String>) {
    match (&req.shell, &req.argv) {
        (Some(s), _) => ("/bin/sh".to_string(), vec!["-c".to_string(), s.clone()]),
        (None, Some(a)) => (a[0].clone(), a[1..].to_vec()),
        _ => unreachable!("validated before the run"),
    }
}
