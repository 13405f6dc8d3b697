//! The execution sandbox: each proxied command runs in its own mount and pid namespaces, on
//! a root assembled for it (the workspace at a stable path, read-only system directories, a
//! minimal /dev, fresh /proc, private /tmp and home, nothing else), so a symlink or a path a
//! program builds cannot reach a host file it was not granted.
//!
//! The pieces: `config` (modes, lower layers, the policy's `[sandbox]` table, the
//! envelope's report), `rundir` (the run's private directory and quota-sized layer),
//! `spec` (what the supervisor hands the init), `init` (the init process, a fresh start
//! of the host program, see `maybe_init`; what it shares with a session's holder is
//! `step`), `rootfs` (the command's root, assembled),
//! `ingest` (an overlay's upper layer into the fork), `trees` (the materialized lower
//! layers), `kept` and `join` (a session's kept namespace) and, here, the supervisor's
//! side: the launch and the run.

mod config;
pub mod ingest;
pub mod init;
mod join;
pub mod kept;
mod rootfs;
mod rundir;
mod spec;
mod step;
pub mod trees;

use std::io::BufRead;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use config::{Lower, Mode, SandboxConfig, SandboxKind, SandboxReport};
use config::{SYSTEM_DIRS, expand};
pub(crate) use rundir::remove_stale;
pub use rundir::{Layer, RunDir};
pub use spec::{Join, Spec, Status, WorkspaceFs};

use super::confine::Confinement;
use super::mount::MountFs;
use super::mounter::{Mounter, ServedMount};
use super::runner::{self, RunResult, RunSpec};
use crate::error::{Error, Result};
use crate::model::path::VPath;

/// Set once the host program called `maybe_init`: it can then start sandbox inits.
static ENTRY: AtomicBool = AtomicBool::new(false);

/// Call first thing in `main` of a program that runs proxied commands. In a sandbox's init
/// (started as `PROGRAM __avfs-sandbox-init SPEC`) it runs the init and returns its exit
/// code; otherwise it notes that this program can start sandboxes and returns `None`.
pub fn maybe_init() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(init::INIT_ARG)) {
        let spec = args.next().map(PathBuf::from).unwrap_or_default();
        return Some(init::main(&spec));
    }
    ENTRY.store(true, Ordering::SeqCst);
    None
}

/// Why this process cannot make sandboxes, if it cannot.
pub fn unavailable_reason() -> Option<String> {
    if !ENTRY.load(Ordering::SeqCst) {
        return Some(
            "this program does not start sandboxes (it must call sandbox::maybe_init first)".into(),
        );
    }
    if rustix::process::geteuid().is_root() {
        return None;
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some("user namespaces are disabled (user.max_user_namespaces is 0)".into());
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Some(
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone is 0)"
                .into(),
        );
    }
    None
}

/// Why `program` did not start, in words a person can act on.
pub(crate) fn spawn_reason(program: &str, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound && program.contains('/') {
        let interp = std::fs::read(program)
            .ok()
            .filter(|b| b.starts_with(b"#!"))
            .and_then(|b| {
                let line = b.split(|c| *c == b'\n').next().unwrap_or_default().to_vec();
                String::from_utf8(line).ok()
            });
        if let Some(line) = interp {
            return format!("its interpreter `{}` was not found", line[2..].trim());
        }
    }
    e.to_string()
}

/// The file system the sandbox gives the command at the workspace path.
pub enum Served {
    /// This mount, read-write (or read-only), over FUSE.
    Fuse(Arc<MountFs>),
    /// A kernel overlay whose lower layer is this read-only mount; the upper layer is the
    /// run directory's `upper`.
    Overlay(Arc<MountFs>),
    /// A kernel overlay whose lower layer is this materialized tree (see `trees`), with
    /// its secrets' placeholders covered by `refuser`, if given.
    OverlayOn {
        tree: PathBuf,
        refuser: Option<Refuser>,
    },
    /// A host directory bound as it is (read-only, or not), with secrets' placeholders
    /// covered by `refuser`, if given.
    Bind {
        dir: PathBuf,
        readonly: bool,
        refuser: Option<Refuser>,
    },
    /// A session's command in the session's kept namespace (see `kept`); a layer given to
    /// `run` is attached in that namespace at `layer_at`.
    Joined { join: Join, layer_at: PathBuf },
}

