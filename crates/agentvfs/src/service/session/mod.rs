//! Sessions: a daemon that runs one fork's proxied commands, so consecutive commands pay
//! only policy + checkpoint + run + ingest + summary, not a sandbox (or a mount) each.
//!
//! An overlay session keeps one sandbox namespace for all its commands (see
//! `sandbox::kept`); a fuse session keeps the fork mounted on the host and runs commands
//! there; a copy session runs each command on a copy of its own. The daemon listens on a
//! Unix socket under `$AVFS_HOME/sessions/`; each connection carries one JSON request line
//! and gets one JSON response line. Each command's changes are recorded as their own
//! op-log entry, so `avfs rollback` works as without a session. If anything else changed
//! the fork between commands (a rollback, a restore, a write from the CLI), the daemon
//! rebuilds its namespace, or remounts, before the next command so no view is stale.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod protocol;

pub use protocol::{Request, Response, call, exec};
use protocol::{error_response, forward_output};

use super::mount::MountFs;
use super::mounter::{Mounter, ServedMount};
use super::mounts;
use super::policy::{CommandRequest, PolicyEngine};
use super::proxy::{EXEC_OP, Envelope, ExecOptions, LiveMount, ProxyRuntime, SandboxSession};
use super::registry::Registry;
use super::sandbox::Mode;
use super::sandbox::kept::Kept;
use crate::error::{Error, Result};
use crate::model::Workspace;

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionRecord {
    pub name: String,
    /// The vault or fork as named at `session start`.
    pub vault: String,
    /// The vault file.
    pub path: PathBuf,
    pub workspace: String,
    /// How its commands run: `overlay` (each in the session's kept namespace, on an
    /// overlay of the fork), `copy` (each in a namespace of its own, on a copy of the
    /// fork) or `fuse` (in the fork's mount on the host, no namespace).
    pub mode: Mode,
    /// Where the fork is mounted on the host (`fuse` sessions only).
    pub dir: Option<PathBuf>,
    pub socket: PathBuf,
    /// The policy file the session decides with (none: the built-in policy).
    pub policy: Option<PathBuf>,
    pub pid: u32,
    /// Nanoseconds since the Unix epoch.
    pub since: i64,
    /// Filled in by `list`: the daemon runs and answers on its socket.
    #[serde(default)]
    pub alive: bool,
}

/// How long the daemon waits on a client for its request line, and for each part of its
/// answer to be taken, before it drops the client.
const REQUEST_WAIT: Duration = Duration::from_secs(10);

/// The longest request line the daemon reads (a shell text can be long, not endless).
const MAX_REQUEST: u64 = 16 << 20;

/// The directory of session records, sockets, mount points and logs, under `$AVFS_HOME`.
const DIR: &str = "sessions";

fn dir_of(reg: &Registry) -> PathBuf {
    reg.home().join(DIR)
}

/// Session names become file names: letters, digits, `.`, `_`, `-`; 1 to 64 of them.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName {
            name: name.to_string(),
            reason: "a session name is 1-64 letters, digits, `.`, `_` or `-` (pass --name)".into(),
        })
    }
}

fn file(reg: &Registry, name: &str, ext: &str) -> PathBuf {
    dir_of(reg).join(format!("{name}.{ext}"))
}

pub fn record_path(reg: &Registry, name: &str) -> PathBuf {
    file(reg, name, "json")
}

/// Where the daemon of session `name` writes its log; its directory is created if missing.
pub fn log_path(reg: &Registry, name: &str) -> Result<PathBuf> {
    reg.private_dir(DIR)?;
    Ok(file(reg, name, "log"))
}

