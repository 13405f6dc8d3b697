//! Running one child process at the command boundary: its own process group, output drained
//! on separate threads with a cap, a timeout that terminates the whole group (SIGTERM, a
//! grace period, SIGKILL), and descendants that left the group found through the child
//! subreaper and killed too. A child that floods output or never closes its pipes cannot
//! wedge the caller.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};

/// How long a terminated group gets before SIGKILL.
const GRACE: Duration = Duration::from_secs(2);
/// How long to keep reading pipes after the child exits (a background grandchild may hold them).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(300);

/// Captured output of one stream.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Captured {
    /// The kept bytes as text (invalid UTF-8 replaced).
    pub text: String,
    /// Every byte the stream produced, kept or not.
    pub bytes: u64,
    /// True if `text` holds only the first `cap` bytes.
    pub truncated: bool,
}

/// What a command's output does as it comes, for a caller that streams it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// The command's process was started.
    Started,
    Stdout(&'a [u8]),
    Stderr(&'a [u8]),
}

/// Called for each event as it happens (from the threads that read the output).
pub type Observer = Arc<dyn Fn(Event<'_>) + Send + Sync>;

/// How a command's output is collected besides being captured.
#[derive(Clone, Default)]
pub struct Output {
    /// Shown every chunk as it is read, before the cap (see [`Event`]).
    pub observer: Option<Observer>,
    /// stdout and stderr are one pipe, so the captured stdout holds both in the order the
    /// command wrote them (and stderr is empty).
    pub interleave: bool,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("observer", &self.observer.is_some())
            .field("interleave", &self.interleave)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct RunSpec<'a> {
    pub program: &'a str,
    pub args: &'a [String],
    pub cwd: &'a Path,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Keep at most this many bytes of each stream.
    pub cap: usize,
    /// Landlock / network namespace, applied in the child before exec.
    pub confine: Option<Arc<super::confine::Prepared>>,
    /// Descriptors the child keeps open across exec (a sandbox's FUSE device and status
    /// pipe), even ones this process serves mounts through.
    pub pass_fds: Vec<i32>,
    /// The child is killed when the calling thread ends (so `kill -9` of this process ends
    /// a sandbox, and with it the command).
    pub die_with_parent: bool,
    /// Streaming and interleaving of the output.
    pub output: Output,
}

#[derive(Debug, Clone)]
pub struct RunResult {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration: Duration,
    pub stdout: Captured,
    pub stderr: Captured,
    /// Descendants still alive after the child ended, killed by the runner.
    pub killed_stragglers: usize,
}

#[derive(Default)]
struct Sink {
    data: Vec<u8>,
    total: u64,
}

fn drain(
    mut r: impl Read + Send + 'static,
    cap: usize,
    observer: Option<(Observer, bool)>,
) -> (Arc<Mutex<Sink>>, JoinHandle<()>) {
    let sink = Arc::new(Mutex::new(Sink::default()));
    let s2 = sink.clone();
    let h = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Some((see, is_stderr)) = &observer {
                        see(if *is_stderr {
                            Event::Stderr(&buf[..n])
                        } else {
                            Event::Stdout(&buf[..n])
                        });
                    }
                    let mut s = s2.lock().unwrap_or_else(|p| p.into_inner());
                    s.total += n as u64;
                    let room = cap.saturating_sub(s.data.len());
                    let keep = room.min(n);
                    s.data.extend_from_slice(&buf[..keep]);
                }
            }
        }
    });
    (sink, h)
}

fn captured(sink: &Arc<Mutex<Sink>>, cap: usize) -> Captured {
    let s = sink.lock().unwrap_or_else(|p| p.into_inner());
    Captured {
        text: String::from_utf8_lossy(&s.data).into_owned(),
        bytes: s.total,
        truncated: s.total as usize > cap.min(s.data.len()) || s.total > s.data.len() as u64,
    }
}

/// Block until `fd` is readable or `limit` passes.
fn wait_readable(fd: &std::os::fd::OwnedFd, limit: Duration) {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = limit.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd on the stack, for the duration of the call.
    unsafe {
        libc::poll(&mut p, 1, ms);
    }
}

fn signal_group(pgid: i32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pid, sig);
    }
}