/// What covers a tree's placeholders for secrets: a read-only FUSE view of the same root
/// that shows only the secrets (unreadable) and the directories above them
/// (`MountFs::showing_only`).
pub struct Refuser {
    pub view: Arc<MountFs>,
}

/// One command to run in a sandbox.
pub struct Launch<'a> {
    pub config: &'a SandboxConfig,
    /// Host paths the command must not see even inside a bound directory.
    pub hide: Vec<PathBuf>,
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: &'a VPath,
    pub timeout: Duration,
    pub cap: usize,
    pub confinement: Confinement,
    /// Streaming and interleaving of the command's output.
    pub output: runner::Output,
}

/// The host paths bound read-only and writable, the private home and the environment a
/// command gets.
struct Layout {
    ro: Vec<PathBuf>,
    rw: Vec<PathBuf>,
    home: PathBuf,
    env: Vec<(String, String)>,
}

impl Launch<'_> {
    /// What the root assembled for this launch depends on, as text: equal for two launches
    /// that may share a kept namespace.
    fn fingerprint(&self) -> Result<String> {
        let l = self.layout()?;
        Ok(format!(
            "{:?}|{:?}|{:?}|{:?}|{}",
            l.ro, l.rw, l.home, self.hide, self.config.workspace_path
        ))
    }

    fn layout(&self) -> Result<Layout> {
        let mut ro: Vec<PathBuf> = SYSTEM_DIRS
            .iter()
            .map(PathBuf::from)
            .filter(|p| std::fs::symlink_metadata(p).is_ok())
            .collect();
        let extra = |list: &[String]| -> Vec<PathBuf> {
            list.iter()
                .filter_map(|raw| expand(raw, &self.env))
                .filter(|p| p.exists())
                .collect()
        };
        for p in extra(&self.config.ro) {
            if !ro.contains(&p) {
                ro.push(p);
            }
        }
        let rw = extra(&self.config.rw);
        let home = self
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| PathBuf::from(v))
            .filter(|h| h.is_absolute() && h != Path::new("/"))
            .unwrap_or_else(|| PathBuf::from("/home/agent"));
        let ws = Path::new(&self.config.workspace_path);
        let cwd = if self.cwd.is_root() {
            ws.to_path_buf()
        } else {
            ws.join(self.cwd.as_str().trim_start_matches('/'))
        };
        let mut env: Vec<(String, String)> = self
            .env
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "HOME" | "PWD" | "TMPDIR" | "OLDPWD"))
            .cloned()
            .collect();
        env.push(("HOME".into(), home.display().to_string()));
        env.push(("PWD".into(), cwd.display().to_string()));
        env.push(("TMPDIR".into(), "/tmp".into()));
        // The workspace must be the fork: not the home, not inside a bound host path, and
        // holding none (a bind would cover the workspace or land in it).
        let clash = ro
            .iter()
            .chain(&rw)
            .find(|b| ws.starts_with(b) || b.starts_with(ws));
        if let Some(b) = clash {
            return Err(Error::invalid(format!(
                "sandbox workspace_path `{}` overlaps the bound host path `{}`",
                ws.display(),
                b.display()
            )));
        }
        if ws == home {
            return Err(Error::invalid(format!(
                "sandbox workspace_path `{}` is the command's home, which the sandbox makes itself; use a directory inside it",
                ws.display()
            )));
        }
        Ok(Layout { ro, rw, home, env })
    }
}

/// Where the overlay's upper layer of a run is, as this process reaches it.
pub fn upper_dir(dir: &RunDir, layer: Option<&Layer>) -> PathBuf {
    match layer {
        Some(l) => l.path("upper"),
        None => dir.path().join("upper"),
    }
}

