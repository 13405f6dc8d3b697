//! Examples for every command's `--help`, attached to the clap definitions at start-up, and
//! the generated extras: shell completions and man pages.

use std::path::PathBuf;

use clap::{Args, CommandFactory, ValueEnum};

use agentvfs::schema::{CompletionsOutput, ManOutput};
use agentvfs::{Error, Result};

use super::{Cli, Ctx};
use crate::output::Reply;

/// (command path, examples): shown under "Examples:" in `avfs <command> --help`.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "vault",
        "avfs vault create demo\navfs vault fork demo task-1 --use\navfs vault list",
    ),
    (
        "checkpoint",
        "avfs checkpoint save before-agent\navfs checkpoint restore before-agent",
    ),
    (
        "meta",
        "avfs meta set src/main.rs owner alice\navfs meta get src/main.rs",
    ),
    ("op", "avfs op log\navfs op restore 42"),
    (
        "quota",
        "avfs quota set --max-files 100000\navfs quota show",
    ),
    (
        "policy",
        "avfs policy show\navfs policy test my-policy.toml",
    ),
    (
        "proxy",
        "avfs proxy check -- rm -rf /\navfs proxy exec -- cargo test",
    ),
    (
        "session",
        "avfs session start task-1\navfs proxy exec --session task-1 -- make\navfs session stop task-1",
    ),
    (
        "vault create",
        "avfs vault create demo\navfs vault create scratch --path ./scratch.avfs\nAVFS_POSTGRES_URL=postgres://avfs@db:5432/agents avfs vault create team --engine postgres",
    ),
    (
        "vault attach",
        "AVFS_POSTGRES_URL=postgres://avfs@db:5432/agents avfs vault attach team\navfs vault attach team --url postgres://avfs@db:5432/agents",
    ),
    ("vault list", "avfs vault list\navfs --json vault list"),
    ("vault use", "avfs vault use demo"),
    ("vault info", "avfs vault info\navfs vault info task-1"),
    ("vault delete", "avfs vault delete scratch --yes"),
    (
        "vault fork",
        "avfs vault fork demo task-1 --use\navfs vault fork demo replay --at before-agent",
    ),
    ("vault check", "avfs vault check\navfs --json vault check"),
    (
        "vault migrate",
        "avfs vault migrate demo --to lmdb\navfs vault migrate demo --to sqlite\navfs vault migrate demo --to postgres --url postgres://avfs@db:5432/agents",
    ),
    (
        "checkpoint save",
        "avfs checkpoint save\navfs checkpoint save before-agent -m 'clean tree'",
    ),
    ("checkpoint list", "avfs checkpoint list"),
    ("checkpoint info", "avfs checkpoint info before-agent"),
    ("checkpoint restore", "avfs checkpoint restore before-agent"),
    ("checkpoint delete", "avfs checkpoint delete cp-3"),
    (
        "checkpoint retention",
        "avfs checkpoint retention\navfs checkpoint retention --keep-auto 50",
    ),
    ("ls", "avfs ls\navfs ls -la src"),
    (
        "cat",
        "avfs cat src/main.rs\navfs cat src/main.rs --at before-agent",
    ),
    (
        "write",
        "avfs write notes.txt 'hello'\necho data | avfs write -p logs/today.txt\navfs write run.sh --mode 755 '#!/bin/sh'",
    ),
    ("mkdir", "avfs mkdir -p src/bin"),
    ("rm", "avfs rm notes.txt\navfs rm -r target"),
    ("cp", "avfs cp a.txt b.txt\navfs cp -r src src.bak"),
    ("mv", "avfs mv old.txt new.txt"),
    ("ln", "avfs ln -s target.txt link.txt"),
    ("chmod", "avfs chmod 755 run.sh"),
    ("tree", "avfs tree\navfs tree src -L 2"),
    ("stat", "avfs stat src/main.rs"),
    (
        "find",
        "avfs find '*.rs'\navfs find '*' src --type d\navfs find '*' --size +1M",
    ),
    ("grep", "avfs grep 'fn main' src\navfs grep -i todo"),
    ("log", "avfs log src/main.rs"),
    ("tag", "avfs tag src/main.rs reviewed important"),
    ("untag", "avfs untag src/main.rs important"),
    (
        "meta get",
        "avfs meta get src/main.rs\navfs meta get src/main.rs owner",
    ),
    ("meta set", "avfs meta set src/main.rs owner alice"),
    ("meta unset", "avfs meta unset src/main.rs owner"),
    (
        "diff",
        "avfs diff\navfs diff before-agent @ --stat\navfs diff @base task-1 --patch",
    ),
    (
        "merge",
        "avfs merge task-1\navfs merge task-1 --dry-run\navfs merge task-1 --strategy theirs",
    ),
    ("op log", "avfs op log --limit 10"),
    ("op restore", "avfs op restore 42"),
    ("undo", "avfs undo"),
    ("redo", "avfs redo"),
    (
        "prune",
        "avfs prune --keep-last 20\navfs prune --older-than 7d",
    ),
    (
        "apply",
        "avfs --workspace task-1 apply ./my-project --dry-run\navfs --workspace task-1 apply ./my-project",
    ),
    (
        "mount",
        "avfs mount demo ./work\navfs mount demo@before-agent ./past --readonly",
    ),
    (
        "handback",
        "avfs --workspace task-1 handback --git ./my-project --branch agent/task-1 -m 'fix parser'",
    ),
    (
        "approvals",
        "avfs approvals grant 'pip install *' --for 1h\navfs approvals list\navfs approvals revoke 3",
    ),
    (
        "approvals grant",
        "avfs --workspace task-1 approvals grant 'npm install *' --for 30m",
    ),
    (
        "approvals list",
        "avfs approvals list\navfs --json approvals list",
    ),
    ("approvals revoke", "avfs approvals revoke 3"),
    ("unmount", "avfs unmount ./work"),
    ("mounts", "avfs mounts"),
    (
        "import",
        "avfs import ./my-project\navfs import ./my-project /src --gitignore\navfs import --git ./my-project@main",
    ),
    (
        "export",
        "avfs export / ./out\navfs export / ./out --at before-agent --force",
    ),
    ("quota show", "avfs quota show"),
    (
        "quota set",
        "avfs quota set --max-size-mb 500 --max-files 100000",
    ),
    ("audit", "avfs audit --limit 20\navfs audit --since 10m"),
    ("stats", "avfs stats"),
    ("gc", "avfs gc --dry-run\navfs gc"),
    ("compact", "avfs compact"),
    ("schema", "avfs schema > avfs.schema.json"),
    ("policy show", "avfs policy show > my-policy.toml"),
    (
        "policy test",
        "avfs policy test\navfs policy test my-policy.toml",
    ),
    (
        "proxy exec",
        "avfs proxy exec -- cargo test\navfs --json proxy exec --shell 'ls && rm -rf target'\navfs proxy exec --fork-from demo --fork t1 --timeout 60s -- make\navfs proxy exec --session t1 --confine -- python3 gen.py",
    ),
    (
        "proxy check",
        "avfs proxy check -- rm -rf /\navfs proxy check --shell 'curl -s x | sh'",
    ),
    ("rollback", "avfs rollback\navfs rollback 17"),
    (
        "session start",
        "avfs session start task-1\navfs session start task-1 --name t1 --policy strict.toml",
    ),
    ("session stop", "avfs session stop task-1"),
    ("session list", "avfs session list"),
    (
        "completions",
        "avfs completions bash > /etc/bash_completion.d/avfs\navfs completions zsh > \"${fpath[1]}/_avfs\"\navfs completions fish > ~/.config/fish/completions/avfs.fish",
    ),
    (
        "man",
        "avfs man | man -l -\navfs man --dir /usr/local/share/man/man1",
    ),
    ("shell", "avfs shell\navfs --workspace task-1 shell"),
    ("mcp", "avfs mcp --workspace demo"),
];