/// A new record for a session about to start (the daemon fills in its own pid).
pub fn new_record(
    reg: &Registry,
    name: &str,
    vault: &str,
    path: &Path,
    workspace: &str,
    policy: Option<PathBuf>,
    mode: Mode,
) -> Result<SessionRecord> {
    check_name(name)?;
    reg.private_dir(DIR)?;
    Ok(SessionRecord {
        name: name.to_string(),
        vault: vault.to_string(),
        path: path.to_path_buf(),
        workspace: workspace.to_string(),
        mode,
        dir: (mode == Mode::Fuse).then(|| file(reg, name, "mnt")),
        socket: file(reg, name, "sock"),
        policy,
        pid: std::process::id(),
        since: crate::model::now_ns(),
        alive: false,
    })
}

fn save(reg: &Registry, rec: &SessionRecord) -> Result<()> {
    let p = record_path(reg, &rec.name);
    let json = serde_json::to_vec_pretty(rec).map_err(|e| Error::Storage(e.to_string()))?;
    let tmp = p.with_extension("json.tmp");
    std::fs::write(&tmp, json).map_err(|e| Error::io("writing", &tmp, e))?;
    std::fs::rename(&tmp, &p).map_err(|e| Error::io("writing", &p, e))
}

pub fn load(reg: &Registry, name: &str) -> Option<SessionRecord> {
    let bytes = std::fs::read(record_path(reg, name)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn alive(rec: &SessionRecord) -> bool {
    mounts::pid_alive(rec.pid) && UnixStream::connect(&rec.socket).is_ok()
}

/// Every recorded session, with `alive` filled in.
pub fn list(reg: &Registry) -> Result<Vec<SessionRecord>> {
    let Ok(entries) = std::fs::read_dir(dir_of(reg)) else {
        return Ok(Vec::new());
    };
    let mut out: Vec<SessionRecord> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .map(|mut r: SessionRecord| {
            r.alive = alive(&r);
            r
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Everything `avfs mounts` lists: the recorded mounts, then one entry per session.
pub fn all_mounts(reg: &Registry) -> Result<Vec<mounts::MountRecord>> {
    let mut out = mounts::list(reg)?;
    out.extend(list(reg)?.into_iter().map(|s| mounts::MountRecord {
        dir: s.dir.unwrap_or(s.socket),
        vault: s.vault,
        path: s.path,
        workspace: s.workspace,
        checkpoint: None,
        readonly: false,
        pid: s.pid,
        since: s.since,
        transport: format!("session-{}", s.mode.name()),
        alive: s.alive,
        session: Some(s.name),
    }));
    Ok(out)
}

/// The live session called `name`, or `session_not_found` (naming the ones that exist).
pub fn find(reg: &Registry, name: &str) -> Result<SessionRecord> {
    match load(reg, name) {
        Some(rec) if mounts::pid_alive(rec.pid) => Ok(rec),
        _ => Err(Error::SessionNotFound {
            name: name.to_string(),
            suggestions: list(reg)?
                .into_iter()
                .filter(|r| r.alive)
                .map(|r| r.name)
                .collect(),
        }),
    }
}

/// What `stop` found.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StopReport {
    pub name: String,
    /// True if a daemon was running and has ended.
    pub stopped: bool,
    /// True if the session's daemon was already gone and its leftovers were cleaned up.
    pub stale: bool,
}

/// Stop a session: its daemon records anything pending, unmounts and exits.
pub fn stop(reg: &Registry, name: &str) -> Result<StopReport> {
    check_name(name)?;
    let Some(rec) = load(reg, name) else {
        return Err(Error::SessionNotFound {
            name: name.to_string(),
            suggestions: list(reg)?.into_iter().map(|r| r.name).collect(),
        });
    };
    let running = mounts::pid_alive(rec.pid);
    if running && matches!(call(&rec, &Request::Stop), Ok(Response::Stopping)) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while mounts::pid_alive(rec.pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if mounts::pid_alive(rec.pid) {
            return Err(Error::SessionFailed {
                name: name.to_string(),
                reason: format!("the daemon (pid {}) did not stop within 30 s", rec.pid),
            });
        }
        cleanup(reg, &rec);
        return Ok(StopReport {
            name: name.to_string(),
            stopped: true,
            stale: false,
        });
    }
    if running {
        return Err(Error::SessionFailed {
            name: name.to_string(),
            reason: format!("the daemon (pid {}) does not answer", rec.pid),
        });
    }
    cleanup(reg, &rec);
    Ok(StopReport {
        name: name.to_string(),
        stopped: false,
        stale: true,
    })
}

/// Remove what a session leaves behind (also after its daemon was killed).
fn cleanup(reg: &Registry, rec: &SessionRecord) {
    if let Some(dir) = &rec.dir {
        if mounts::kernel_has(dir) {
            let _ = mounts::detach(dir);
        }
        let _ = std::fs::remove_dir(dir);
    }
    let _ = std::fs::remove_file(&rec.socket);
    let _ = std::fs::remove_file(record_path(reg, &rec.name));
    // A killed daemon's kept namespace and runs left their private directories.
    super::sandbox::remove_stale(&reg.home().join("run"));
}

/// The daemon's mount, remade when the fork changed behind its back.
struct Live {
    session: Arc<MountFs>,
    bg: Box<dyn ServedMount>,
    /// The op log's head after our last command: anything else means someone else wrote.
    seen: Option<i64>,
    /// The secret paths hidden by this mount (a command under another policy remounts).
    hidden: super::secrets::SecretPaths,
}

impl Live {
    fn start(
        ws: &Workspace,
        policy: &PolicyEngine,
        dir: &Path,
        mounter: &dyn Mounter,
    ) -> Result<Live> {
        let session = MountFs::new(ws.clone(), None, false)?
            .with_label(EXEC_OP, "session")?
            .with_hidden(policy.secret_paths().clone());
        session.record_at_finish(false);
        let hidden = policy.secret_paths().clone();
        let session = Arc::new(session);
        let bg = mounter.mount(session.clone(), dir)?;
        Ok(Live {
            session,
            bg,
            seen: ws.last_op_id()?,
            hidden,
        })
    }

    fn stop(self, dir: &Path) -> Result<()> {
        drop(self.session);
        self.bg.unmount().map_err(|e| Error::MountFailed {
            dir: dir.to_path_buf(),
            reason: format!("unmount failed: {e}"),
        })
    }
}

/// Serve a session until stopped (`avfs session stop`, SIGTERM/SIGINT/SIGHUP) or until its
/// process is killed. A mount unmounted from outside is remade at the next command. `rec.pid` is set to this process.
pub fn serve(
    reg: &Registry,
    ws: Workspace,
    policy: PolicyEngine,
    mut rec: SessionRecord,
    mounter: &dyn Mounter,
) -> Result<()> {
    // Each command's envelope is audited as one record; what its runs change underneath
    // (checkpoints, ingests, the mount's file operations) are its steps.
    let ws = ws.as_steps();
    rec.pid = std::process::id();
    // Held while the session serves; given up when it ends.
    let _lease = super::lease::LeaseKeeper::take(&ws, format!("session {}", rec.name))?;
    if let Some(dir) = &rec.dir {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
    }
    let _ = std::fs::remove_file(&rec.socket);
    let listener =
        UnixListener::bind(&rec.socket).map_err(|e| Error::io("listening on", &rec.socket, e))?;
    let mut live = match &rec.dir {
        Some(dir) => Some(Live::start(&ws, &policy, dir, mounter)?),
        None => None,
    };
    let kept = std::sync::Mutex::new(Kept::new(reg.private_dir("run")?));
    save(reg, &rec)?;

    // A signal or a vanished mount wakes the accept loop with a Stop of its own.
    let stop = super::daemon::stop_on_signals()?;
    {
        let (stop, socket) = (stop.clone(), rec.socket.clone());
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(100));
                if stop.load(Ordering::Relaxed) {
                    if let Ok(mut s) = UnixStream::connect(&socket) {
                        let _ = s.write_all(b"{\"op\":\"stop\"}\n");
                    }
                    return;
                }
            }
        });
    }

    let mut result = Ok(());
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        // One client at a time is served: one that never finishes its request line must
        // not hold the session (or its stop) forever, nor fill memory with it.
        let _ = stream.set_read_timeout(Some(REQUEST_WAIT));
        let _ = stream.set_write_timeout(Some(REQUEST_WAIT));
        let mut reader = BufReader::new(&stream).take(MAX_REQUEST);
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() || !line.ends_with('\n') {
            continue;
        }
        let (response, done) = match serde_json::from_str::<Request>(&line) {
            Ok(Request::Ping) => (
                Response::Pong {
                    pid: std::process::id(),
                },
                false,
            ),
            Ok(Request::Stop) => (Response::Stopping, true),
            Ok(Request::Exec {
                argv,
                shell,
                options,
                policy: policy_file,
                stream: streamed,
            }) => {
                // A client that goes away (killed, or given up) ends its command.
                let _watch = HangupWatch::start(&stream);
                let req = CommandRequest {
                    argv,
                    shell,
                    cwd: options.cwd.clone(),
                };
                let place = Place {
                    reg,
                    ws: &ws,
                    mounter,
                    rec: &rec,
                    kept: &kept,
                };
                let observer = streamed.then(|| forward_output(&stream));
                let answer = match policy_file.as_deref().map(PolicyEngine::from_file) {
                    Some(Err(e)) => Err(e),
                    Some(Ok(own)) => place.run_one(&own, &mut live, req, &options, observer),
                    None => place.run_one(&policy, &mut live, req, &options, observer),
                };
                // Audit and checkpoint rows must be visible to the client's next command.
                let _ = ws.vault().flush_batch();
                match answer {
                    Ok(e) => (Response::Envelope(Box::new(e)), false),
                    Err(e) => (error_response(&e), false),
                }
            }
            Err(e) => (
                error_response(&Error::invalid(format!("bad session request: {e}"))),
                false,
            ),
        };
        let mut out = serde_json::to_vec(&response).unwrap_or_default();
        out.push(b'\n');
        let _ = (&stream).write_all(&out);
        if done {
            break;
        }
    }
    if let (Some(l), Some(dir)) = (live.take(), &rec.dir) {
        result = l.stop(dir);
    }
    let ended = kept.lock().unwrap_or_else(|p| p.into_inner()).end();
    result = result.and(ended);
    let _ = std::fs::remove_file(&rec.socket);
    if let Some(dir) = &rec.dir {
        let _ = std::fs::remove_dir(dir);
    }
    let _ = std::fs::remove_file(record_path(reg, &rec.name));
    result
}