/// Run `launch` in a sandbox whose workspace is `fs`, with `dir` as the run's private
/// directory (and `layer`, when given, holding the overlay's upper layer or the copy).
/// Returns how the command ended and what the envelope says of the sandbox.
pub fn run(
    dir: &RunDir,
    launch: &Launch<'_>,
    fs: Served,
    layer: Option<&Layer>,
    mounter: &dyn Mounter,
) -> Result<(RunResult, SandboxReport)> {
    let Layout { ro, rw, home, env } = launch.layout()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root).map_err(|e| Error::io("creating", &root, e))?;
    let (status_r, status_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Error::io("creating a pipe in", dir.path(), e.into()))?;
    let mut pass = vec![status_w.as_raw_fd()];
    let mut layer_at = None;
    let mut refuse = None;
    let mut refuse_with = |refuser: Option<Refuser>,
                           pass: &mut Vec<i32>|
     -> Result<Option<(Arc<MountFs>, OwnedFd)>> {
        let Some(r) = refuser else { return Ok(None) };
        let dev = mounter.open_device()?;
        pass.push(dev.as_raw_fd());
        let [at, tree_at] = ["refuser", "tree"].map(|n| dir.path().join(n));
        for d in [&at, &tree_at] {
            std::fs::create_dir(d).map_err(|e| Error::io("creating", d, e))?;
        }
        refuse = Some(spec::Refuse {
            fd: dev.as_raw_fd(),
            at,
            tree_at,
        });
        Ok(Some((r.view, dev)))
    };
    let (workspace, serve): (WorkspaceFs, Option<(Arc<MountFs>, OwnedFd)>) = match fs {
        Served::Fuse(session) => {
            let dev = mounter.open_device()?;
            pass.push(dev.as_raw_fd());
            let readonly = session.readonly();
            (
                WorkspaceFs::Fuse {
                    fd: dev.as_raw_fd(),
                    readonly,
                },
                Some((session, dev)),
            )
        }
        Served::Overlay(_) | Served::OverlayOn { .. } => {
            let (fd, tree, lower) = match fs {
                Served::Overlay(lower) => {
                    let dev = mounter.open_device()?;
                    pass.push(dev.as_raw_fd());
                    (Some(dev), None, Some(lower))
                }
                Served::OverlayOn { tree, refuser } => {
                    let (view, dev) = refuse_with(refuser, &mut pass)?.unzip();
                    (dev, Some(tree), view)
                }
                _ => unreachable!("matched above"),
            };
            let l = dir.path().join("lower");
            std::fs::create_dir(&l).map_err(|e| Error::io("creating", &l, e))?;
            // Upper and work on the run's own file system when it has one (made here, seen
            // by the init where it attaches it).
            let (u, w) = match layer {
                Some(layer) => {
                    for (n, mode) in [("upper", 0o755), ("work", 0o700)] {
                        let d = layer.path(n);
                        use std::os::unix::fs::DirBuilderExt;
                        std::fs::DirBuilder::new()
                            .mode(mode)
                            .create(&d)
                            .map_err(|e| Error::io("creating", &d, e))?;
                    }
                    let at = dir.path().join("layer");
                    (at.join("upper"), at.join("work"))
                }
                None => {
                    let [u, w] = ["upper", "work"].map(|n| dir.path().join(n));
                    for d in [&u, &w] {
                        std::fs::create_dir(d).map_err(|e| Error::io("creating", d, e))?;
                    }
                    (u, w)
                }
            };
            (
                WorkspaceFs::Overlay {
                    fd: fd
                        .as_ref()
                        .filter(|_| tree.is_none())
                        .map(|d| d.as_raw_fd()),
                    tree,
                    lower: l,
                    upper: u,
                    work: w,
                },
                lower.zip(fd),
            )
        }
        Served::Bind {
            dir,
            readonly,
            refuser,
        } => (
            WorkspaceFs::Bind { dir, readonly },
            refuse_with(refuser, &mut pass)?,
        ),
        Served::Joined { join, layer_at: at } => {
            pass.push(join.holder);
            layer_at = Some(at);
            (WorkspaceFs::Joined(join), None)
        }
    };
    let ws_path = PathBuf::from(&launch.config.workspace_path);
    let cwd = env
        .iter()
        .find(|(k, _)| k == "PWD")
        .map(|(_, v)| PathBuf::from(v))
        .unwrap_or_else(|| ws_path.clone());
    let euid = rustix::process::geteuid();
    if let Some(l) = layer {
        pass.push(l.fd.as_raw_fd());
    }
    let spec = Spec {
        root,
        workspace_path: ws_path.clone(),
        workspace,
        refuse,
        layer: layer.map(|l| {
            let at = layer_at.unwrap_or_else(|| dir.path().join("layer"));
            (l.fd.as_raw_fd(), at)
        }),
        layer_inodes: layer.and_then(|l| l.inodes),
        ro: ro.clone(),
        rw: rw.clone(),
        hide: launch.hide.clone(),
        home,
        program: launch.program.clone(),
        args: launch.args.clone(),
        env: env.clone(),
        cwd,
        offline: launch.confinement.offline,
        landlock: launch.confinement.landlock,
        userns: (!euid.is_root()).then(|| (euid.as_raw(), rustix::process::getegid().as_raw())),
        status_fd: status_w.as_raw_fd(),
    };
    let spec_path = dir.path().join("spec.json");
    let bytes = serde_json::to_vec(&spec).map_err(|e| Error::invalid(e.to_string()))?;
    std::fs::write(&spec_path, bytes).map_err(|e| Error::io("writing", &spec_path, e))?;
    let args = vec![init::INIT_ARG.to_string(), spec_path.display().to_string()];
    let (result, statuses, served) = std::thread::scope(|scope| {
        // Answer the FUSE mount once the init says it exists; collect what else it says.
        let listener = scope.spawn(move || {
            let mut serve = serve;
            let mut served: Option<Result<Box<dyn ServedMount>>> = None;
            let mut statuses = Vec::new();
            let reader = std::io::BufReader::new(std::fs::File::from(status_r));
            for line in reader.lines() {
                let Ok(line) = line else { break };
                let Ok(status) = serde_json::from_str::<Status>(&line) else {
                    continue;
                };
                if status == Status::Mounted {
                    if let Some((session, dev)) = serve.take() {
                        served = Some(mounter.serve_device(session, dev));
                    }
                } else {
                    statuses.push(status);
                }
            }
            (statuses, served)
        });
        let result = runner::run(&RunSpec {
            program: "/proc/self/exe",
            args: &args,
            cwd: Path::new("/"),
            env: env.clone(),
            timeout: launch.timeout,
            cap: launch.cap,
            confine: None,
            pass_fds: pass.clone(),
            die_with_parent: true,
            output: launch.output.clone(),
        });
        // Our end of the status pipe: the listener sees its end once the sandbox is gone.
        drop(status_w);
        let (statuses, served) = listener.join().unwrap_or_default();
        (result, statuses, served)
    });
    // The namespace is gone, and its mounts with it: the FUSE session ends by itself.
    let ended = match served {
        Some(Ok(mount)) => mount.unmount().map_err(|e| Error::MountFailed {
            dir: ws_path.clone(),
            reason: format!("ending the sandbox's file system: {e}"),
        }),
        Some(Err(e)) => Err(e),
        None => Ok(()),
    };
    let mut result = result?;
    for status in statuses {
        match status {
            Status::SetupFailed { reason } => return Err(Error::SandboxFailed { reason }),
            Status::SpawnFailed { reason, os_error } => {
                return Err(Error::SpawnFailed {
                    program: launch.program.clone(),
                    reason,
                    os_error,
                });
            }
            Status::Signaled { signal } => {
                result.exit_code = None;
                result.signal = Some(signal);
            }
            Status::Mounted | Status::Ready => {}
        }
    }
    ended?;
    let report = SandboxReport {
        kind: SandboxKind::Namespace,
        reason: None,
        workspace_path: Some(ws_path.display().to_string()),
        ro: ro.iter().map(|p| p.display().to_string()).collect(),
        rw: rw.iter().map(|p| p.display().to_string()).collect(),
        refused: Vec::new(),
        lower: None,
    };
    Ok((result, report))
}

