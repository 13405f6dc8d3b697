//! `avfs shell`: an interactive prompt over the same commands, with history, completion
//! (commands, subcommands and workspace paths) and a prompt showing the workspace and cwd.
//! `cd`, `pwd`, `use WORKSPACE` and `exit` are the shell's own; every other line is an
//! `avfs` command line, with relative paths taken from the shell's cwd.

use clap::{Args, FromArgMatches};
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};

use agentvfs::model::path::VPath;
use agentvfs::schema::ShellOutput;
use agentvfs::{Error, Result};

use super::{Cli, Command, Ctx};
use crate::output::{self, Reply};

#[derive(Args)]
pub struct ShellArgs {}

const BUILTINS: &[&str] = &["cd", "pwd", "use", "help", "exit", "quit"];

/// The clap command a command line's head names (`["meta", "set"]`), as far as it names one.
fn command_for<'c>(root: &'c clap::Command, head: &[&str]) -> &'c clap::Command {
    let mut cmd = root;
    for h in head {
        match cmd.find_subcommand(h) {
            Some(c) => cmd = c,
            None => break,
        }
    }
    cmd
}

/// Whether option word `opt` takes a value in command `cmd` (or globally), as clap declares
/// it, so the word after it is a value and not a path. Hidden aliases (`--vault`) count.
fn takes_value(root: &clap::Command, cmd: &clap::Command, opt: &str) -> bool {
    cmd.get_arguments().chain(root.get_arguments()).any(|a| {
        let long = opt.strip_prefix("--");
        !a.is_positional()
            && a.get_action().takes_values()
            && (a.get_long().is_some_and(|l| long == Some(l))
                || a.get_all_aliases()
                    .is_some_and(|all| all.iter().any(|l| long == Some(*l)))
                || a.get_short()
                    .is_some_and(|c| opt.strip_prefix('-') == Some(c.to_string().as_str())))
    })
}

/// Which positional arguments (by index) of a command are workspace paths.
fn path_positions(cmd: &[&str]) -> &'static [usize] {
    match cmd {
        ["ls"]
        | ["tree"]
        | ["stat"]
        | ["cat"]
        | ["mkdir"]
        | ["rm"]
        | ["write"]
        | ["log"]
        | ["tag"]
        | ["untag"] => &[0],
        ["meta", _] => &[0],
        ["cp"] | ["mv"] => &[0, 1],
        ["ln"] | ["chmod"] | ["find"] | ["grep"] | ["import"] => &[1],
        ["export"] => &[0],
        _ => &[],
    }
}

/// Commands that act on a directory and default to the shell's cwd.
fn defaults_to_cwd(cmd: &[&str]) -> bool {
    matches!(cmd, ["ls"] | ["tree"])
}

struct State {
    workspace: Option<String>,
    cwd: VPath,
}

impl State {
    fn resolve(&self, word: &str) -> String {
        if word.starts_with('/') {
            word.to_string()
        } else if self.cwd.is_root() {
            format!("/{word}")
        } else {
            format!("{}/{word}", self.cwd.display())
        }
    }

    /// The command line as `avfs` arguments: relative paths resolved against the cwd.
    fn rewrite(&self, words: Vec<String>) -> Vec<String> {
        let root = super::command();
        let is_group = |g: &str| root.find_subcommand(g).is_some_and(|c| c.has_subcommands());
        let head: Vec<&str> = match words.first().map(String::as_str) {
            Some(g) if is_group(g) => words.iter().take(2).map(String::as_str).collect(),
            Some(c) => vec![c],
            None => return words,
        };
        let positions = path_positions(&head);
        let cmd = command_for(&root, &head);
        let mut out: Vec<String> = words[..head.len()].to_vec();
        let mut index = 0;
        let mut skip_value = false;
        let mut any_positional = false;
        for w in &words[head.len()..] {
            if skip_value {
                skip_value = false;
                out.push(w.clone());
                continue;
            }
            if w.starts_with('-') && w.len() > 1 {
                skip_value = takes_value(&root, cmd, w);
                out.push(w.clone());
                continue;
            }
            any_positional = true;
            out.push(if positions.contains(&index) {
                self.resolve(w)
            } else {
                w.clone()
            });
            index += 1;
        }
        if !any_positional && defaults_to_cwd(&head) {
            out.push(self.cwd.display());
        }
        if head == ["proxy", "exec"] && !words.iter().any(|w| w == "--cwd") {
            out.insert(2, "--cwd".into());
            out.insert(3, self.cwd.display());
        }
        out
    }
}

struct Complete {
    service: agentvfs::service::WorkspaceService,
    workspace: std::rc::Rc<std::cell::RefCell<Option<String>>>,
    cwd: std::rc::Rc<std::cell::RefCell<VPath>>,
}

