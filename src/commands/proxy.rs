//! `avfs proxy exec` and `avfs rollback`: the agent-facing command boundary.

use std::path::PathBuf;

use clap::builder::TypedValueParser;
use clap::{Args, Subcommand};

use agentvfs::Result;
use agentvfs::model::{OpInfo, limits};
use agentvfs::service::approvals::{self, Grant};
use agentvfs::service::confine::Confinement;
use agentvfs::service::exec::{self, Place};
use agentvfs::service::policy::CommandRequest;
use agentvfs::service::proxy::{CheckpointMode, EXEC_OP, Envelope, ExecOptions};
use agentvfs::service::runner::{Event, Observer};
use agentvfs::service::sandbox::{Lower, Mode};
use std::io::Write;
use std::sync::{Arc, Mutex};

use super::Ctx;
use crate::output::{Reply, time};

#[derive(Args)]
pub struct ExecArgs {
    /// Working directory inside the workspace.
    #[arg(long, default_value = "/")]
    pub cwd: String,
    /// Kill the command (its whole process group and any escaped descendants) after this.
    #[arg(long, default_value = "300s")]
    pub timeout: String,
    /// Mount the workspace read-only for this command.
    #[arg(long)]
    pub readonly: bool,
    /// When to checkpoint before running: auto (when the policy says it may change
    /// things), always, never.
    #[arg(long, default_value = "auto", value_parser = checkpoint_mode())]
    pub checkpoint: CheckpointMode,
    /// A TOML policy file instead of the built-in policy (`avfs policy show`).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Run a command the policy answered `ask` for, with the token from that envelope.
    #[arg(long)]
    pub approve: Option<String>,
    /// Pass this environment variable (its exact name) even though the policy withholds it
    /// (repeatable).
    ///
    /// The built-in policy withholds a variable whose name, in any case, matches `*_TOKEN`,
    /// `*_SECRET*`, `AWS_*`, `*_KEY`, `*PASSWORD*`, `*PASSWD*`, `*_PWD` or `SSH_AUTH_SOCK`, or
    /// has one of the words token, secret, password, passwd, pass, key, apikey, auth, pat,
    /// credential (or their plurals): `my_token`, `GH_PAT`, `NPM_AUTH`, `githubToken`, but
    /// not `PATH`, `KEYBOARD` or `PYTHONPATH`. It also withholds a variable whose value is a
    /// URL with credentials (`DATABASE_URL=postgres://user:pass@host/db`). A policy file
    /// changes these with `[secrets] env`, `env_words`, `env_url_credentials` and
    /// `env_allow` (`avfs policy show`).
    #[arg(long = "allow-env", value_name = "NAME")]
    pub allow_env: Vec<String>,
    /// Keep at most this many bytes of stdout and of stderr each.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_output: usize,
    /// Make the --fork from this workspace on first use.
    #[arg(long, requires = "fork", value_name = "WORKSPACE")]
    pub fork_from: Option<String>,
    /// The fork to run in, made from --fork-from on first use and reused after.
    // `--task` is its old spelling, kept working but not shown.
    #[arg(long, alias = "task", value_name = "NAME")]
    pub fork: Option<String>,
    /// Run in this session's mount (`avfs session start`) instead of mounting for this call.
    #[arg(long, conflicts_with_all = ["fork", "fork_from"])]
    pub session: Option<String>,
    /// Landlock: let the command write only inside the workspace and a private TMPDIR.
    #[arg(long)]
    pub confine: bool,
    /// Run without network: a fresh network namespace with only loopback (needs root).
    #[arg(long)]
    pub offline: bool,
    /// How the command's file system is made. overlay: a kernel overlay on the fork's
    /// state, writes on native disk, ingested afterwards (near native speed). fuse: the
    /// fork served over FUSE. copy: the fork copied out and the differences ingested
    /// (needs no FUSE). auto: overlay where the sandbox can be made (as root), else copy,
    /// else fuse (without a namespace; the envelope's `sandbox` says why). Every mode but a fuse run without a
    /// namespace runs the command in its own mount and pid namespaces, where only the
    /// workspace, the system directories and the policy's `[sandbox]` paths exist.
    #[arg(long, default_value = "auto", value_parser = mode())]
    pub mode: Mode,
    /// Where the workspace appears inside the sandbox (default: the policy's
    /// `[sandbox] workspace_path`, built in `/workspace`). For example the project's own
    /// host path, so absolute paths in virtualenvs and build caches keep working.
    #[arg(long, value_name = "PATH")]
    pub workspace_path: Option<String>,
    /// Where an overlay's lower layer (the fork's state as the command starts) comes from,
    /// instead of the policy's `[sandbox] lower` (built in: tree). tree: written out as a
    /// native directory, cached by root under $AVFS_HOME/trees and updated from the
    /// fork's previous tree by what changed. fuse: a read-only FUSE view of the root.
    /// A session's commands always have the fuse one.
    #[arg(long, value_parser = lower())]
    pub lower: Option<Lower>,
    /// List every change in the envelope, also those the workspace's ignore rules leave
    /// out (.gitignore, .avfsignore, .git/info/exclude, .git/). By default they are only
    /// counted in `ignored`, per top-level name; rollback covers them either way.
    #[arg(long)]
    pub include_ignored: bool,
    /// Print the command's output as it comes, then the summary line. With --json: NDJSON,
    /// one event per line as it happens ({"event":"started"}, {"event":"stdout","text":…},
    /// {"event":"stderr","text":…}), and last the usual document with "event":"finished".
    #[arg(long)]
    pub stream: bool,
    /// stdout and stderr as one stream, in the order the command wrote them: the
    /// envelope's `stdout` holds both (`interleaved: true`) and `stderr` is empty.
    #[arg(long)]
    pub interleave: bool,
    /// Shell text to run with /bin/sh -c (parsed by the policy like a shell would).
    #[arg(long, conflicts_with = "argv")]
    pub shell: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub argv: Vec<String>,
}

