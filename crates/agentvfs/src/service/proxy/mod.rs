//! `ProxyRuntime`: one top-level command per call, at the command boundary. Validate →
//! classify (policy) → decide → checkpoint → mount the workspace → run in its own process
//! group with a timeout → summarize what changed (a storage diff, so complete and
//! O(changes)) → audit → return the envelope. The envelope is returned for denied, asked,
//! failed and timed-out runs alike.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::approvals;
use super::confine::Confinement;
use super::history::{DiffSummary, summarize};
use super::mount::MountFs;
use super::mounter::Mounter;
use super::policy::{Action, CommandRequest, Decision, PolicyEngine};
mod sandboxed;

use super::runner::{self, Captured, RunSpec};
use super::sandbox::{Lower, Mode, SandboxReport};
use crate::error::{Error, Result};
use crate::model::diff::{Change, StateRef};
use crate::model::ignore::IgnoredCounts;
use crate::model::path::VPath;
use crate::model::{Workspace, fork_key, now_ns};
use sandboxed::{Sandboxed, program_and_args, sandbox_config};

/// Version of the envelope's shape; bumped on incompatible changes (2: `readonly` and
/// `readwrite` are spelled as one word in `request.access` (was `request.mode`) and the
/// decision; `mode` and `sandbox` say how and where the command ran).
pub const ENVELOPE_VERSION: u32 = 2;
/// The op-log kind of a proxied command: `avfs rollback` undoes these.
pub const EXEC_OP: &str = "proxy.exec";
/// Changed paths listed in a command's audit record; `changes` in its detail counts all.
const MAX_AUDIT_PATHS: usize = 1000;

/// Exit codes of `avfs proxy exec` besides the child's own.
pub mod exit {
    pub const TIMED_OUT: i32 = 124;
    pub const APPROVAL_REQUIRED: i32 = 125;
    pub const DENIED: i32 = 126;
}

/// When `proxy exec` checkpoints before running: the one spelling of this option for the
/// CLI (`--checkpoint`), the MCP `exec` tool and the session protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointMode {
    /// Checkpoint when the policy says the command may change things.
    Auto,
    Always,
    Never,
}

impl CheckpointMode {
    /// The spellings `FromStr` takes, as the CLI lists them.
    pub const NAMES: [&'static str; 3] = ["auto", "always", "never"];
}

impl std::str::FromStr for CheckpointMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(CheckpointMode::Auto),
            "always" => Ok(CheckpointMode::Always),
            "never" => Ok(CheckpointMode::Never),
            _ => Err(Error::invalid(format!(
                "checkpoint is one of auto, always or never, not `{s}`"
            ))),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecOptions {
    pub cwd: String,
    pub timeout: Duration,
    pub readonly: bool,
    pub checkpoint: CheckpointMode,
    /// Keep at most this many bytes of stdout and of stderr.
    pub output_cap: usize,
    /// An approval token from an earlier `ask` envelope for exactly this command.
    pub approve: Option<String>,
    /// Environment variables passed even if they match a secret pattern.
    pub allow_env: Vec<String>,
    /// The environment the child starts from (before secrets are withheld); default: this
    /// process's. A session daemon gets its client's.
    pub env: Option<Vec<(String, String)>>,
    /// Confinement asked for on top of what the policy asks for.
    pub confine: Confinement,
    /// How the command's file system is made (see `sandbox::Mode`).
    #[serde(default = "auto_mode")]
    pub mode: Mode,
    /// Where the workspace appears inside the sandbox, instead of the policy's
    /// `[sandbox] workspace_path`.
    #[serde(default)]
    pub workspace_path: Option<String>,
    /// The overlay's lower layer, instead of the policy's `[sandbox] lower`.
    #[serde(default)]
    pub lower: Option<Lower>,
    /// List the changes the workspace's ignore rules leave out too, instead of counting
    /// them in `ignored`.
    #[serde(default)]
    pub include_ignored: bool,
    /// stdout and stderr as one stream, in the order the command wrote them: the
    /// envelope's `stdout` holds both and `stderr` is empty.
    #[serde(default)]
    pub interleave: bool,
}

fn auto_mode() -> Mode {
    Mode::Auto
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            cwd: "/".into(),
            timeout: Duration::from_secs(300),
            readonly: false,
            checkpoint: CheckpointMode::Auto,
            output_cap: 1024 * 1024,
            approve: None,
            allow_env: Vec::new(),
            env: None,
            confine: Confinement::default(),
            mode: Mode::Auto,
            workspace_path: None,
            lower: None,
            include_ignored: false,
            interleave: false,
        }
    }
}

