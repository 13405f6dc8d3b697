//! One module per command group; each has clap `Args` and `cmd_*` functions that call the
//! library and build a `Reply`.

mod admin;
mod checkpoint;
mod files;
mod help;
mod history;
mod mcp;
mod mount;
mod policy;
mod proxy;
mod session;
mod shell;
mod transfer;
mod vault;

use clap::{Parser, Subcommand};

use agentvfs::model::Workspace;
use agentvfs::service::daemon::{DaemonJob, Launcher};
use agentvfs::service::{Target, WorkspaceService};
use agentvfs::{Error, Result};

use crate::output::Reply;

const EXAMPLES: &str = "\
Examples:
  avfs vault create demo              create a vault and make it current
  avfs import ./my-project            copy a host directory into it
  avfs checkpoint save before-agent   checkpoint the live state
  avfs vault fork demo task-1 --use   fork it (O(1)) and switch to the fork
  avfs write notes.txt 'hello'        change the fork
  avfs checkpoint restore before-agent
  avfs --json ls -l src               one JSON document on stdout

Exit codes: 0 ok, 1 failure, 2 usage, 3 not found, 4 conflict/already exists,
5 invalid input, 6 quota exceeded, 7 corrupt or foreign vault, 8 host I/O error.";

/// agentvfs: single-file vaults for AI agent workspaces, with O(1) forks and
/// checkpoints that cost in proportion to what changed.
#[derive(Parser)]
#[command(name = "avfs", version, after_help = EXAMPLES)]
pub struct Cli {
    /// Print exactly one JSON document on stdout, for success and failure alike.
    #[arg(long, global = true)]
    pub json: bool,
    /// The workspace to act on: a registered name (a vault or a fork) or a vault file path.
    /// Defaults to $AVFS_WORKSPACE, then $AVFS_VAULT, then the current one (`avfs vault use`).
    // `--vault` and $AVFS_VAULT are the old spellings, kept working but not shown.
    #[arg(
        short = 'w',
        long,
        global = true,
        env = "AVFS_WORKSPACE",
        alias = "vault",
        value_name = "NAME|PATH"
    )]
    pub workspace: Option<String>,
    /// Make the command's changes conditional, a compare-and-swap on the workspace's
    /// history: apply them only while its newest operation is OP (0: none yet; `avfs op
    /// log --limit 1` shows it), else fail with `head_moved` (exit 4) and change nothing.
    /// For write, mkdir, rm, cp, mv, ln, chmod, import, checkpoint save|restore|delete, op
    /// restore, undo, redo and rollback; other commands refuse it.
    #[arg(long, global = true, value_name = "OP", value_parser = clap::value_parser!(i64).range(0..))]
    pub if_head: Option<i64>,
    #[command(subcommand)]
    pub command: Command,
}

/// The commands `--if-head` applies to, as `--help` and the refusal name them.
const IF_HEAD_COMMANDS: &str = "write, mkdir, rm, cp, mv, ln, chmod, import, checkpoint save|restore|delete, op restore, undo, redo and rollback";

impl Command {
    /// Whether `--if-head` applies: the command's changes to the workspace it opens are
    /// each an op-log entry, made through the workspace handle the flag conditions.
    fn takes_if_head(&self) -> bool {
        match self {
            Command::Write(_)
            | Command::Mkdir(_)
            | Command::Rm(_)
            | Command::Cp(_)
            | Command::Mv(_)
            | Command::Ln(_)
            | Command::Chmod(_)
            | Command::Import(_)
            | Command::Undo
            | Command::Redo
            | Command::Rollback(_) => true,
            Command::Checkpoint(c) => matches!(
                c,
                checkpoint::CheckpointCmd::Save(_)
                    | checkpoint::CheckpointCmd::Restore { .. }
                    | checkpoint::CheckpointCmd::Delete { .. }
            ),
            Command::Op(c) => matches!(c, history::OpCmd::Restore { .. }),
            _ => false,
        }
    }
}