/// `--stream`: the command's output as it comes, raw (text mode) or as NDJSON events.
struct Streamer {
    json: bool,
    /// Per stream, the bytes of a UTF-8 character split between two reads.
    carry: Arc<Mutex<[Vec<u8>; 2]>>,
}

impl Streamer {
    fn new(json: bool) -> Streamer {
        Streamer {
            json,
            carry: Arc::default(),
        }
    }

    fn observer(&self) -> Observer {
        let (json, carry) = (self.json, self.carry.clone());
        Arc::new(move |ev: Event<'_>| {
            let (name, i, bytes): (&str, usize, &[u8]) = match ev {
                Event::Started => {
                    if json {
                        emit(&serde_json::json!({ "event": "started" }));
                    }
                    return;
                }
                Event::Stdout(b) => ("stdout", 0, b),
                Event::Stderr(b) => ("stderr", 1, b),
            };
            if !json {
                let _ = if i == 0 {
                    let mut o = std::io::stdout().lock();
                    o.write_all(bytes).and_then(|_| o.flush())
                } else {
                    std::io::stderr().lock().write_all(bytes)
                };
                return;
            }
            let mut carry = carry.lock().unwrap_or_else(|p| p.into_inner());
            let buf = &mut carry[i];
            buf.extend_from_slice(bytes);
            // Up to the last whole character; an incomplete one waits for the next read.
            let whole = match std::str::from_utf8(buf) {
                Ok(_) => buf.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => buf.len(),
            };
            if whole > 0 {
                let text = String::from_utf8_lossy(&buf[..whole]).into_owned();
                buf.drain(..whole);
                emit(&serde_json::json!({ "event": name, "text": text }));
            }
        })
    }

    /// What is left of a split character, when the command has ended.
    fn flush(&self) {
        if !self.json {
            return;
        }
        let mut carry = self.carry.lock().unwrap_or_else(|p| p.into_inner());
        for (i, name) in ["stdout", "stderr"].into_iter().enumerate() {
            if !carry[i].is_empty() {
                let text = String::from_utf8_lossy(&carry[i]).into_owned();
                carry[i].clear();
                emit(&serde_json::json!({ "event": name, "text": text }));
            }
        }
    }
}