/// Children of this process (the subreaper inherits orphaned descendants): from each
/// thread's `children` list, or by scanning /proc where the kernel has no such list.
fn our_children() -> Vec<i32> {
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        let mut kids = Vec::new();
        let mut listed = false;
        for t in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
                listed = true;
                kids.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
            }
        }
        if listed {
            // Zombies are reaped by the caller; only the living need a signal.
            kids.retain(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| !s.contains(") Z "))
            });
            return kids;
        }
    }
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = &s[s.rfind(')')? + 2..];
                    let mut f = rest.split(' ');
                    let state = f.next()?;
                    let ppid: i32 = f.next()?.parse().ok()?;
                    Some(ppid == me && state != "Z")
                })
                .unwrap_or(false)
        })
        .collect()
}

/// Children this process keeps on purpose across runs (a session's namespace holder):
/// never taken for a run's leftovers.
static KEPT: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Keep child `pid` out of every run's leftovers until [`unkeep`].
pub fn keep(pid: u32) {
    KEPT.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(pid as i32);
}

pub fn unkeep(pid: u32) {
    KEPT.lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|k| *k != pid as i32);
}

/// Kill every descendant we inherited, and reap them.
fn kill_stragglers() -> usize {
    let mut killed = 0;
    for _ in 0..50 {
        let mut kids = our_children();
        let kept = KEPT.lock().unwrap_or_else(|p| p.into_inner()).clone();
        kids.retain(|k| !kept.contains(k));
        if kids.is_empty() {
            break;
        }
        for pid in kids {
            if let Some(p) = rustix::process::Pid::from_raw(pid)
                && rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok()
            {
                killed += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
        reap_all();
    }
    reap_all();
    killed
}

/// Whether every process a run left (its own, and any inherited as their subreaper) is
/// gone and reaped: after a run in a pid namespace, nothing of it can still be writing.
pub(crate) fn all_gone() -> bool {
    reap_all();
    let kept = KEPT.lock().unwrap_or_else(|p| p.into_inner()).clone();
    our_children().iter().all(|k| kept.contains(k))
}

fn reap_all() {
    while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {}
}

/// One run at a time per process: leftover descendants are found as "children of this
/// process", which is only exact while no other run is in flight. Hosts that want parallel
/// commands run several processes.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The process group of the run in flight in this process, if any.
static RUNNING: Mutex<Option<i32>> = Mutex::new(None);

/// Marks the run in flight until dropped.
struct Running;

impl Running {
    fn set(pgid: i32) -> Running {
        let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        *running = Some(pgid);
        if CANCELLED.load(std::sync::atomic::Ordering::SeqCst) {
            signal_group(pgid, rustix::process::Signal::KILL);
        }
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        *RUNNING.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Set while the caller the runs are for has gone away.
static CANCELLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The caller of this process's runs went away (`true`: kill the run in flight, and any
/// run that starts, as soon as it starts; their results are as for a command killed by a
/// signal), or a new caller came (`false`).
pub fn cancelled(gone: bool) {
    let running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
    CANCELLED.store(gone, std::sync::atomic::Ordering::SeqCst);
    if gone && let Some(pgid) = *running {
        signal_group(pgid, rustix::process::Signal::KILL);
    }
}

/// Why `program` did not start, in words a person can act on. ENOENT for a file that
/// exists means its `#!` interpreter is missing.
fn spawn_reason(program: &str, cwd: &Path, e: &std::io::Error) -> String {
    // A name without a slash is looked up in PATH, not in the working directory.
    let path = cwd.join(program);
    if e.kind() == std::io::ErrorKind::NotFound && program.contains('/') && path.is_file() {
        let interp = std::fs::read(&path)
            .ok()
            .filter(|b| b.starts_with(b"#!"))
            .and_then(|b: Vec<u8>| {
                let line = b.split(|c| *c == b'\n').next().unwrap_or_default().to_vec();
                String::from_utf8(line).ok()
            });
        if let Some(line) = interp {
            return format!("its interpreter `{}` was not found", line[2..].trim());
        }
    }
    e.to_string()
}

/// The descriptors through which this process serves FUSE mounts: `/dev/fuse` and the
/// io_uring queues of FUSE over io_uring. A child must drop them before it touches a mount.
/// While a child holds one the kernel keeps the connection open, so if this process is
/// killed between fork and exec, the child's chdir into the mount waits for an answer from
/// a server that is gone, forever and unkillably (found by the crash campaign).
fn fuse_server_fds() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let fd: i32 = e.file_name().to_str()?.parse().ok()?;
        let target = std::fs::read_link(e.path()).ok()?;
        let target = target.to_string_lossy();
        (fd > 2 && (target == "/dev/fuse" || target == "anon_inode:[io_uring]")).then_some(fd)
    })
    .collect()
}

/// The command `spec` describes, ready to spawn: its descriptors, working directory,
/// environment and confinement set up in the child, stdout and stderr piped.
pub fn command(spec: &RunSpec<'_>) -> Result<Command> {
    let mut cmd = Command::new(spec.program);
    // The working directory is entered in the child only after it has dropped the
    // descriptors that serve FUSE mounts (see `fuse_server_fds`), not by `current_dir`,
    // which std enters before any `pre_exec` hook runs.
    let cwd = std::ffi::CString::new(spec.cwd.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::invalid(format!("{} holds a NUL byte", spec.cwd.display())))?;
    let mut server_fds = fuse_server_fds();
    server_fds.retain(|fd| !spec.pass_fds.contains(fd));
    let pass_fds = spec.pass_fds.clone();
    let die_with_parent = spec.die_with_parent;
    // SAFETY: only getpid(2), prctl(2), fcntl(2), close(2) and chdir(2), all
    // async-signal-safe, on data made before fork.
    let parent = std::process::id() as libc::pid_t;
    unsafe {
        cmd.pre_exec(move || {
            if die_with_parent {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                // The parent may have died before the line above.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
            }
            for fd in &server_fds {
                libc::close(*fd);
            }
            for fd in &pass_fds {
                if libc::fcntl(*fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if libc::chdir(cwd.as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.args(spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(c) = spec.confine.clone() {
        // SAFETY: `apply_in_child` makes only async-signal-safe system calls.
        unsafe {
            cmd.pre_exec(move || c.apply_in_child());
        }
    }
    Ok(cmd)
}

/// Run the command to completion or timeout.
pub fn run(spec: &RunSpec<'_>) -> Result<RunResult> {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    // Orphaned descendants (setsid, double fork) are reparented to us, so we can find them.
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    let mut cmd = command(spec)?;
    // Interleaved: both streams are the write end of one pipe, read as stdout.
    let merged = if spec.output.interleave {
        let (r, w) =
            std::io::pipe().map_err(|e| Error::io("making a pipe for", spec.program, e))?;
        let w2 = w
            .try_clone()
            .map_err(|e| Error::io("making a pipe for", spec.program, e))?;
        cmd.stdout(w).stderr(w2);
        Some(r)
    } else {
        None
    };
    let start = Instant::now();
    let spawned = cmd.spawn();
    // Our copies of the pipe's write end go now, or the reader never sees the end.
    drop(cmd);
    let mut child = spawned.map_err(|e| Error::SpawnFailed {
        program: spec.program.to_string(),
        reason: spawn_reason(spec.program, spec.cwd, &e),
        os_error: e.raw_os_error(),
    })?;
    let pgid = child.id() as i32;
    let _running = Running::set(pgid);
    let observe = |is_stderr| spec.output.observer.clone().map(|o| (o, is_stderr));
    if let Some(o) = &spec.output.observer {
        o(Event::Started);
    }
    let (out, out_h) = match merged {
        Some(r) => drain(r, spec.cap, observe(false)),
        None => drain(
            child.stdout.take().expect("piped stdout"),
            spec.cap,
            observe(false),
        ),
    };
    let (err, err_h) = match child.stderr.take() {
        Some(e) => drain(e, spec.cap, observe(true)),
        None => drain(std::io::empty(), spec.cap, None),
    };
    let mut timed_out = false;
    let mut term_sent: Option<Instant> = None;
    // Wake when the child exits (a pidfd turns readable) or at the next deadline; without
    // pidfds, poll quickly at first (most commands are short), then back off.
    let pidfd = rustix::process::Pid::from_raw(pgid)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    let mut nap = Duration::from_micros(50);
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| Error::io("waiting for", spec.program, e))?
        {
            break status;
        }
        let now = Instant::now();
        if !timed_out && now.duration_since(start) >= spec.timeout {
            timed_out = true;
            term_sent = Some(now);
            signal_group(pgid, rustix::process::Signal::TERM);
        }
        if let Some(t) = term_sent
            && now.duration_since(t) >= GRACE
        {
            signal_group(pgid, rustix::process::Signal::KILL);
        }
        match &pidfd {
            Some(fd) => {
                let next = match term_sent {
                    Some(t) => (t + GRACE).saturating_duration_since(now),
                    // A deadline past what an Instant holds is no deadline at all.
                    None => start
                        .checked_add(spec.timeout)
                        .map_or(Duration::MAX, |d| d.saturating_duration_since(now)),
                };
                wait_readable(fd, next.min(Duration::from_secs(1)));
            }
            None => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(5));
            }
        }
    };
    let duration = start.elapsed();
    // The group may outlive its leader; and anything that left the group is ours now.
    signal_group(pgid, rustix::process::Signal::KILL);
    let killed_stragglers = kill_stragglers();
    let deadline = Instant::now() + DRAIN_AFTER_EXIT;
    let mut nap = Duration::from_micros(20);
    for h in [out_h, err_h] {
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(5));
        }
    }
    Ok(RunResult {
        exit_code: status.code(),
        signal: status.signal(),
        timed_out,
        duration,
        stdout: captured(&out, spec.cap),
        stderr: captured(&err, spec.cap),
        killed_stragglers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fuse_server_descriptors_are_found_and_the_child_runs_in_its_cwd() {
        // /dev/fuse is what a mount serves through (the suite needs it anyway).
        let fuse = std::fs::File::open("/dev/fuse").expect("/dev/fuse (FUSE is required)");
        use std::os::fd::AsRawFd;
        assert!(fuse_server_fds().contains(&fuse.as_raw_fd()));
        let plain = std::fs::File::open("/dev/null").unwrap();
        assert!(!fuse_server_fds().contains(&plain.as_raw_fd()));
        // The working directory is entered by the pre-exec hook: `pwd` shows it, and a
        // missing one is a spawn failure naming the reason.
        assert_eq!(sh("pwd", 10_000, 1024).stdout.text, "/tmp\n");
        let args = vec!["-c".to_string(), "pwd".to_string()];
        let missing = run(&RunSpec {
            program: "/bin/sh",
            args: &args,
            cwd: Path::new("/nonexistent/dir"),
            env: Vec::new(),
            timeout: Duration::from_secs(10),
            cap: 1024,
            confine: None,
            pass_fds: Vec::new(),
            die_with_parent: false,
            output: Output::default(),
        });
        let err = missing.expect_err("no such working directory");
        assert_eq!(err.kind(), "spawn_failed", "{err}");
    }

    fn sh(script: &str, timeout_ms: u64, cap: usize) -> RunResult {
        let args = vec!["-c".to_string(), script.to_string()];
        run(&RunSpec {
            program: "/bin/sh",
            args: &args,
            cwd: Path::new("/tmp"),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            timeout: Duration::from_millis(timeout_ms),
            cap,
            confine: None,
            pass_fds: Vec::new(),
            die_with_parent: false,
            output: Output::default(),
        })
        .unwrap()
    }

    #[test]
    fn exit_code_and_output() {
        let r = sh("echo out; echo err >&2; exit 3", 10_000, 1024);
        assert_eq!(r.exit_code, Some(3));
        assert_eq!(r.stdout.text, "out\n");
        assert_eq!(r.stderr.text, "err\n");
        assert!(!r.timed_out && !r.stdout.truncated);
    }

    #[test]
    fn timeout_kills_the_group_and_keeps_partial_output() {
        let r = sh("echo started; sleep 100 & sleep 100", 300, 1024);
        assert!(r.timed_out);
        assert_eq!(r.stdout.text, "started\n");
        // Killed by the timeout, not ended by the sleep: no exit code, only a signal.
        assert_eq!(r.exit_code, None);
    }

    #[test]
    fn detached_grandchildren_do_not_survive() {
        // A setsid'd grandchild leaves the group; a double fork leaves its parent.
        let r = sh(
            "setsid sleep 1000 & echo $!; (sleep 1000 & echo $!) ; sleep 1000",
            300,
            1024,
        );
        assert!(r.timed_out);
        let pids: Vec<&str> = r.stdout.text.lines().collect();
        assert_eq!(pids.len(), 2, "{:?}", r.stdout.text);
        // The kill is asynchronous: wait for each to go. The deadline only bounds a hang;
        // a survivor (sleeping 1000 s) outlasts it and fails.
        for pid in pids {
            let start = Instant::now();
            while std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| !s.contains(") Z "))
            {
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "descendant {pid} survived the timeout"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    #[test]
    fn flood_is_truncated_and_counted() {
        let r = sh("head -c 5000000 /dev/zero", 20_000, 1000);
        assert_eq!(r.stdout.bytes, 5_000_000);
        assert_eq!(r.stdout.text.len(), 1000);
        assert!(r.stdout.truncated);
    }
}
