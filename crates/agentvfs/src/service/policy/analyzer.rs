//! The analyzer's state for one request, and how it records what it finds: categories, hard
//! denials, and paths by the role a program gives them. The shell walker (`shell`, `expand`)
//! and the classifiers (`classify`) each add their own `impl Analyzer` block.

use super::{Action, Category, PolicyEngine};
use crate::service::policy::words::{
    Arg, Fact, Kind, Resolved, Role, Scope, Stdin, looks_like_path, resolve, short,
};

/// The walk over one request.
pub(super) struct Analyzer<'e> {
    pub engine: &'e PolicyEngine,
    pub facts: Vec<Fact>,
    pub depth: usize,
    /// Program names invoked so far (to spot recursive functions).
    pub invoked: Vec<String>,
    /// How many network findings the built-in classification made (rules cannot hide
    /// network output from `… | sh` detection).
    pub net_events: usize,
}

impl<'e> Analyzer<'e> {
    pub fn new(engine: &'e PolicyEngine) -> Self {
        Analyzer {
            engine,
            facts: Vec::new(),
            depth: 0,
            invoked: Vec::new(),
            net_events: 0,
        }
    }

    // ---- findings ----------------------------------------------------------------------

    pub fn push(
        &mut self,
        categories: &[Category],
        rule: &str,
        reason: String,
        offending: Option<&str>,
        program: Option<&str>,
    ) {
        if categories.contains(&Category::Networked) {
            self.net_events += 1;
        }
        self.facts.push(Fact {
            categories: categories.to_vec(),
            forced: None,
            rule: rule.to_string(),
            reason,
            offending: offending.map(String::from),
            program: program.map(String::from),
            kind: Kind::Normal,
        });
    }

    /// A denial no rule can lift.
    pub fn hard(&mut self, categories: &[Category], rule: &str, reason: String, offending: &str) {
        if categories.contains(&Category::Networked) {
            self.net_events += 1;
        }
        self.facts.push(Fact {
            categories: categories.to_vec(),
            forced: Some(Action::Deny),
            rule: rule.to_string(),
            reason,
            offending: Some(offending.to_string()),
            program: None,
            kind: Kind::Hard,
        });
    }

    /// A read-only finding for `prog`.
    pub fn read_only(&mut self, prog: &str) {
        self.push(
            &[Category::ReadOnly],
            "builtin/readonly",
            format!("`{prog}` only reads"),
            None,
            Some(prog),
        );
    }

    /// A finding in one category about `prog`, with a rule named after the category.
    pub fn cat(&mut self, c: Category, prog: &str, what: String, offending: Option<&str>) {
        let rule = format!("builtin/{}", c.as_str().replace('_', "-"));
        self.push(&[c], &rule, what, offending, Some(prog));
    }

    /// Check one path word used by `prog` in the given role.
    pub fn path(&mut self, prog: &str, arg: &Arg, role: Role, scope: &Scope) {
        for alt in &arg.alts {
            let text = alt.strip_prefix("file://").unwrap_or(alt);
            let absolute = text.starts_with('/') || text.starts_with('~');
            if arg.dynamic && !absolute {
                self.dynamic_target(prog, arg, role);
                return;
            }
            match resolve(text, &scope.cwd) {
                Resolved::Inside(_) | Resolved::Harmless => {}
                Resolved::Outside(why) => {
                    let reason = if role == Role::Cd {
                        format!("`{prog} {}` leaves the workspace: {why}", arg.raw)
                    } else {
                        format!("`{prog}` {} `{}`: {why}", role.verb(), arg.raw)
                    };
                    self.facts.push(Fact {
                        categories: vec![Category::HostEscape],
                        forced: None,
                        rule: "builtin/host-escape".into(),
                        reason,
                        offending: Some(arg.raw.clone()),
                        program: Some(prog.to_string()),
                        kind: Kind::Path,
                    });
                    return;
                }
                Resolved::Unknown => {
                    self.dynamic_target(prog, arg, role);
                    return;
                }
            }
        }
    }