/// A session's kept namespace, assembled and waiting for its commands (see `kept`).
pub(crate) struct Holder {
    child: std::process::Child,
    /// Names the holder for the commands' `setns`, whatever becomes of its pid.
    pidfd: OwnedFd,
    served: Box<dyn ServedMount>,
}

impl Holder {
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None)) && !self.served.is_finished()
    }

    /// Kill the holder: its namespace, and every mount in it, goes.
    fn end(mut self) -> Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        runner::unkeep(self.child.id());
        self.served.unmount().map_err(|e| Error::SandboxFailed {
            reason: format!("ending the session's file system: {e}"),
        })
    }
}

/// Start a holder for `launch`'s root in `dir`: `lower` is served read-only at the stage's
/// `lower`, the host directory `uppers` bound at its `h`, and `store` attached at its `l`.
fn hold(
    dir: &RunDir,
    launch: &Launch<'_>,
    lower: Arc<MountFs>,
    uppers: &Path,
    store: &Layer,
    mounter: &dyn Mounter,
) -> Result<Holder> {
    let Layout { ro, rw, home, env } = launch.layout()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root).map_err(|e| Error::io("creating", &root, e))?;
    let (status_r, status_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Error::io("creating a pipe in", dir.path(), e.into()))?;
    let dev = mounter.open_device()?;
    let ws_path = PathBuf::from(&launch.config.workspace_path);
    let euid = rustix::process::geteuid();
    let spec = Spec {
        root,
        workspace_path: ws_path.clone(),
        workspace: WorkspaceFs::Staged {
            fd: dev.as_raw_fd(),
            uppers: uppers.to_path_buf(),
        },
        refuse: None,
        layer: Some((store.fd.as_raw_fd(), PathBuf::from(join::STAGE).join("l"))),
        layer_inodes: None,
        ro,
        rw,
        hide: launch.hide.clone(),
        home,
        program: String::new(),
        args: Vec::new(),
        env: env.clone(),
        cwd: ws_path,
        offline: false,
        landlock: false,
        userns: (!euid.is_root()).then(|| (euid.as_raw(), rustix::process::getegid().as_raw())),
        status_fd: status_w.as_raw_fd(),
    };
    let spec_path = dir.path().join("hold.json");
    let bytes = serde_json::to_vec(&spec).map_err(|e| Error::invalid(e.to_string()))?;
    std::fs::write(&spec_path, bytes).map_err(|e| Error::io("writing", &spec_path, e))?;
    let args = vec![init::INIT_ARG.to_string(), spec_path.display().to_string()];
    let mut cmd = runner::command(&RunSpec {
        program: "/proc/self/exe",
        args: &args,
        cwd: Path::new("/"),
        env,
        timeout: Duration::MAX,
        cap: 0,
        confine: None,
        pass_fds: vec![status_w.as_raw_fd(), dev.as_raw_fd(), store.fd.as_raw_fd()],
        die_with_parent: true,
        output: runner::Output::default(),
    })?;
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    let mut child = cmd.spawn().map_err(|e| Error::SandboxFailed {
        reason: format!("starting the session's namespace: {e}"),
    })?;
    // Not a leftover of the runs that follow: they must not kill it.
    runner::keep(child.id());
    drop(status_w);
    let pidfd = rustix::process::Pid::from_raw(child.id() as i32)
        .ok_or_else(|| Error::invalid("no pid"))
        .and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).map_err(|e| {
                Error::SandboxFailed {
                    reason: format!("pidfd_open: {e}"),
                }
            })
        });
    let (mut dev, mut served, mut ready, mut failed) = (Some(dev), None, false, None);
    for line in std::io::BufReader::new(std::fs::File::from(status_r)).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Status>(&line) {
            Ok(Status::Mounted) => {
                if let Some(dev) = dev.take() {
                    served = Some(mounter.serve_device(lower.clone(), dev));
                }
            }
            Ok(Status::Ready) => ready = true,
            Ok(Status::SetupFailed { reason }) => failed = Some(reason),
            _ => {}
        }
    }
    let fail = |child: &mut std::process::Child, reason: String| {
        let _ = child.kill();
        let _ = child.wait();
        runner::unkeep(child.id());
        Error::SandboxFailed { reason }
    };
    let pidfd = match pidfd {
        Ok(fd) => fd,
        Err(e) => return Err(fail(&mut child, e.to_string())),
    };
    match (served, ready, failed) {
        (Some(Ok(served)), true, None) => Ok(Holder {
            child,
            pidfd,
            served,
        }),
        (Some(Err(e)), _, _) => Err(fail(&mut child, e.to_string())),
        (_, _, Some(reason)) => Err(fail(&mut child, reason)),
        _ => Err(fail(
            &mut child,
            "the session's namespace ended before it was ready".into(),
        )),
    }
}