/// One NDJSON line on stdout, flushed at once.
fn emit(v: &serde_json::Value) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{v}").and_then(|_| o.flush());
}

fn render(e: &Envelope, streamed: bool) -> String {
    let mut s = String::new();
    if e.ran && !streamed {
        s.push_str(&e.stdout.text);
        if e.stdout.truncated {
            s.push_str(&format!(
                "\n[stdout truncated: {} bytes total]\n",
                e.stdout.bytes
            ));
        }
    }
    let status = if !e.ran {
        match &e.approval_token {
            Some(t) => format!(
                "needs approval ({}); re-run with --approve {t}",
                e.decision.reason
            ),
            None => format!("denied: {}", e.decision.reason),
        }
    } else if e.timed_out {
        format!("timed out after {} ms", e.duration_ms)
    } else {
        format!("exit {}", e.exit_code())
    };
    let cp = e
        .checkpoint
        .as_deref()
        .map(|c| format!(", checkpoint {c}"))
        .unwrap_or_default();
    let id = e.exec_id.map(|i| format!(", exec {i}")).unwrap_or_default();
    eprint!(
        "{}",
        if e.ran && !streamed {
            e.stderr.text.as_str()
        } else {
            ""
        }
    );
    let ignored: u64 = e.ignored.values().sum();
    let ignored = if ignored > 0 {
        format!(" (+{ignored} ignored)")
    } else {
        String::new()
    };
    eprintln!(
        "avfs: {status}; {} changed{ignored}{cp}{id}",
        e.changes.len()
    );
    s
}

pub fn cmd_exec(ctx: &Ctx, a: ExecArgs) -> Result<Reply> {
    let timeout = limits::parse_timeout("--timeout", &a.timeout)?;
    let req = CommandRequest {
        argv: if a.argv.is_empty() {
            None
        } else {
            Some(a.argv.clone())
        },
        shell: a.shell.clone(),
        cwd: a.cwd.clone(),
    };
    let opts = ExecOptions {
        cwd: a.cwd.clone(),
        timeout,
        readonly: a.readonly,
        checkpoint: a.checkpoint,
        output_cap: a.max_output,
        approve: a.approve.clone(),
        allow_env: a.allow_env.clone(),
        env: None,
        confine: Confinement {
            landlock: a.confine,
            offline: a.offline,
        },
        mode: a.mode,
        workspace_path: a.workspace_path.clone(),
        lower: a.lower,
        include_ignored: a.include_ignored,
        interleave: a.interleave,
    };
    let place = match (&a.session, &a.fork) {
        (Some(name), _) => Place::Session(name.clone()),
        (None, Some(fork)) => Place::Fork {
            fork: fork.clone(),
            fork_from: a.fork_from.clone(),
        },
        (None, None) => Place::Selected(ctx.workspace.clone()),
    };
    let streamer = a.stream.then(|| Streamer::new(ctx.json));
    if ctx.json && a.stream {
        crate::output::mark_finished_event();
    }
    let envelope = exec::exec(
        &ctx.service,
        super::mounter(),
        &place,
        a.policy.as_deref(),
        req,
        opts,
        streamer.as_ref().map(Streamer::observer),
    );
    if let Some(s) = &streamer {
        s.flush();
    }
    let envelope = envelope?;
    let human = if ctx.json {
        String::new()
    } else {
        render(&envelope, a.stream)
    };
    let mut reply = Reply::bytes(&envelope, human.into_bytes());
    reply.exit_code = Some(envelope.exit_code());
    Ok(reply)
}