    /// A path that program text mentions without saying what it does with it (a string
    /// in inline code): outside the workspace, a person decides (ask).
    pub fn mentioned_path(&mut self, prog: &str, arg: &Arg, scope: &Scope) {
        if let Resolved::Outside(why) = resolve(&arg.text, &scope.cwd) {
            self.facts.push(Fact {
                categories: vec![Category::Unknown],
                forced: Some(Action::Ask),
                rule: "builtin/inline-path".into(),
                reason: format!("`{prog}` code names `{}`: {why}", arg.raw),
                offending: Some(arg.raw.clone()),
                program: Some(prog.to_string()),
                kind: Kind::Path,
            });
        }
    }

    fn dynamic_target(&mut self, prog: &str, arg: &Arg, role: Role) {
        match role {
            Role::Write | Role::Delete | Role::Cd | Role::LinkTo => {
                let reason = match role {
                    Role::Cd => format!(
                        "`{prog} {}` goes to a directory known only at run time",
                        arg.raw
                    ),
                    _ => format!(
                        "`{prog}` {} `{}`, which is known only at run time (it could be outside the workspace)",
                        role.verb(),
                        arg.raw
                    ),
                };
                self.facts.push(Fact {
                    categories: vec![Category::Unknown],
                    forced: Some(Action::Ask),
                    rule: "builtin/dynamic-target".into(),
                    reason,
                    offending: Some(arg.raw.clone()),
                    program: Some(prog.to_string()),
                    kind: Kind::Path,
                });
            }
            Role::Read | Role::Exec => self.push(
                &[Category::Unknown],
                "builtin/dynamic-target",
                format!(
                    "`{prog}` {} `{}`, which is known only at run time",
                    role.verb(),
                    arg.raw
                ),
                Some(&arg.raw),
                Some(prog),
            ),
        }
    }

    /// Check the value of `--name=VALUE` / `key=VALUE` words when it looks like a path.
    pub fn eq_value(&mut self, prog: &str, arg: &Arg, role: Role, scope: &Scope) {
        if let Some((_, v)) = arg.text.split_once('=')
            && looks_like_path(v)
        {
            let d = arg.derived(v);
            self.path(prog, &d, role, scope);
        }
    }

    /// Assignments whose value the shell or a tool later runs as a program or code.
    pub fn env_assignment(&mut self, name: &str, v: &Arg) {
        const EXEC_VARS: &[&str] = &[
            "LD_PRELOAD",
            "LD_AUDIT",
            "LD_LIBRARY_PATH",
            "BASH_ENV",
            "ENV",
            "PROMPT_COMMAND",
            "PATH",
            "GIT_SSH_COMMAND",
            "GIT_SSH",
            "GIT_EDITOR",
            "GIT_PAGER",
            "GIT_EXTERNAL_DIFF",
            "GIT_ASKPASS",
            "EDITOR",
            "VISUAL",
            "PAGER",
            "SHELL",
            "PYTHONSTARTUP",
            "NODE_OPTIONS",
            "RUSTC_WRAPPER",
        ];
        const COMMAND_VARS: &[&str] = &[
            "GIT_SSH_COMMAND",
            "GIT_EDITOR",
            "GIT_PAGER",
            "GIT_EXTERNAL_DIFF",
            "EDITOR",
            "VISUAL",
            "PAGER",
            "PROMPT_COMMAND",
            "RUSTC_WRAPPER",
        ];
        if COMMAND_VARS.contains(&name) && !v.dynamic && !v.text.trim().is_empty() {
            let mut sub = Scope::new("/");
            self.shell_text(&v.text.clone(), &mut sub, Stdin::Inherit);
        }
        if EXEC_VARS.contains(&name) {
            self.push(
                &[Category::Unknown],
                "builtin/exec-variable",
                format!(
                    "`{name}={}` changes which programs or code run",
                    short(&v.raw)
                ),
                Some(name),
                None,
            );
        }
    }
}