/// `--if-head` given to a command it does not apply to: the command's name (from `name`,
/// asked only then) and the error to answer with, before anything runs.
pub fn if_head_misused(cli: &Cli, name: impl FnOnce() -> String) -> Option<(String, Error)> {
    if cli.if_head.is_none() || cli.command.takes_if_head() {
        return None;
    }
    // A streaming exec answers every refusal as its `finished` event, this one too.
    if cli.json && matches!(&cli.command, Command::Proxy(ProxyCmd::Exec(a)) if a.stream) {
        crate::output::mark_finished_event();
    }
    let name = name();
    let e = Error::invalid(format!(
        "--if-head applies to {IF_HEAD_COMMANDS}; not to `avfs {name}`"
    ));
    Some((name, e))
}

impl Cli {
    /// The workspace the command line selects: `--workspace` or $AVFS_WORKSPACE, else the
    /// older $AVFS_VAULT (so scripts written for it keep working), else none.
    pub fn selected_workspace(&self) -> Option<String> {
        self.workspace
            .clone()
            .or_else(|| std::env::var("AVFS_VAULT").ok().filter(|v| !v.is_empty()))
    }
}

#[derive(Subcommand)]
pub enum Command {
    /// Create, list, select, inspect, fork, check and delete vaults.
    #[command(subcommand)]
    Vault(vault::VaultCmd),
    /// Save, list, inspect, restore and delete checkpoints.
    #[command(subcommand)]
    Checkpoint(checkpoint::CheckpointCmd),
    /// List a directory.
    Ls(files::LsArgs),
    /// Print a file (binary-safe), optionally as of a checkpoint.
    Cat(files::CatArgs),
    /// Write a file from an argument or from stdin.
    Write(files::WriteArgs),
    /// Create directories.
    Mkdir(files::MkdirArgs),
    /// Remove files or directories.
    Rm(files::RmArgs),
    /// Copy a file or (with -r) a directory; content is shared, not duplicated.
    Cp(files::CpArgs),
    /// Move or rename like rename(2): replaces a file, or an empty directory with a
    /// directory; a file onto a directory is an error (is_a_directory).
    Mv(files::MvArgs),
    /// Create a hard link to a file, or with -s a symbolic link.
    Ln(files::LnArgs),
    /// Change permission bits (octal, e.g. 755).
    Chmod(files::ChmodArgs),
    /// Show a directory tree.
    Tree(files::TreeArgs),
    /// Show a node's metadata.
    Stat(files::StatArgs),
    /// Find entries by name glob, type and size.
    Find(files::FindArgs),
    /// Search file contents with a regular expression.
    Grep(files::GrepArgs),
    /// Show the versions of a path across checkpoints.
    Log(files::LogArgs),
    /// Add tags to a path.
    Tag(files::TagArgs),
    /// Remove tags from a path.
    Untag(files::TagArgs),
    /// Get or set key/value metadata on a path.
    #[command(subcommand)]
    Meta(files::MetaCmd),
    /// Show what changed between two states (default: last checkpoint → live).
    Diff(history::DiffArgs),
    /// Merge a fork's changes into its parent (or --into another fork), three-way.
    Merge(history::MergeArgs),
    /// Inspect the operation log or return to a past operation.
    #[command(subcommand)]
    Op(history::OpCmd),
    /// Undo the most recent change (itself a new operation, so it can be redone).
    Undo,
    /// Redo the most recent undo.
    Redo,
    /// Drop old checkpoints and operations, then reclaim space.
    Prune(history::PruneArgs),
    /// Write this fork's changes (since its base) into a host directory.
    Apply(history::ApplyArgs),
    /// Mount a vault or fork (or NAME@CHECKPOINT, read-only) as a real directory.
    ///
    /// Requests reach the daemon over FUSE over io_uring where the kernel has it (Linux
    /// 6.14+): a queue per CPU, so no request waits for a wake-up on another CPU. Run as
    /// root, avfs turns on the fuse module's `enable_uring` parameter for that. Set
    /// AVFS_FUSE_URING=0 to use /dev/fuse instead; `avfs mounts` shows which one a mount uses.
    ///
    /// A read-write mount holds the fork's write lease while it runs: other hosts sharing
    /// the vault get `workspace_busy` when they change the fork's files, until it ends or
    /// its lease lapses (AVFS_LEASE_SECS, default 30; the host is AVFS_HOST_ID or the host
    /// name).
    Mount(mount::MountArgs),
    /// Unmount a directory (also cleans up a mount left by a killed daemon).
    Unmount(mount::UnmountArgs),
    /// List mounts with their vault, daemon pid and state.
    Mounts,
    /// Copy a host directory into the workspace.
    Import(transfer::ImportArgs),
    /// Write the fork's files as one commit on a branch of a host git repository, through
    /// git's objects: the repository's worktree, index and HEAD are not touched.
    Handback(transfer::HandbackArgs),
    /// Copy a workspace path out to a host directory (all or nothing: staged, then moved into place)
    Export(transfer::ExportArgs),
    /// Show or set quotas.
    #[command(subcommand)]
    Quota(admin::QuotaCmd),
    /// Show the audit log, newest first.
    Audit(admin::AuditArgs),
    /// Show storage statistics.
    Stats,
    /// Delete objects nothing references.
    Gc(admin::GcArgs),
    /// Reclaim free space in the vault file.
    Compact,
    /// Print the JSON Schema of every command's `--json` output.
    Schema,
    /// Print the proxy's built-in policy, or test a policy file's examples.
    #[command(subcommand)]
    Policy(policy::PolicyCmd),
    /// Run a command through the policy-checked proxy, or only check its decision.
    #[command(subcommand)]
    Proxy(ProxyCmd),
    /// Restore the state before a proxied command (default: the last one).
    Rollback(proxy::RollbackArgs),
    /// Standing approvals: let commands matching a pattern run in a fork for a while
    /// without an approval token each (`pip install *` for the next hour).
    #[command(subcommand)]
    Approvals(proxy::ApprovalsCmd),
    /// Keep a sandbox (or a mount) for a fork, so consecutive `proxy exec --session NAME`
    /// calls skip setting one up.
    #[command(subcommand)]
    Session(session::SessionCmd),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(help::CompletionsArgs),
    /// Print the avfs(1) man page, or write a page per command with --dir.
    Man(help::ManArgs),
    /// An interactive prompt: history, completion, `cd`, and the vault/fork/cwd in the prompt.
    Shell(shell::ShellArgs),
    /// Serve the workspace tools over the Model Context Protocol on stdin/stdout.
    #[command(long_about = mcp::ABOUT)]
    Mcp(mcp::McpArgs),
}