impl Complete {
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = super::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        names.extend(BUILTINS.iter().map(|b| b.to_string()));
        names
    }

    fn subcommands(&self, group: &str) -> Vec<String> {
        super::command()
            .find_subcommand(group)
            .map(|g| {
                g.get_subcommands()
                    .map(|c| c.get_name().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Entries of the workspace directory a partial path is in, as completions of it.
    fn paths(&self, partial: &str) -> Vec<String> {
        let (dir_part, _) = partial.rsplit_once('/').unwrap_or(("", partial));
        let cwd = self.cwd.borrow().clone();
        let dir = if partial.starts_with('/') {
            format!("/{dir_part}")
        } else {
            format!("{}/{dir_part}", cwd.display())
        };
        let Ok(dir_path) = VPath::parse(&dir) else {
            return Vec::new();
        };
        let Ok((_, ws)) = self.service.open(self.workspace.borrow().as_deref()) else {
            return Vec::new();
        };
        let Ok(children) = ws.read(|v| v.list(&dir_path)) else {
            return Vec::new();
        };
        let prefix = if dir_part.is_empty() && !partial.starts_with('/') {
            String::new()
        } else {
            format!("{dir_part}/")
        };
        children
            .into_iter()
            .map(|c| {
                let slash = if c.node.is_dir() { "/" } else { "" };
                format!("{prefix}{}{slash}", c.name)
            })
            .collect()
    }
}

impl Completer for Complete {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        let start = before.rfind(' ').map(|i| i + 1).unwrap_or(0);
        let partial = &before[start..];
        let words: Vec<&str> = before[..start].split_whitespace().collect();
        let pool = match words.as_slice() {
            [] => self.names(),
            [group] if !self.subcommands(group).is_empty() => self.subcommands(group),
            _ if partial.starts_with('-') => Vec::new(),
            _ => self.paths(partial),
        };
        let pairs = pool
            .into_iter()
            .filter(|c| c.starts_with(partial))
            .map(|c| Pair {
                display: c.clone(),
                replacement: c,
            })
            .collect();
        Ok((start, pairs))
    }
}

impl Hinter for Complete {
    type Hint = String;
}
impl Highlighter for Complete {}
impl Validator for Complete {}
impl Helper for Complete {}

pub fn cmd_shell(ctx: &Ctx, _a: ShellArgs) -> Result<Reply> {
    let home = ctx.service.registry().home().to_path_buf();
    let state = State {
        workspace: ctx.workspace.clone(),
        cwd: VPath::root(),
    };
    let workspace = std::rc::Rc::new(std::cell::RefCell::new(state.workspace.clone()));
    let cwd = std::rc::Rc::new(std::cell::RefCell::new(VPath::root()));
    let mut editor: Editor<Complete, _> =
        Editor::new().map_err(|e| Error::invalid(format!("cannot start the shell: {e}")))?;
    editor.set_helper(Some(Complete {
        service: ctx.service.clone(),
        workspace: workspace.clone(),
        cwd: cwd.clone(),
    }));
    let history = home.join("shell_history");
    let _ = editor.load_history(&history);
    let mut state = state;
    let (mut commands, mut failed) = (0u64, 0u64);
    loop {
        let prompt = prompt(ctx, &state);
        let line = match editor.readline(&prompt) {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => continue,
            Err(_) => break,
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let _ = editor.add_history_entry(line);
        let Some(words) = shlex::split(line) else {
            eprintln!("avfs: unbalanced quotes");
            continue;
        };
        commands += 1;
        match run_line(ctx, &mut state, words) {
            Flow::Exit => break,
            Flow::Failed => failed += 1,
            Flow::Ok => {}
        }
        *workspace.borrow_mut() = state.workspace.clone();
        *cwd.borrow_mut() = state.cwd.clone();
    }
    // History is a convenience: a home that cannot be made only loses it.
    let _ = ctx.service.registry().private_dir("");
    let _ = editor.save_history(&history);
    let out = ShellOutput { commands, failed };
    Ok(Reply::new(&out, ""))
}

enum Flow {
    Ok,
    Failed,
    Exit,
}

fn prompt(ctx: &Ctx, state: &State) -> String {
    let at = match ctx.service.open(state.workspace.as_deref()) {
        Ok((t, _)) if t.name == t.workspace || t.workspace == "main" => t.name,
        Ok((t, _)) => format!("{}:{}", t.name, t.workspace),
        Err(_) => "(no workspace)".into(),
    };
    format!("avfs {at} {}> ", state.cwd.display())
}

fn run_line(ctx: &Ctx, state: &mut State, words: Vec<String>) -> Flow {
    let fail = |e: Error| {
        eprintln!("avfs: {e}");
        Flow::Failed
    };
    match words[0].as_str() {
        "exit" | "quit" => return Flow::Exit,
        "pwd" => {
            println!("{}", state.cwd.display());
            return Flow::Ok;
        }
        "help" => {
            let _ = super::command().print_help();
            println!("\nShell: cd DIR, pwd, use WORKSPACE, exit. Other lines are avfs commands.");
            return Flow::Ok;
        }
        "cd" => {
            let target = words.get(1).map(|w| state.resolve(w)).unwrap_or("/".into());
            let moved = VPath::parse(&target).and_then(|p| {
                let (_, ws) = ctx.service.open(state.workspace.as_deref())?;
                let node = ws.read(|v| v.get(&p))?;
                if node.is_dir() {
                    Ok(p)
                } else {
                    Err(Error::NotADirectory { path: p.display() })
                }
            });
            return match moved {
                Ok(p) => {
                    state.cwd = p;
                    Flow::Ok
                }
                Err(e) => fail(e),
            };
        }
        "use" => {
            let Some(name) = words.get(1) else {
                return fail(Error::invalid(
                    "use WORKSPACE: which workspace (a vault or a fork)?",
                ));
            };
            return match ctx.service.open(Some(name)) {
                Ok(_) => {
                    state.workspace = Some(name.clone());
                    state.cwd = VPath::root();
                    Flow::Ok
                }
                Err(e) => fail(e),
            };
        }
        "shell" | "mcp" => {
            return fail(Error::invalid(format!(
                "`{}` cannot run inside the shell",
                words[0]
            )));
        }
        _ => {}
    }
    let mut argv = vec!["avfs".to_string()];
    argv.extend(state.rewrite(words));
    let matches = match super::command().try_get_matches_from(&argv) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return Flow::Failed;
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return Flow::Failed;
        }
    };
    // The shell's `use` wins over $AVFS_WORKSPACE (and $AVFS_VAULT); an explicit
    // --workspace (or --vault) on the line wins over both.
    let explicit =
        matches.value_source("workspace") == Some(clap::parser::ValueSource::CommandLine);
    // `avfs --json shell` prints one JSON document per line run (JSON Lines).
    let line_ctx = Ctx {
        json: cli.json || ctx.json,
        workspace: if explicit {
            cli.workspace.clone()
        } else {
            state.workspace.clone().or(cli.workspace.clone())
        },
        service: ctx.service.clone().with_expected_head(cli.if_head),
    };
    let name = || crate::command_path(&super::command(), argv.iter().skip(1).cloned());
    if let Some((name, e)) = super::if_head_misused(&cli, name) {
        output::finish(line_ctx.json, &name, Err(e));
        return Flow::Failed;
    }
    if matches!(cli.command, Command::Shell(_)) {
        return fail(Error::invalid("`shell` cannot run inside the shell"));
    }
    let (name, result) = super::run(&line_ctx, cli.command);
    let code = output::finish(line_ctx.json, name, result);
    if code == 0 { Flow::Ok } else { Flow::Failed }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rw(cwd: &str, line: &str) -> String {
        let state = State {
            workspace: None,
            cwd: VPath::parse(cwd).unwrap(),
        };
        state.rewrite(shlex::split(line).unwrap()).join(" ")
    }

    #[test]
    fn relative_paths_follow_the_cwd_and_values_do_not() {
        assert_eq!(rw("/src", "cat a.rs"), "cat /src/a.rs");
        assert_eq!(rw("/src", "cat /abs.rs"), "cat /abs.rs");
        assert_eq!(rw("/src", "ls"), "ls /src");
        assert_eq!(rw("/src", "ls -l"), "ls -l /src");
        assert_eq!(rw("/", "write a.txt hello"), "write /a.txt hello");
        assert_eq!(
            rw("/src", "write --mode 755 run.sh x"),
            "write --mode 755 /src/run.sh x"
        );
        assert_eq!(rw("/src", "cp a b"), "cp /src/a /src/b");
        assert_eq!(rw("/src", "grep fn lib"), "grep fn /src/lib");
        assert_eq!(rw("/src", "ln -s target link"), "ln -s target /src/link");
        assert_eq!(
            rw("/src", "meta set f.rs owner me"),
            "meta set /src/f.rs owner me"
        );
        assert_eq!(rw("/src", "cat a --at cp-1"), "cat /src/a --at cp-1");
        assert_eq!(
            rw("/src", "proxy exec -- make"),
            "proxy exec --cwd /src -- make"
        );
        assert_eq!(rw("/src", "checkpoint save x"), "checkpoint save x");
        // Value options come from clap: short forms too, and only where they take one.
        assert_eq!(
            rw("/src", "find -s +1k '*.rs' lib"),
            "find -s +1k *.rs /src/lib"
        );
        assert_eq!(
            rw("/src", "find -t f '*.rs' lib"),
            "find -t f *.rs /src/lib"
        );
        assert_eq!(
            rw("/src", "checkpoint save -m msg x"),
            "checkpoint save -m msg x"
        );
        // The global workspace option's value is a name, whichever spelling selects it.
        assert_eq!(rw("/src", "ls -w demo"), "ls -w demo /src");
        assert_eq!(
            rw("/src", "ls --workspace demo"),
            "ls --workspace demo /src"
        );
        assert_eq!(rw("/src", "ls --vault demo"), "ls --vault demo /src");
    }
}
