//! Background daemons (a mount, a session): start one detached, in its own session with its
//! output in a log, and wait until it is ready. What to run is the adapter's to say (its
//! own executable and arguments) through [`Launcher`]; when it counts as started is ours.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long a daemon may take to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// What a daemon is to do.
#[derive(Debug, Clone, Copy)]
pub enum DaemonJob<'a> {
    /// Serve `vault` (`NAME` or `NAME@CHECKPOINT`) at `dir` in the foreground.
    Mount {
        vault: &'a str,
        dir: &'a Path,
        readonly: bool,
    },
    /// Serve session `name` of `fork` in the foreground.
    Session {
        fork: &'a str,
        name: &'a str,
        policy: Option<&'a Path>,
        mode: super::sandbox::Mode,
    },
}

/// Provided by an adapter: the command that runs `job` in the foreground of a new process.
pub trait Launcher {
    fn command(&self, job: &DaemonJob<'_>) -> Result<Command>;
}

/// How starting a daemon went.
pub enum Daemon<T> {
    Ready(T),
    /// It exited first; with its status and log.
    Exited(String),
    TimedOut,
}

/// Start `job` detached (its own session, output to `log`) and wait up to
/// [`READY_TIMEOUT`] until `ready(pid)` answers.
pub fn start<T>(
    launcher: &dyn Launcher,
    job: &DaemonJob<'_>,
    log: &Path,
    mut ready: impl FnMut(u32) -> Option<T>,
) -> Result<Daemon<T>> {
    use std::os::unix::process::CommandExt;
    if let Some(parent) = log.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io("creating", parent, e))?;
    }
    let out = std::fs::File::create(log).map_err(|e| Error::io("creating", log, e))?;
    let err = out.try_clone().map_err(|e| Error::io("creating", log, e))?;
    let mut cmd = launcher.command(job)?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err);
    // SAFETY: setsid is async-signal-safe; it detaches the daemon from our session.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::io("starting a daemon", log, e))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(t) = ready(child.id()) {
            return Ok(Daemon::Ready(t));
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return Ok(Daemon::Exited(format!("{status}: {}", text.trim())));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Ok(Daemon::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A flag SIGTERM, SIGINT and SIGHUP set: how a server running in the foreground (a
/// mount or session daemon) learns to stop and clean up.
pub fn stop_on_signals() -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| crate::Error::io("installing signal handler", "", e))?;
    }
    Ok(stop)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Runs a shell script instead of an avfs daemon.
    pub(crate) struct Script(pub &'static str);

    impl Launcher for Script {
        fn command(&self, _job: &DaemonJob<'_>) -> Result<Command> {
            let mut c = Command::new("/bin/sh");
            c.args(["-c", self.0]);
            Ok(c)
        }
    }

    fn job() -> DaemonJob<'static> {
        DaemonJob::Mount {
            vault: "v",
            dir: Path::new("/nonexistent"),
            readonly: false,
        }
    }

    #[test]
    fn a_daemon_that_exits_first_reports_its_status_and_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/d.log");
        let started = start(&Script("echo boom; exit 3"), &job(), &log, |_| None::<()>).unwrap();
        match started {
            Daemon::Exited(why) => assert!(why.contains("boom") && why.contains('3'), "{why}"),
            _ => panic!("the script exits at once"),
        }
    }

    #[test]
    fn a_daemon_is_ready_when_the_check_answers() {
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("ready");
        let script = Box::leak(format!("touch {}; sleep 5", flag.display()).into_boxed_str());
        let started = start(&Script(script), &job(), &dir.path().join("d.log"), |pid| {
            flag.exists().then_some(pid)
        })
        .unwrap();
        match started {
            Daemon::Ready(pid) => {
                // SAFETY: kill(2) on the pid of our own child, which has not been reaped.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            _ => panic!("the script marks itself ready"),
        }
    }
}