#[derive(Subcommand)]
pub enum ProxyCmd {
    /// Run one command in the workspace: classify, checkpoint, mount, run with a timeout,
    /// report exactly what changed.
    Exec(proxy::ExecArgs),
    /// Print the policy decision for a command without running it.
    Check(policy::CheckArgs),
}

/// What every command gets.
pub struct Ctx {
    pub json: bool,
    /// The selected workspace, as named (`None`: the current one).
    pub workspace: Option<String>,
    pub service: WorkspaceService,
}

impl Ctx {
    /// Open the selected workspace.
    pub fn open(&self) -> Result<(Target, Workspace)> {
        self.service.open(self.workspace.as_deref())
    }

    /// A progress bar on stderr when it is a terminal and output is not JSON.
    pub fn progress(&self, what: &'static str) -> Option<indicatif::ProgressBar> {
        use std::io::IsTerminal;
        if self.json || !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message(what);
        Some(bar)
    }
}

/// The file-system adapter the services mount with: FUSE where the build has it.
pub fn mounter() -> &'static dyn agentvfs::service::mounter::Mounter {
    #[cfg(feature = "fuse")]
    {
        &agentvfs::fuse::FuseMounter
    }
    #[cfg(not(feature = "fuse"))]
    {
        &agentvfs::service::mounter::NoMounter
    }
}

/// Daemons are this executable run with the foreground form of the command that asked.
pub struct SelfLauncher;

impl Launcher for SelfLauncher {
    fn command(&self, job: &DaemonJob<'_>) -> Result<std::process::Command> {
        let exe = std::env::current_exe().map_err(|e| Error::io("locating avfs", "", e))?;
        let mut cmd = std::process::Command::new(exe);
        match *job {
            DaemonJob::Mount {
                vault,
                dir,
                readonly,
            } => {
                cmd.arg("mount").arg(vault).arg(dir).arg("--foreground");
                if readonly {
                    cmd.arg("--readonly");
                }
            }
            DaemonJob::Session {
                fork,
                name,
                policy,
                mode,
            } => {
                cmd.args(["session", "start", fork, "--name", name, "--foreground"]);
                cmd.args(["--mode", mode.name()]);
                if let Some(p) = policy {
                    cmd.arg("--policy").arg(p);
                }
            }
        }
        Ok(cmd)
    }
}