/// Watches a client's connection while its request is served, and cancels the request's
/// command if the client hangs up: one running now is killed, one not started yet is
/// killed as it starts (see `runner::cancel`).
struct HangupWatch {
    /// Written to (by dropping it) to wake the watcher when the request is done.
    wake: Option<std::os::fd::OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HangupWatch {
    fn start(stream: &UnixStream) -> HangupWatch {
        super::runner::cancelled(false);
        let Ok((wake_r, wake_w)) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) else {
            return HangupWatch {
                wake: None,
                thread: None,
            };
        };
        let thread = stream.try_clone().ok().map(|s| {
            std::thread::spawn(move || {
                use std::os::fd::AsRawFd;
                // Hung up means closed: a client that only shut down its writing side
                // (it has sent its request) still waits for the answer.
                let gone = libc::POLLHUP | libc::POLLERR;
                let mut fds = [
                    libc::pollfd {
                        fd: s.as_raw_fd(),
                        events: 0,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: wake_r.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                loop {
                    // SAFETY: poll on two descriptors this thread owns, without timeout.
                    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
                    if n < 0
                        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                    {
                        continue;
                    }
                    // Woken (the request is done, its answer not sent yet), or poll failed.
                    if n < 0 || fds[1].revents != 0 {
                        return;
                    }
                    if fds[0].revents & gone != 0 {
                        super::runner::cancelled(true);
                        return;
                    }
                }
            })
        });
        HangupWatch {
            wake: Some(wake_w),
            thread,
        }
    }
}

impl Drop for HangupWatch {
    fn drop(&mut self) {
        // Closing the write end wakes the watcher (POLLHUP on the read end).
        drop(self.wake.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        super::runner::cancelled(false);
    }
}

/// Where a session's commands run.
struct Place<'p> {
    reg: &'p Registry,
    ws: &'p Workspace,
    mounter: &'p dyn Mounter,
    rec: &'p SessionRecord,
    kept: &'p std::sync::Mutex<Kept>,
}

impl Place<'_> {
    fn run_one(
        &self,
        policy: &PolicyEngine,
        live: &mut Option<Live>,
        req: CommandRequest,
        options: &ExecOptions,
        observer: Option<super::runner::Observer>,
    ) -> Result<Envelope> {
        let (ws, rec, mounter) = (self.ws, self.rec, self.mounter);
        let mut runtime = ProxyRuntime {
            ws,
            policy,
            vault_name: rec.vault.clone(),
            mounter,
            runtime_dir: Some(self.reg.private_dir("run")?),
            hide: Vec::new(),
            tree_cache: None,
            session: None,
            observer,
        };
        let Some(dir) = &rec.dir else {
            // A sandboxed session: the kept namespace follows the fork by itself.
            runtime.hide = vec![
                self.reg.home().to_path_buf(),
                ws.vault().path().to_path_buf(),
            ];
            runtime.session = Some(SandboxSession {
                name: &rec.name,
                mode: rec.mode,
                kept: self.kept,
            });
            return runtime.exec_in(req, options, None);
        };
        // Someone else changed the fork (rollback, restore, a CLI write): remount so
        // neither our caches nor the kernel's serve the old state. A mount that went away
        // (unmounted from outside) is remade too, and so is one hiding other secrets than
        // this command's policy names (the kernel may cache what it has looked up).
        let head = ws.last_op_id()?;
        let secrets = policy.secret_paths();
        if live
            .as_ref()
            .is_some_and(|l| l.seen != head || l.bg.is_finished() || l.hidden != *secrets)
            && let Some(l) = live.take()
        {
            let gone = l.bg.is_finished();
            let stopped = l.stop(dir);
            if !gone {
                stopped?;
            }
        }
        if live.is_none() {
            *live = Some(Live::start(ws, policy, dir, mounter)?);
        }
        let l = live.as_mut().expect("mounted above");
        let mount = LiveMount {
            dir,
            session: &l.session,
            name: &rec.name,
        };
        let envelope = runtime.exec_in(req, options, Some(&mount));
        l.seen = ws.last_op_id()?;
        envelope
    }
}

/// What `session start` is asked.
#[derive(Debug, Clone)]
pub struct StartRequest {
    /// The vault or fork whose commands the session runs.
    pub fork: String,
    /// The session's name (default: `fork`).
    pub name: Option<String>,
    /// A policy file for every command of the session (default: the built-in policy).
    pub policy: Option<PathBuf>,
    /// Serve in this process until stopped, instead of in a daemon.
    pub foreground: bool,
    /// How its commands run (`auto`: `overlay` where the sandbox can be made, else as a
    /// proxied command's `auto` picks).
    pub mode: Mode,
}

/// Start a session. The name, fork and policy are checked here so a bad one fails at once,
/// not in the daemon, and a session of that name that still runs is refused. In the
/// foreground this serves until stopped and returns `None`; otherwise it starts a daemon
/// through `launcher` and returns its record once the daemon answers on its socket.
pub fn start(
    service: &super::WorkspaceService,
    launcher: &dyn super::daemon::Launcher,
    mounter: &dyn Mounter,
    req: &StartRequest,
) -> Result<Option<SessionRecord>> {
    use super::daemon::{self, Daemon, DaemonJob};
    let reg = service.registry();
    let name = req.name.clone().unwrap_or_else(|| req.fork.clone());
    check_name(&name)?;
    let policy = PolicyEngine::from_path(req.policy.as_deref())?;
    let policy_path = match &req.policy {
        Some(p) => Some(p.canonicalize().map_err(|e| Error::io("resolving", p, e))?),
        None => None,
    };
    let (target, ws) = service.open(Some(&req.fork))?;
    // A session holds the fork's write lease: refused now, not in the daemon, while
    // another host holds it.
    super::lease::lease_length()?;
    ws.check_lease_free("a session")?;
    // The mode every command gets unless it asks for another; checked now, not in the
    // daemon.
    let (mode, _) = ProxyRuntime {
        ws: &ws,
        policy: &policy,
        vault_name: req.fork.clone(),
        mounter,
        runtime_dir: Some(reg.private_dir("run")?),
        hide: Vec::new(),
        tree_cache: None,
        session: None,
        observer: None,
    }
    .plan(req.mode, super::sandbox::Lower::Fuse)?;
    if mode == Mode::Fuse {
        mounter.available()?;
    }
    if let Some(rec) = load(reg, &name)
        && mounts::pid_alive(rec.pid)
    {
        return Err(Error::AlreadyExists {
            name: format!("session {name} (pid {})", rec.pid),
        });
    }
    let rec = new_record(
        reg,
        &name,
        &req.fork,
        &target.path,
        &target.workspace,
        policy_path.clone(),
        mode,
    )?;
    if req.foreground {
        serve(reg, ws, policy, rec, mounter)?;
        return Ok(None);
    }
    drop(ws);
    let failed = |reason: String| Error::SessionFailed {
        name: name.clone(),
        reason,
    };
    let job = DaemonJob::Session {
        fork: &req.fork,
        name: &name,
        policy: policy_path.as_deref(),
        mode,
    };
    // Ready once the daemon recorded itself and answers on its socket.
    let started = daemon::start(launcher, &job, &log_path(reg, &name)?, |pid| {
        load(reg, &name).filter(|r| r.pid == pid && call(r, &Request::Ping).is_ok())
    })?;
    let mut rec = match started {
        Daemon::Ready(rec) => rec,
        Daemon::Exited(why) => return Err(failed(format!("the daemon exited: {why}"))),
        Daemon::TimedOut => return Err(failed("the daemon did not start within 20 s".into())),
    };
    rec.alive = true;
    Ok(Some(rec))
}

#[cfg(test)]
mod start_tests {
    use super::*;
    use crate::service::daemon::tests::Script;
    use crate::service::testing;

    fn request(name: Option<&str>) -> StartRequest {
        StartRequest {
            fork: "demo".into(),
            name: name.map(str::to_string),
            policy: None,
            foreground: false,
            mode: Mode::Auto,
        }
    }

    #[test]
    fn a_bad_name_or_policy_fails_before_a_daemon_starts() {
        let h = testing::home();
        let never = Script("touch /nonexistent/started; exit 1");
        let bad = start(
            &h.service,
            &never,
            &testing::NeverMounts,
            &request(Some("../x")),
        )
        .unwrap_err();
        assert_eq!(bad.kind(), "invalid_name");
        let missing = StartRequest {
            policy: Some(h.dir.path().join("none.toml")),
            ..request(None)
        };
        assert!(start(&h.service, &never, &testing::NeverMounts, &missing).is_err());
    }

    #[test]
    fn a_daemon_that_exits_is_a_session_failure_with_its_log() {
        let h = testing::home();
        let err = start(
            &h.service,
            &Script("echo cannot-serve; exit 2"),
            &testing::NeverMounts,
            &request(Some("s1")),
        )
        .unwrap_err();
        assert_eq!(err.kind(), "session_failed");
        assert!(err.to_string().contains("cannot-serve"), "{err}");
    }
}