#[derive(Subcommand)]
pub enum ApprovalsCmd {
    /// List the standing approvals in force, of every fork of the vault.
    List,
    /// Let commands matching PATTERN run in the selected fork without asking, for a while.
    ///
    /// PATTERN is a glob over the whole command text (`*` any run of characters), e.g.
    /// 'pip install *'. A grant only answers the policy's `ask` (it never lets a denied
    /// command run) and covers single commands: text with `;`, `&&`, `|`, `$(`, a
    /// backtick or a newline still asks. The grant, its revocation and every command it
    /// lets run are in the audit log.
    Grant {
        /// The command pattern, quoted so the shell leaves `*` alone: 'pip install *'.
        pattern: String,
        /// How long it holds: 30m, 1h, 2d (at most 366 days).
        #[arg(long = "for", value_name = "DURATION", default_value = "1h")]
        duration: String,
    },
    /// Revoke a standing approval by its id.
    Revoke {
        /// The grant's id, as `avfs approvals list` shows it.
        id: u64,
    },
}

pub fn run_approvals(ctx: &Ctx, cmd: ApprovalsCmd) -> (&'static str, Result<Reply>) {
    let render = |g: &Grant| {
        format!(
            "{}  {}  `{}`  until {}  by {}",
            g.id,
            g.workspace,
            g.pattern,
            time(g.expires_at),
            g.actor
        )
    };
    match cmd {
        ApprovalsCmd::List => (
            "approvals list",
            ctx.open()
                .and_then(|(_, ws)| approvals::list(&ws))
                .map(|list| {
                    let human = if list.is_empty() {
                        "no standing approvals".to_string()
                    } else {
                        list.iter().map(render).collect::<Vec<_>>().join("\n")
                    };
                    Reply::new(&list, human)
                }),
        ),
        ApprovalsCmd::Grant { pattern, duration } => (
            "approvals grant",
            limits::parse_duration("--for", &duration).and_then(|d| {
                let (_, ws) = ctx.open()?;
                let g = approvals::grant(&ws, &pattern, d)?;
                let human = format!("granted {}", render(&g));
                Ok(Reply::new(&g, human))
            }),
        ),
        ApprovalsCmd::Revoke { id } => (
            "approvals revoke",
            ctx.open()
                .and_then(|(_, ws)| approvals::revoke(&ws, id))
                .map(|g| {
                    let human = format!("revoked {}", render(&g));
                    Reply::new(&g, human)
                }),
        ),
    }
}

#[derive(Args)]
pub struct RollbackArgs {
    /// The exec id from an envelope (default: the last proxied command that changed
    /// something and is not already rolled back or undone; read-only commands are
    /// passed over).
    pub exec_id: Option<i64>,
}

pub fn cmd_rollback(ctx: &Ctx, a: RollbackArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let op: OpInfo = ws.rollback(EXEC_OP, a.exec_id)?;
    let human = format!("{} (undo with `avfs undo`)", op.description);
    Ok(Reply::new(&op, human))
}

/// `--mode`: the library's own `sandbox::Mode`, with its spellings listed in help.
pub(super) fn mode() -> impl clap::builder::TypedValueParser<Value = Mode> {
    clap::builder::PossibleValuesParser::new(Mode::NAMES)
        .map(|s| s.parse::<Mode>().expect("one of Mode::NAMES"))
}

/// `--lower`: the library's own `Lower`, with its spellings listed in help.
fn lower() -> impl clap::builder::TypedValueParser<Value = Lower> {
    clap::builder::PossibleValuesParser::new(Lower::NAMES)
        .map(|s| s.parse::<Lower>().expect("one of Lower::NAMES"))
}

/// `--checkpoint`: the library's own `CheckpointMode`, with its spellings listed in help.
fn checkpoint_mode() -> impl clap::builder::TypedValueParser<Value = CheckpointMode> {
    clap::builder::PossibleValuesParser::new(CheckpointMode::NAMES).map(|s| {
        s.parse::<CheckpointMode>()
            .expect("one of CheckpointMode::NAMES")
    })
}