/// The clap definition, with examples on every command's `--help`.
pub fn command() -> clap::Command {
    help::command()
}

/// Run a command; returns its name (for the JSON envelope) and its outcome.
pub fn run(ctx: &Ctx, command: Command) -> (&'static str, Result<Reply, Error>) {
    match command {
        Command::Vault(c) => vault::run(ctx, c),
        Command::Checkpoint(c) => checkpoint::run(ctx, c),
        Command::Ls(a) => ("ls", files::cmd_ls(ctx, a)),
        Command::Cat(a) => ("cat", files::cmd_cat(ctx, a)),
        Command::Write(a) => ("write", files::cmd_write(ctx, a)),
        Command::Mkdir(a) => ("mkdir", files::cmd_mkdir(ctx, a)),
        Command::Rm(a) => ("rm", files::cmd_rm(ctx, a)),
        Command::Cp(a) => ("cp", files::cmd_cp(ctx, a)),
        Command::Mv(a) => ("mv", files::cmd_mv(ctx, a)),
        Command::Ln(a) => ("ln", files::cmd_ln(ctx, a)),
        Command::Chmod(a) => ("chmod", files::cmd_chmod(ctx, a)),
        Command::Tree(a) => ("tree", files::cmd_tree(ctx, a)),
        Command::Stat(a) => ("stat", files::cmd_stat(ctx, a)),
        Command::Find(a) => ("find", files::cmd_find(ctx, a)),
        Command::Grep(a) => ("grep", files::cmd_grep(ctx, a)),
        Command::Log(a) => ("log", files::cmd_log(ctx, a)),
        Command::Tag(a) => ("tag", files::cmd_tag(ctx, a, true)),
        Command::Untag(a) => ("untag", files::cmd_tag(ctx, a, false)),
        Command::Meta(c) => files::run_meta(ctx, c),
        Command::Diff(a) => ("diff", history::cmd_diff(ctx, a)),
        Command::Merge(a) => ("merge", history::cmd_merge(ctx, a)),
        Command::Op(c) => history::run_op(ctx, c),
        Command::Undo => ("undo", history::cmd_undo(ctx, false)),
        Command::Redo => ("redo", history::cmd_undo(ctx, true)),
        Command::Prune(a) => ("prune", history::cmd_prune(ctx, a)),
        Command::Apply(a) => ("apply", history::cmd_apply(ctx, a)),
        Command::Mount(a) => ("mount", mount::cmd_mount(ctx, a)),
        Command::Unmount(a) => ("unmount", mount::cmd_unmount(ctx, a)),
        Command::Mounts => ("mounts", mount::cmd_mounts(ctx)),
        Command::Import(a) => ("import", transfer::cmd_import(ctx, a)),
        Command::Handback(a) => ("handback", transfer::cmd_handback(ctx, a)),
        Command::Export(a) => ("export", transfer::cmd_export(ctx, a)),
        Command::Quota(c) => admin::run_quota(ctx, c),
        Command::Audit(a) => ("audit", admin::cmd_audit(ctx, a)),
        Command::Stats => ("stats", admin::cmd_stats(ctx)),
        Command::Gc(a) => ("gc", admin::cmd_gc(ctx, a)),
        Command::Compact => ("compact", admin::cmd_compact(ctx)),
        Command::Schema => ("schema", Ok(admin::cmd_schema())),
        Command::Policy(c) => policy::run(ctx, c),
        Command::Proxy(ProxyCmd::Exec(a)) => ("proxy exec", proxy::cmd_exec(ctx, a)),
        Command::Proxy(ProxyCmd::Check(a)) => ("proxy check", policy::cmd_check(ctx, a)),
        Command::Rollback(a) => ("rollback", proxy::cmd_rollback(ctx, a)),
        Command::Approvals(c) => proxy::run_approvals(ctx, c),
        Command::Session(c) => session::run(ctx, c),
        Command::Completions(a) => ("completions", help::cmd_completions(a)),
        Command::Man(a) => ("man", help::cmd_man(ctx, a)),
        Command::Shell(a) => ("shell", shell::cmd_shell(ctx, a)),
        Command::Mcp(a) => ("mcp", mcp::cmd_mcp(ctx, a)),
    }
}