/// The clap definition with every command's examples attached.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    for (path, text) in EXAMPLES {
        cmd = attach(cmd, &path.split(' ').collect::<Vec<_>>(), text);
    }
    cmd
}

fn attach(cmd: clap::Command, path: &[&str], text: &str) -> clap::Command {
    match path {
        [] => {
            let examples: String = text.lines().map(|l| format!("  {l}\n")).collect();
            cmd.after_help(format!("Examples:\n{examples}"))
        }
        [first, rest @ ..] => {
            if cmd.find_subcommand(first).is_none() {
                return cmd;
            }
            cmd.mut_subcommand(*first, |sub| attach(sub, rest, text))
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ShellKind {
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: ShellKind,
}

pub fn cmd_completions(a: CompletionsArgs) -> Result<Reply> {
    use clap_complete::Shell;
    let (shell, name) = match a.shell {
        ShellKind::Bash => (Shell::Bash, "bash"),
        ShellKind::Zsh => (Shell::Zsh, "zsh"),
        ShellKind::Fish => (Shell::Fish, "fish"),
        ShellKind::Elvish => (Shell::Elvish, "elvish"),
        ShellKind::Powershell => (Shell::PowerShell, "powershell"),
    };
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut command(), "avfs", &mut buf);
    let script = String::from_utf8_lossy(&buf).into_owned();
    let out = CompletionsOutput {
        shell: name.into(),
        script: script.clone(),
    };
    Ok(Reply::bytes(&out, buf))
}

#[derive(Args)]
pub struct ManArgs {
    /// Write one page per command (avfs.1, avfs-vault.1, avfs-vault-create.1, …) into this
    /// directory instead of printing avfs.1.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

pub fn cmd_man(_ctx: &Ctx, a: ManArgs) -> Result<Reply> {
    let cmd = command();
    match a.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
            clap_mangen::generate_to(cmd, &dir).map_err(|e| Error::io("writing", &dir, e))?;
            let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map_err(|e| Error::io("listing", &dir, e))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("avfs") && n.ends_with(".1"))
                })
                .collect();
            pages.sort();
            let human = format!("wrote {} man pages to {}", pages.len(), dir.display());
            Ok(Reply::new(&ManOutput { pages, text: None }, human))
        }
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut buf)
                .map_err(|e| Error::io("rendering", "avfs.1", e))?;
            let out = ManOutput {
                pages: Vec::new(),
                text: Some(String::from_utf8_lossy(&buf).into_owned()),
            };
            Ok(Reply::bytes(&out, buf))
        }
    }
}

/// Commands without examples (tested: every command must have some).
#[cfg(test)]
fn missing_examples() -> Vec<String> {
    fn walk(cmd: &clap::Command, prefix: &str, out: &mut Vec<String>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let path = if prefix.is_empty() {
                sub.get_name().to_string()
            } else {
                format!("{prefix} {}", sub.get_name())
            };
            if !EXAMPLES.iter().any(|(p, _)| *p == path) {
                out.push(path.clone());
            }
            walk(sub, &path, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), "", &mut out);
    out.retain(|p| p != "help" && !p.ends_with(" help"));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_command_has_examples() {
        assert_eq!(super::missing_examples(), Vec::<String>::new());
    }
}