/// What was asked.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecRequest {
    pub argv: Option<Vec<String>>,
    pub shell: Option<String>,
    pub cwd: String,
    /// The name or vault file path the workspace was selected by.
    pub selected: String,
    /// The workspace the command ran in.
    pub workspace: String,
    /// `readwrite` or `readonly`.
    pub access: String,
    /// The long-lived session the command ran in, if any (`avfs session start`).
    #[serde(default)]
    pub session: Option<String>,
}

/// The result of one proxied command.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Envelope {
    pub schema_version: u32,
    pub request: ExecRequest,
    pub decision: Decision,
    /// For `ask`: re-run with `--approve TOKEN` (bound to this command, cwd and fork; single use).
    pub approval_token: Option<String>,
    /// What became of the command: `denied`, `approval_required`, `completed`,
    /// `timed_out`, or `spawn_failed` (it could not be started: see `spawn_error`).
    pub outcome: ExecOutcome,
    /// False if the command was not run (denied, awaiting approval, or not startable).
    pub ran: bool,
    /// Why the command could not be started, when `outcome` is `spawn_failed`.
    pub spawn_error: Option<String>,
    /// The checkpoint taken before the run.
    pub checkpoint: Option<String>,
    /// The confinement the command ran under (policy `[confinement]` plus flags).
    #[serde(default)]
    pub confinement: Confinement,
    /// How the command's file system was made: `overlay`, `fuse` or `copy`.
    pub mode: Mode,
    /// The namespace the command ran in, or `none` and why.
    pub sandbox: SandboxReport,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub stdout: Captured,
    pub stderr: Captured,
    /// True when `stdout` holds stdout and stderr interleaved in the order they were
    /// written (asked with `interleave`), and `stderr` is empty.
    #[serde(default)]
    pub interleaved: bool,
    /// Every path the command added, modified, deleted, renamed or re-moded, except
    /// those the workspace's ignore rules leave out (`.gitignore`, `.avfsignore`,
    /// `.git/info/exclude`, `.git/`): they are counted in `ignored`. Rollback covers both.
    pub changes: Vec<Change>,
    /// Ignored changes per top-level name (`.venv`, `node_modules`); empty when the
    /// request asked to include them.
    #[serde(default)]
    pub ignored: IgnoredCounts,
    pub summary: DiffSummary,
    /// The op-log entry of this run: `avfs rollback EXEC_ID` restores the state before it.
    pub exec_id: Option<i64>,
    pub audit_id: i64,
}

/// What became of a proxied command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecOutcome {
    Denied,
    ApprovalRequired,
    Completed,
    TimedOut,
    SpawnFailed,
}

impl Envelope {
    /// The exit code `avfs proxy exec` should end with.
    pub fn exit_code(&self) -> i32 {
        if self.outcome == ExecOutcome::SpawnFailed {
            return crate::error::exit::SPAWN_FAILED;
        }
        if !self.ran {
            return match self.decision.action {
                Action::Ask => exit::APPROVAL_REQUIRED,
                _ => exit::DENIED,
            };
        }
        if self.timed_out {
            return exit::TIMED_OUT;
        }
        match (self.exit_code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            _ => 1,
        }
    }
}

fn command_text(req: &CommandRequest) -> String {
    match (&req.shell, &req.argv) {
        (Some(s), _) => s.clone(),
        (None, Some(a)) => a.join(" "),
        _ => String::new(),
    }
}

fn is_spawn_failure(e: &Error) -> bool {
    matches!(e, Error::SpawnFailed { .. })
}

fn random_token() -> String {
    let mut seed = [0u8; 32];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut seed);
    }
    blake3::hash(&[&seed[..], &now_ns().to_le_bytes()].concat()).to_hex()[..32].to_string()
}

/// A mount that outlives one command (a session): commands run in it and each one's
/// changes are recorded as their own op-log entry.
pub struct LiveMount<'m> {
    pub dir: &'m Path,
    pub session: &'m MountFs,
    /// The session's name, for the envelope.
    pub name: &'m str,
}

/// A session whose commands run in a sandbox (overlay or copy): its name, the mode a
/// command gets unless it asks for another, and the namespace it keeps for overlay runs.
pub struct SandboxSession<'m> {
    pub name: &'m str,
    pub mode: Mode,
    pub kept: &'m std::sync::Mutex<crate::service::sandbox::kept::Kept>,
}

pub struct ProxyRuntime<'a> {
    pub ws: &'a Workspace,
    pub policy: &'a PolicyEngine,
    /// How the vault was named (for the envelope).
    pub vault_name: String,
    /// Serves the fork at a directory for the run.
    pub mounter: &'a dyn Mounter,
    /// Where runs keep their private directories (`$AVFS_HOME/run`); `None`: no sandbox.
    pub runtime_dir: Option<PathBuf>,
    /// Host paths a sandboxed command must not see even inside a bound directory (the avfs
    /// home, the vault file).
    pub hide: Vec<PathBuf>,
    /// Where materialized trees of the fork are cached (`$AVFS_HOME/trees`), for overlays
    /// whose lower layer is a tree.
    pub tree_cache: Option<PathBuf>,
    /// The sandboxed session the command runs in, if any.
    pub session: Option<SandboxSession<'a>>,
    /// Sees the command's output as it comes (`proxy exec --stream`).
    pub observer: Option<runner::Observer>,
}

impl ProxyRuntime<'_> {
    /// Classify without running.
    pub fn check(&self, req: &CommandRequest) -> Decision {
        self.policy.decide(req)
    }

    /// Hold the fork's run lock for this command: exclusive for a command that changes
    /// the live fork (fuse mode: its change list is the fork's difference across its run,
    /// so it runs alone), shared for the others (each on its own layer). A command that
    /// cannot have it now is refused with `workspace_busy`, before anything changes.
    fn running(&self, exclusive: bool) -> Result<Option<std::fs::File>> {
        use rustix::fs::FlockOperation;
        // Beside the runtime directory (`$AVFS_HOME/locks`), which runs leave empty.
        let Some(dir) = self.runtime_dir.as_ref().map(|d| d.with_file_name("locks")) else {
            return Ok(None);
        };
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| Error::io("creating", &dir, e))?;
        }
        let mut h = blake3::Hasher::new();
        h.update(self.ws.vault().path().as_os_str().as_encoded_bytes());
        h.update(b"\0");
        h.update(self.ws.name().as_bytes());
        let path = dir.join(format!("fork-{}.lock", &h.finalize().to_hex()[..16]));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("opening", &path, e))?;
        let op = if exclusive {
            FlockOperation::NonBlockingLockExclusive
        } else {
            FlockOperation::NonBlockingLockShared
        };
        match rustix::fs::flock(&file, op) {
            Ok(()) => Ok(Some(file)),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(Error::WorkspaceBusy {
                workspace: self.ws.name().to_string(),
                reason: if exclusive {
                    "another command is running in this fork, and a fuse-mode command runs alone (its change list is the fork's difference across its run); run it again when that one ends, or use --mode overlay".into()
                } else {
                    "a fuse-mode command is running in this fork and runs alone (its change list is the fork's difference across its run); run this one again when it ends".into()
                },
            }),
            Err(e) => Err(Error::io("locking", &path, e.into())),
        }
    }

    fn approval_key(&self, token: &str) -> String {
        fork_key(self.ws.name(), &format!("approval.token.{token}"))
    }

    fn binding(&self, req: &CommandRequest) -> String {
        format!(
            "{}\u{0}{}\u{0}{}",
            self.ws.name(),
            req.cwd,
            command_text(req)
        )
    }

    /// Run one command in a mount made for it.
    pub fn exec(&self, req: CommandRequest, opts: &ExecOptions) -> Result<Envelope> {
        self.exec_in(req, opts, None)
    }

    /// Run one command, in `live` when given (a session), else in a mount made for it.
    pub fn exec_in(
        &self,
        req: CommandRequest,
        opts: &ExecOptions,
        live: Option<&LiveMount<'_>>,
    ) -> Result<Envelope> {
        if req.argv.as_ref().is_none_or(Vec::is_empty)
            && req.shell.as_deref().is_none_or(str::is_empty)
        {
            return Err(Error::invalid(
                "nothing to run: pass `-- COMMAND ARGS…` or `--shell 'TEXT'`",
            ));
        }
        crate::model::limits::check_timeout(
            "timeout",
            &humantime::format_duration(opts.timeout).to_string(),
            opts.timeout,
        )?;
        if opts.output_cap > crate::model::limits::MAX_OUTPUT_CAP {
            return Err(crate::model::limits::out_of_range(
                "max_output",
                &opts.output_cap.to_string(),
                format!("0 to {} bytes", crate::model::limits::MAX_OUTPUT_CAP),
            ));
        }
        let cwd = VPath::parse(&opts.cwd)?;
        let cwd_node = self.ws.read(|v| v.get(&cwd))?;
        if !cwd_node.is_dir() {
            return Err(Error::NotADirectory {
                path: cwd.display(),
            });
        }
        let mut decision = self.policy.decide(&req);
        let readonly = opts.readonly || decision.action == Action::ReadOnly;
        let request = ExecRequest {
            argv: req.argv.clone(),
            shell: req.shell.clone(),
            cwd: cwd.display(),
            selected: self.vault_name.clone(),
            workspace: self.ws.name().to_string(),
            access: if readonly { "readonly" } else { "readwrite" }.into(),
            session: live
                .map(|l| l.name)
                .or(self.session.as_ref().map(|s| s.name))
                .map(str::to_string),
        };
        sandbox_config(self.policy, opts)?;
        let (mode, none_reason) = match live {
            Some(_) => {
                let reason = "a session's commands run in its mount on the host (sessions do not sandbox yet)";
                if matches!(opts.mode, Mode::Overlay | Mode::Copy) {
                    return Err(Error::SandboxUnavailable {
                        reason: reason.into(),
                    });
                }
                (Mode::Fuse, Some(reason.to_string()))
            }
            None => match &self.session {
                Some(s) => {
                    let asked = match opts.mode {
                        Mode::Auto => s.mode,
                        m => m,
                    };
                    if asked == Mode::Fuse {
                        return Err(Error::invalid(format!(
                            "session {} runs its commands in {} mode; --mode fuse needs a session started with --mode fuse",
                            s.name,
                            s.mode.name()
                        )));
                    }
                    self.plan(asked, Lower::Fuse)?
                }
                None => self.plan(opts.mode, opts.lower.unwrap_or(self.policy.sandbox().lower))?,
            },
        };
        let policy_confinement = self.policy.confinement(&decision);
        let confinement = Confinement {
            landlock: policy_confinement.landlock || opts.confine.landlock,
            offline: policy_confinement.offline || opts.confine.offline,
        };
        let mut envelope = Envelope {
            schema_version: ENVELOPE_VERSION,
            request,
            decision: decision.clone(),
            approval_token: None,
            outcome: ExecOutcome::Denied,
            ran: false,
            spawn_error: None,
            checkpoint: None,
            confinement,
            mode,
            sandbox: none_reason
                .clone()
                .map(SandboxReport::none)
                .unwrap_or_default(),
            exit_code: None,
            signal: None,
            timed_out: false,
            duration_ms: 0,
            stdout: Captured::default(),
            stderr: Captured::default(),
            interleaved: opts.interleave,
            changes: Vec::new(),
            ignored: IgnoredCounts::new(),
            summary: DiffSummary::default(),
            exec_id: None,
            audit_id: 0,
        };
        let text = command_text(&req);
        match decision.action {
            Action::Deny => {
                envelope.audit_id = self.audit(&cwd, "denied", &envelope)?;
                return Ok(envelope);
            }
            Action::Ask => match (&opts.approve, approvals::covering(self.ws, &text)?) {
                (Some(token), _) => self.consume_approval(token, &req)?,
                (None, Some(g)) => {
                    decision.reason = format!(
                        "{} (standing approval {}: `{}` in {}, until {})",
                        decision.reason,
                        g.id,
                        g.pattern,
                        g.workspace,
                        crate::model::iso_time(g.expires_at)
                    );
                    envelope.decision = decision.clone();
                }
                (None, None) => {
                    let token = random_token();
                    let vault = self.ws.vault();
                    vault.set_setting(&self.approval_key(&token), Some(&self.binding(&req)))?;
                    envelope.approval_token = Some(token);
                    envelope.outcome = ExecOutcome::ApprovalRequired;
                    envelope.audit_id = self.audit(&cwd, "approval_required", &envelope)?;
                    return Ok(envelope);
                }
            },
            _ => {}
        }
        // An approval used by a command that never started stays valid.
        let rearm = |e: Error| -> Error {
            if let (Action::Ask, Some(token)) = (decision.action, &opts.approve) {
                let key = self.approval_key(token);
                let _ = self.ws.vault().set_setting(&key, Some(&self.binding(&req)));
            }
            e
        };
        // Refuse before anything changes, not after the checkpoint.
        confinement.check_available().map_err(rearm)?;
        let _running = self
            .running(!readonly && mode == Mode::Fuse)
            .map_err(rearm)?;
        let take_checkpoint = match opts.checkpoint {
            CheckpointMode::Always => true,
            CheckpointMode::Never => false,
            CheckpointMode::Auto => !readonly && decision.action != Action::Allow,
        };
        let before = if take_checkpoint {
            let (cp, _pruned) = self
                .ws
                .checkpoint_save_auto(&format!("before: {text}"))
                .map_err(rearm)?;
            envelope.checkpoint = Some(cp.name);
            cp.root
        } else {
            self.ws.snapshot_root().map_err(rearm)?
        };
        let mut own_change = None;
        let outcome = match live {
            Some(live) => {
                live.session.pause_writes(readonly);
                let result = self.run_in(live.dir, &req, &cwd, opts, confinement);
                live.session.pause_writes(false);
                if !readonly && !matches!(result, Err(ref e) if !is_spawn_failure(e)) {
                    envelope.exec_id = live.session.record(EXEC_OP, &text)?;
                }
                result
            }
            None if none_reason.is_some() => {
                let (result, exec_id) =
                    self.run_mounted(&req, &cwd, readonly, opts, &text, confinement);
                envelope.exec_id = exec_id;
                result
            }
            None => {
                let run = Sandboxed {
                    req: &req,
                    cwd: &cwd,
                    readonly,
                    opts,
                    text: &text,
                    confinement,
                    before,
                };
                let ran = self.run_sandboxed(mode, &run);
                envelope.exec_id = ran.exec_id;
                own_change = ran.own_change;
                if let Some(report) = ran.report {
                    envelope.sandbox = report;
                }
                ran.result
            }
        };
        match outcome {
            Ok(result) => {
                envelope.ran = true;
                envelope.outcome = if result.timed_out {
                    ExecOutcome::TimedOut
                } else {
                    ExecOutcome::Completed
                };
                envelope.exit_code = result.exit_code;
                envelope.signal = result.signal;
                envelope.timed_out = result.timed_out;
                envelope.duration_ms = result.duration.as_millis() as u64;
                envelope.stdout = result.stdout;
                envelope.stderr = result.stderr;
            }
            // The command never started: the envelope says why, and an approval it used
            // stays valid for a run that can start.
            Err(e) if is_spawn_failure(&e) => {
                envelope.outcome = ExecOutcome::SpawnFailed;
                envelope.spawn_error = Some(rearm(e).to_string());
            }
            Err(e) => return Err(e),
        }
        // An ingested run knows its own change exactly, even when other commands changed
        // the fork meanwhile; a mounted run is everything since it started.
        let (from, to) = match own_change {
            Some(op) => (StateRef::Root(op.before), StateRef::Root(op.after)),
            None => (
                StateRef::Root(before),
                StateRef::Live(self.ws.name().to_string()),
            ),
        };
        (envelope.changes, envelope.ignored) =
            self.ws
                .vault()
                .diff_listed(&from, &to, opts.include_ignored)?;
        envelope.summary = summarize(&envelope.changes);
        if decision.action == Action::Ask {
            decision.reason = format!("approved: {}", decision.reason);
            envelope.decision = decision;
        }
        let outcome = match envelope.outcome {
            ExecOutcome::TimedOut => "timed_out".to_string(),
            ExecOutcome::SpawnFailed => "spawn_failed".to_string(),
            _ => format!("exit {}", envelope.exit_code()),
        };
        envelope.audit_id = self.audit(&cwd, &outcome, &envelope)?;
        Ok(envelope)
    }

    fn consume_approval(&self, token: &str, req: &CommandRequest) -> Result<()> {
        let vault = self.ws.vault();
        let key = self.approval_key(token);
        match vault.setting(&key)? {
            Some(bound) if bound == self.binding(req) => vault.set_setting(&key, None),
            Some(_) => Err(Error::invalid(
                "approval token was issued for a different command, cwd or fork",
            )),
            None => Err(Error::invalid("approval token is unknown or already used")),
        }
    }

    /// The command's one audit record: the paths it changed (the listed ones, at most
    /// [`MAX_AUDIT_PATHS`]) and what became of it; its checkpoint, ingest and file
    /// operations are steps (`avfs audit --detail`).
    fn audit(&self, cwd: &VPath, outcome: &str, e: &Envelope) -> Result<i64> {
        let paths: Vec<String> = e
            .changes
            .iter()
            .take(MAX_AUDIT_PATHS)
            .map(|c| c.path.clone())
            .collect();
        let detail = serde_json::json!({
            "cwd": cwd.display(),
            "exec_id": e.exec_id,
            "command": e.request.shell.clone().or_else(|| e.request.argv.as_ref().map(|a| a.join(" "))),
            "action": e.decision.action,
            "categories": e.decision.categories,
            "rule": e.decision.rule,
            "reason": e.decision.reason,
            "checkpoint": e.checkpoint,
            "exit_code": e.exit_code,
            "timed_out": e.timed_out,
            "changes": e.changes.len(),
            "ignored": e.ignored.values().sum::<u64>(),
        });
        self.ws
            .record_audit(EXEC_OP, &paths, outcome, Some(detail.to_string()))
    }

    /// How the command's output is collected: streamed to the observer, interleaved.
    fn output(&self, opts: &ExecOptions) -> runner::Output {
        runner::Output {
            observer: self.observer.clone(),
            interleave: opts.interleave,
        }
    }

    fn child_env(&self, opts: &ExecOptions, cwd: &std::path::Path) -> Vec<(String, String)> {
        let base = match &opts.env {
            Some(env) => env.clone(),
            None => std::env::vars().collect(),
        };
        let mut env: Vec<(String, String)> = base
            .into_iter()
            .filter(|(k, v)| {
                opts.allow_env.iter().any(|a| a == k) || !self.policy.withholds_env(k, v)
            })
            .filter(|(k, _)| !k.starts_with("AVFS_"))
            .collect();
        env.retain(|(k, _)| k != "PWD");
        env.push(("PWD".into(), cwd.display().to_string()));
        env
    }

    /// Run the command with `dir` (the mounted workspace) as its root.
    fn run_in(
        &self,
        dir: &Path,
        req: &CommandRequest,
        cwd: &VPath,
        opts: &ExecOptions,
        confinement: Confinement,
    ) -> Result<runner::RunResult> {
        let work = if cwd.is_root() {
            dir.to_path_buf()
        } else {
            dir.join(cwd.as_str())
        };
        let (program, args) = program_and_args(req);
        let mut env = self.child_env(opts, &work);
        // Under Landlock the child writes only in the workspace and its own temp dir.
        let tmp = if confinement.landlock {
            let t = private_dir("avfs-tmp")?;
            env.retain(|(k, _)| k != "TMPDIR");
            env.push(("TMPDIR".into(), t.display().to_string()));
            Some(t)
        } else {
            None
        };
        let mut writable = vec![dir];
        writable.extend(tmp.as_deref());
        let prepared = if confinement.any() {
            Some(std::sync::Arc::new(confinement.prepare(&writable)?))
        } else {
            None
        };
        let result = runner::run(&RunSpec {
            program: &program,
            args: &args,
            cwd: &work,
            env,
            timeout: opts.timeout,
            cap: opts.output_cap,
            confine: prepared,
            pass_fds: Vec::new(),
            die_with_parent: false,
            output: self.output(opts),
        });
        if let Some(t) = tmp {
            let _ = std::fs::remove_dir_all(&t);
            if let Some(parent) = t.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
        result
    }

    fn run_mounted(
        &self,
        req: &CommandRequest,
        cwd: &VPath,
        readonly: bool,
        opts: &ExecOptions,
        text: &str,
        confinement: Confinement,
    ) -> (Result<runner::RunResult>, Option<i64>) {
        // The run's own op-log entry, recorded when the mount ends, even when the run fails.
        let mut exec_id = None;
        let result = (|| {
            let dir = private_dir("avfs-exec")?;
            let session = MountFs::new(self.ws.clone(), None, readonly)?
                .with_label(EXEC_OP, text)?
                .with_hidden(self.policy.secret_paths().clone());
            let finished_as = session.finished_as();
            let mounted = self.mounter.mount(Arc::new(session), &dir)?;
            let result = self.run_in(&dir, req, cwd, opts, confinement);
            // Unmounting ends the session, which commits and records the run in the op log.
            let unmounted = mounted.unmount();
            let _ = std::fs::remove_dir(&dir);
            // The per-process parent too, or every exec leaves an empty directory in /tmp.
            if let Some(parent) = dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
            exec_id = *finished_as.lock().unwrap_or_else(|p| p.into_inner());
            let result = result?;
            unmounted.map_err(|e| Error::MountFailed {
                dir,
                reason: format!("unmount after the run failed: {e}"),
            })?;
            Ok(result)
        })();
        (result, exec_id)
    }
}

/// A fresh directory of our own under the host's temp dir.
fn private_dir(prefix: &str) -> Result<PathBuf> {
    let base = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    let dir = base.join(format!("{}", now_ns()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::io("restricting", &dir, e))?;
    Ok(dir)
}
