//! Reading shell text the way a shell would: brush-parser's AST is walked command by command,
//! words are expanded as far as the text allows (quotes, `~`, `$HOME`, known variables,
//! braces), substitutions are classified recursively, and every path is resolved against the
//! workspace.

use std::collections::{HashMap, HashSet};

use brush_parser::ast;
use brush_parser::word::{Parameter, ParameterExpr, TildeExpr, WordPiece, WordPieceWithSource};
use brush_parser::{Parser, ParserOptions};

use super::rules::Invocation;
use super::{Action, Category, PolicyEngine};

/// How deep substitutions, `bash -c` bodies and wrappers may nest before the engine gives up.
pub(super) const MAX_DEPTH: usize = 12;

/// How a finding may be overridden by a matching `[[rule]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Replaced by the rule's decision.
    Normal,
    /// A path outside the workspace (or known only at run time): kept unless the rule's
    /// `paths` globs name it.
    Path,
    /// Kept whatever the rules say.
    Hard,
}

/// One thing the engine found out about a command.
#[derive(Debug, Clone)]
pub(crate) struct Fact {
    pub categories: Vec<Category>,
    /// An action that does not follow from the categories (rules, hard denials, `ask`).
    pub forced: Option<Action>,
    pub rule: String,
    pub reason: String,
    pub offending: Option<String>,
    /// The program the finding is about, for the read-only summary.
    pub program: Option<String>,
    pub kind: Kind,
}

/// A word after the expansions the policy can do statically.
#[derive(Debug, Clone)]
pub(crate) struct Arg {
    /// As written.
    pub raw: String,
    /// Quotes removed; `~` for `$HOME`; `.` for `$PWD`; known variables substituted.
    pub text: String,
    /// `text` after brace expansion (at least one element).
    pub alts: Vec<String>,
    /// Part of it is only known at run time.
    pub dynamic: bool,
    /// A substitution inside it talks to the network.
    pub networked: bool,
}

impl Arg {
    /// A literal word (argv requests: no shell, so no expansion).
    pub fn literal(s: &str) -> Arg {
        Arg {
            raw: s.to_string(),
            text: s.to_string(),
            alts: vec![s.to_string()],
            dynamic: false,
            networked: false,
        }
    }

    /// A word whose value is only known at run time.
    pub fn opaque(raw: &str) -> Arg {
        Arg {
            raw: raw.to_string(),
            text: raw.to_string(),
            alts: vec![raw.to_string()],
            dynamic: true,
            networked: false,
        }
    }

    /// A derived word (part of another), keeping its run-time flags.
    pub fn derived(&self, text: &str) -> Arg {
        Arg {
            raw: text.to_string(),
            text: text.to_string(),
            alts: vec![text.to_string()],
            dynamic: self.dynamic,
            networked: self.networked,
        }
    }

    /// Static text, if the whole word is known.
    pub fn known(&self) -> Option<&str> {
        (!self.dynamic).then_some(self.text.as_str())
    }

    /// Whether this is a static option word (`-x`, `--name`).
    pub fn is_flag(&self) -> bool {
        !self.dynamic && self.text.len() > 1 && self.text.starts_with('-')
    }
}

/// The working directory the walk is at.
#[derive(Debug, Clone)]
pub(super) enum Cwd {
    /// Inside the workspace, as path components.
    Known(Vec<String>),
    /// A `cd` left the workspace through this token.
    Outside(String),
    /// A `cd` to a directory known only at run time.
    Unknown,
}

/// Shell state that matters for classification.
#[derive(Debug, Clone)]
pub(super) struct Scope {
    pub cwd: Cwd,
    /// Variables with a statically known value.
    pub vars: HashMap<String, Arg>,
    /// `$0`, `$1`, … when known (`sh -c BODY NAME ARGS…`).
    pub positional: Vec<Arg>,
    pub functions: HashSet<String>,
}

impl Scope {
    pub fn new(cwd: &str) -> Scope {
        let mut parts: Vec<String> = Vec::new();
        for c in cwd.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                c => parts.push(c.to_string()),
            }
        }
        Scope {
            cwd: Cwd::Known(parts),
            vars: HashMap::new(),
            positional: Vec::new(),
            functions: HashSet::new(),
        }
    }
}

/// Where a command's standard input comes from.
#[derive(Debug, Clone)]
pub(super) enum Stdin {
    /// The caller's (a terminal for an interactive program).
    Inherit,
    /// A pipe from earlier commands; `networked` if any of them talks to the network.
    Pipe { networked: bool },
    /// A file (`< file`).
    File,
    /// Text known statically (here-document, here-string, `echo … |`).
    Code(String),
    /// Text known only at run time (`<<< "$X"`, `< <(cmd)`).
    Dynamic { networked: bool },
}

/// How a path is used, for messages and for run-time targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Read,
    Write,
    Delete,
    Cd,
    Exec,
}

impl Role {
    fn verb(self) -> &'static str {
        match self {
            Role::Read => "reads",
            Role::Write => "writes",
            Role::Delete => "deletes",
            Role::Cd => "changes directory to",
            Role::Exec => "runs",
        }
    }
}

/// Where a path resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Resolved {
    /// Inside the workspace, as a workspace path without the leading `/`.
    Inside(String),
    /// A harmless device such as `/dev/null`.
    Harmless,
    /// Outside the workspace, and why.
    Outside(String),
    /// Relative to a directory known only at run time.
    Unknown,
}

const HARMLESS_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/tty",
];

/// Directories whose programs may be named by absolute path as the command word.
pub(super) const SYSTEM_BIN_DIRS: &[&str] = &[
    "/bin/",
    "/usr/bin/",
    "/usr/local/bin/",
    "/sbin/",
    "/usr/sbin/",
    "/usr/local/sbin/",
    "/opt/homebrew/bin/",
];

/// Resolve a path word against the workspace cwd.
pub(super) fn resolve(text: &str, cwd: &Cwd) -> Resolved {
    if text == "~" || text.starts_with("~/") {
        return Resolved::Outside("the home directory, outside the workspace".into());
    }
    if text.starts_with('~') {
        return Resolved::Outside("a home directory outside the workspace".into());
    }
    if text.starts_with('/') {
        if HARMLESS_DEVICES.contains(&text)
            || text.starts_with("/dev/fd/")
            || text.starts_with("/proc/self/fd/")
        {
            return Resolved::Harmless;
        }
        return Resolved::Outside("an absolute host path outside the workspace".into());
    }
    let mut parts = match cwd {
        Cwd::Known(p) => p.clone(),
        Cwd::Outside(tok) => {
            return Resolved::Outside(format!(
                "relative to `{tok}`, which is outside the workspace"
            ));
        }
        Cwd::Unknown => return Resolved::Unknown,
    };
    for c in text.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Resolved::Outside("it climbs above the workspace root".into());
                }
            }
            c => parts.push(c.to_string()),
        }
    }
    Resolved::Inside(parts.join("/"))
}

/// The directory `cd ARG` leads to.
pub(super) fn chdir(cwd: &Cwd, arg: &Arg) -> Cwd {
    if arg.dynamic && !(arg.text.starts_with('/') || arg.text.starts_with('~')) {
        return Cwd::Unknown;
    }
    match resolve(&arg.text, cwd) {
        Resolved::Inside(p) => Cwd::Known(
            p.split('/')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
        ),
        Resolved::Unknown => Cwd::Unknown,
        Resolved::Harmless | Resolved::Outside(_) => Cwd::Outside(arg.raw.clone()),
    }
}

/// Brace expansion (`{a,b}` → `a`, `b`; sequences `{1..3}` are left alone), at most 64
/// results.
pub(super) fn expand_braces(text: &str) -> Vec<String> {
    fn go(text: &str, out: &mut Vec<String>, budget: &mut usize) {
        if *budget == 0 {
            out.push(text.to_string());
            return;
        }
        let bytes = text.as_bytes();
        for (open, _) in text.char_indices().filter(|(_, c)| *c == '{') {
            let mut depth = 0;
            let mut commas = Vec::new();
            let mut close = None;
            for (j, c) in text[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            close = Some(open + j);
                            break;
                        }
                    }
                    ',' if depth == 1 => commas.push(open + j),
                    _ => {}
                }
            }
            let Some(close) = close else { continue };
            if commas.is_empty() || (open > 0 && bytes[open - 1] == b'$') {
                continue;
            }
            let mut bounds = vec![open];
            bounds.extend(&commas);
            bounds.push(close);
            for w in bounds.windows(2) {
                let piece = &text[w[0] + 1..w[1]];
                let s = format!("{}{}{}", &text[..open], piece, &text[close + 1..]);
                *budget = budget.saturating_sub(1);
                go(&s, out, budget);
            }
            return;
        }
        out.push(text.to_string());
    }
    let mut out = Vec::new();
    let mut budget = 64;
    go(text, &mut out, &mut budget);
    out.dedup();
    out
}

/// Parse shell text into brush-parser's AST.
pub(super) fn parse_program(text: &str) -> Result<ast::Program, String> {
    let opts = ParserOptions::default();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut p = Parser::new(std::io::Cursor::new(text.as_bytes()), &opts);
        p.parse_program().map_err(|e| e.to_string())
    }));
    res.unwrap_or_else(|_| Err("the shell parser gave up on this text".into()))
}

struct WordBuf {
    text: String,
    dynamic: bool,
    networked: bool,
}

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

fn short(s: &str) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 60 {
        let cut: String = one_line.chars().take(57).collect();
        format!("{cut}…")
    } else {
        one_line
    }
}

/// `prog arg1 arg2` as written, shortened for messages.
pub(super) fn snippet(args: &[Arg]) -> String {
    short(
        &args
            .iter()
            .map(|a| a.raw.as_str())
            .collect::<Vec<_>>()
            .join(" "),
    )
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
            "builtin/read-only",
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
            Role::Write | Role::Delete | Role::Cd => {
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

    // ---- text and AST ------------------------------------------------------------------

    /// Classify shell text (a whole program).
    pub fn shell_text(&mut self, text: &str, scope: &mut Scope, stdin: Stdin) {
        if self.depth >= MAX_DEPTH {
            self.hard(
                &[Category::Unknown],
                "builtin/too-deep",
                format!(
                    "the command nests shells and substitutions more than {MAX_DEPTH} levels deep"
                ),
                &short(text),
            );
            return;
        }
        match parse_program(text) {
            Err(e) => self.hard(
                &[Category::Unknown],
                "builtin/unparsable",
                format!(
                    "cannot parse `{}` as shell ({e}); a shell would still run the lines before the error",
                    short(text)
                ),
                &short(text),
            ),
            Ok(prog) => {
                self.depth += 1;
                for list in &prog.complete_commands {
                    self.compound_list(list, scope, &stdin);
                }
                self.depth -= 1;
            }
        }
    }

    fn compound_list(&mut self, list: &ast::CompoundList, scope: &mut Scope, stdin: &Stdin) {
        for item in &list.0 {
            let ao = &item.0;
            self.pipeline(&ao.first, scope, stdin);
            for next in &ao.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p, scope, stdin),
                }
            }
        }
    }

    fn pipeline(&mut self, p: &ast::Pipeline, scope: &mut Scope, stdin: &Stdin) {
        if p.seq.len() == 1 {
            self.command(&p.seq[0], scope, stdin.clone());
            return;
        }
        let mut networked = matches!(
            stdin,
            Stdin::Pipe { networked: true } | Stdin::Dynamic { networked: true }
        );
        let mut prev_text: Option<String> = None;
        for (i, cmd) in p.seq.iter().enumerate() {
            let input = if i == 0 {
                stdin.clone()
            } else if let Some(t) = prev_text.take() {
                Stdin::Code(t)
            } else {
                Stdin::Pipe { networked }
            };
            // Every element of a multi-command pipeline runs in a subshell.
            let mut sub = scope.clone();
            let before = self.net_events;
            self.command(cmd, &mut sub, input);
            networked |= self.net_events > before;
            prev_text = static_echo(cmd);
        }
    }

    fn command(&mut self, cmd: &ast::Command, scope: &mut Scope, stdin: Stdin) {
        match cmd {
            ast::Command::Simple(sc) => self.simple(sc, scope, stdin),
            ast::Command::Compound(cc, redirects) => {
                let mut stdin = stdin;
                if let Some(r) = redirects {
                    for io in &r.0 {
                        self.redirect(io, scope, &mut stdin);
                    }
                }
                self.compound(cc, scope, &stdin);
            }
            ast::Command::Function(f) => self.function(f, scope),
            ast::Command::ExtendedTest(t, redirects) => {
                let mut stdin = stdin;
                if let Some(r) = redirects {
                    for io in &r.0 {
                        self.redirect(io, scope, &mut stdin);
                    }
                }
                self.ext_test(&t.expr, scope);
                self.read_only("[[");
            }
        }
    }

    fn compound(&mut self, cc: &ast::CompoundCommand, scope: &mut Scope, stdin: &Stdin) {
        match cc {
            ast::CompoundCommand::Arithmetic(a) => {
                self.scan(&a.expr.value, scope);
                self.read_only("((");
            }
            ast::CompoundCommand::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.scan(&e.value, scope);
                }
                self.compound_list(&f.body.list, scope, stdin);
            }
            ast::CompoundCommand::BraceGroup(b) => self.compound_list(&b.list, scope, stdin),
            ast::CompoundCommand::Subshell(s) => {
                let mut sub = scope.clone();
                self.compound_list(&s.list, &mut sub, stdin);
            }
            ast::CompoundCommand::ForClause(f) => {
                let values: Vec<Arg> = f
                    .values
                    .iter()
                    .flatten()
                    .map(|w| self.word(&w.value, scope))
                    .collect();
                // Bind the loop variable to its most telling value: one that leaves the
                // workspace if any does, else the first.
                let pick = values
                    .iter()
                    .find(|v| {
                        v.alts
                            .iter()
                            .any(|a| matches!(resolve(a, &scope.cwd), Resolved::Outside(_)))
                    })
                    .or_else(|| values.iter().find(|v| v.dynamic))
                    .or(values.first())
                    .cloned();
                match pick {
                    Some(v) => {
                        scope.vars.insert(f.variable_name.clone(), v);
                    }
                    None => {
                        scope.vars.remove(&f.variable_name);
                    }
                }
                self.compound_list(&f.body.list, scope, stdin);
            }
            ast::CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value, scope);
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value, scope);
                    }
                    if let Some(list) = &item.cmd {
                        self.compound_list(list, scope, stdin);
                    }
                }
            }
            ast::CompoundCommand::IfClause(c) => {
                self.compound_list(&c.condition, scope, stdin);
                self.compound_list(&c.then, scope, stdin);
                for e in c.elses.iter().flatten() {
                    if let Some(cond) = &e.condition {
                        self.compound_list(cond, scope, stdin);
                    }
                    self.compound_list(&e.body, scope, stdin);
                }
            }
            ast::CompoundCommand::WhileClause(w) | ast::CompoundCommand::UntilClause(w) => {
                self.compound_list(&w.0, scope, stdin);
                self.compound_list(&w.1.list, scope, stdin);
            }
            ast::CompoundCommand::Coprocess(c) => {
                let mut sub = scope.clone();
                self.command(&c.body, &mut sub, Stdin::Pipe { networked: false });
            }
        }
    }

    fn function(&mut self, f: &ast::FunctionDefinition, scope: &mut Scope) {
        let name = self.word(&f.fname.value, scope).text;
        let start = self.invoked.len();
        let mut sub = scope.clone();
        sub.functions.insert(name.clone());
        let mut stdin = Stdin::Inherit;
        if let Some(r) = &f.body.1 {
            for io in &r.0 {
                self.redirect(io, &mut sub, &mut stdin);
            }
        }
        self.compound(&f.body.0, &mut sub, &stdin);
        if self.invoked[start..].contains(&name) {
            self.hard(
                &[Category::Unknown],
                "builtin/fork-bomb",
                format!(
                    "function `{name}` calls itself: a recursive function (the fork-bomb pattern) is never run"
                ),
                &name,
            );
        }
        scope.functions.insert(name);
    }

    fn ext_test(&mut self, e: &ast::ExtendedTestExpr, scope: &mut Scope) {
        use ast::ExtendedTestExpr as E;
        match e {
            E::And(a, b) | E::Or(a, b) => {
                self.ext_test(a, scope);
                self.ext_test(b, scope);
            }
            E::Not(a) | E::Parenthesized(a) => self.ext_test(a, scope),
            E::UnaryTest(pred, w) => {
                let a = self.word(&w.value, scope);
                if file_predicate(pred) {
                    self.path("[[", &a, Role::Read, scope);
                }
            }
            E::BinaryTest(_, l, r) => {
                self.word(&l.value, scope);
                self.word(&r.value, scope);
            }
        }
    }

    fn simple(&mut self, sc: &ast::SimpleCommand, scope: &mut Scope, stdin: Stdin) {
        use ast::CommandPrefixOrSuffixItem as Item;
        let mut words: Vec<Arg> = Vec::new();
        let mut assigns: Vec<(String, Arg)> = Vec::new();
        let mut redirects: Vec<&ast::IoRedirect> = Vec::new();
        for item in sc.prefix.iter().flat_map(|p| p.0.iter()) {
            match item {
                Item::IoRedirect(r) => redirects.push(r),
                Item::AssignmentWord(a, _) => {
                    let v = self.assignment(a, scope);
                    assigns.push((assignment_name(a), v));
                }
                Item::Word(w) => words.push(self.word(&w.value, scope)),
                Item::ProcessSubstitution(kind, sub) => {
                    words.push(self.process_substitution(kind, sub, scope));
                }
            }
        }
        if let Some(w) = &sc.word_or_name {
            words.push(self.word(&w.value, scope));
        }
        for item in sc.suffix.iter().flat_map(|s| s.0.iter()) {
            match item {
                Item::IoRedirect(r) => redirects.push(r),
                Item::AssignmentWord(_, w) | Item::Word(w) => {
                    words.push(self.word(&w.value, scope));
                }
                Item::ProcessSubstitution(kind, sub) => {
                    words.push(self.process_substitution(kind, sub, scope));
                }
            }
        }
        let mut stdin = stdin;
        for r in redirects {
            self.redirect(r, scope, &mut stdin);
        }
        for (name, v) in &assigns {
            self.env_assignment(name, v);
        }
        if words.is_empty() {
            for (name, v) in assigns {
                scope.vars.insert(name, v);
            }
            self.push(
                &[Category::ReadOnly],
                "builtin/read-only",
                "only sets shell variables".into(),
                None,
                None,
            );
            return;
        }
        self.classify_argv(words, scope, stdin);
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

    fn assignment(&mut self, a: &ast::Assignment, scope: &mut Scope) -> Arg {
        match &a.value {
            ast::AssignmentValue::Scalar(w) => self.word(&w.value, scope),
            ast::AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.word(&k.value, scope);
                    }
                    self.word(&v.value, scope);
                }
                Arg::opaque("(…)")
            }
        }
    }

    fn process_substitution(
        &mut self,
        kind: &ast::ProcessSubstitutionKind,
        sub: &ast::SubshellCommand,
        scope: &mut Scope,
    ) -> Arg {
        let before = self.net_events;
        let mut inner = scope.clone();
        let input = match kind {
            ast::ProcessSubstitutionKind::Read => Stdin::Inherit,
            ast::ProcessSubstitutionKind::Write => Stdin::Pipe { networked: false },
        };
        self.depth += 1;
        self.compound_list(&sub.list, &mut inner, &input);
        self.depth -= 1;
        let networked = self.net_events > before;
        Arg {
            raw: "<(…)".into(),
            text: "/dev/fd/63".into(),
            alts: vec!["/dev/fd/63".into()],
            dynamic: true,
            networked,
        }
    }

    fn redirect(&mut self, r: &ast::IoRedirect, scope: &mut Scope, stdin: &mut Stdin) {
        use ast::IoFileRedirectKind as K;
        use ast::IoFileRedirectTarget as T;
        match r {
            ast::IoRedirect::File(fd, kind, target) => {
                let to_stdin = fd.is_none_or(|f| f == 0);
                match target {
                    T::Filename(w) => {
                        let a = self.word(&w.value, scope);
                        match kind {
                            K::Read => {
                                self.path("<", &a, Role::Read, scope);
                                if to_stdin {
                                    *stdin = if a.dynamic {
                                        Stdin::Dynamic {
                                            networked: a.networked,
                                        }
                                    } else {
                                        Stdin::File
                                    };
                                }
                            }
                            K::Write | K::Append | K::Clobber | K::ReadAndWrite => {
                                self.redirect_write(&a, scope);
                            }
                            K::DuplicateInput | K::DuplicateOutput => {
                                if !is_fd_word(&a) {
                                    self.redirect_write(&a, scope);
                                }
                            }
                        }
                    }
                    T::Fd(_) => {}
                    T::Duplicate(w) => {
                        let a = self.word(&w.value, scope);
                        if !is_fd_word(&a) {
                            self.redirect_write(&a, scope);
                        }
                    }
                    T::ProcessSubstitution(k, sub) => {
                        let a = self.process_substitution(k, sub, scope);
                        if matches!(kind, K::Read) && to_stdin {
                            *stdin = Stdin::Dynamic {
                                networked: a.networked,
                            };
                        }
                    }
                }
            }
            ast::IoRedirect::HereDocument(fd, doc) => {
                if doc.requires_expansion {
                    self.scan_heredoc(&doc.doc.value, scope);
                }
                if fd.is_none_or(|f| f == 0) {
                    *stdin = Stdin::Code(doc.doc.value.clone());
                }
            }
            ast::IoRedirect::HereString(fd, w) => {
                let a = self.word(&w.value, scope);
                if fd.is_none_or(|f| f == 0) {
                    *stdin = if a.dynamic {
                        Stdin::Dynamic {
                            networked: a.networked,
                        }
                    } else {
                        Stdin::Code(a.text.clone())
                    };
                }
            }
            ast::IoRedirect::OutputAndError(w, _) => {
                let a = self.word(&w.value, scope);
                self.redirect_write(&a, scope);
            }
        }
    }

    fn redirect_write(&mut self, a: &Arg, scope: &Scope) {
        let before = self.facts.len();
        self.path(">", a, Role::Write, scope);
        let harmless = a
            .alts
            .iter()
            .all(|t| resolve(t, &scope.cwd) == Resolved::Harmless);
        if self.facts.len() == before && !harmless {
            self.push(
                &[Category::Mutating],
                "builtin/mutating",
                format!("redirection writes `{}`", a.raw),
                Some(&a.raw),
                Some(">"),
            );
        }
    }

    // ---- words -------------------------------------------------------------------------

    /// Expand a word as far as the text allows, classifying substitutions inside it.
    pub fn word(&mut self, raw: &str, scope: &Scope) -> Arg {
        let opts = ParserOptions::default();
        let pieces = match brush_parser::word::parse(raw, &opts) {
            Ok(p) => p,
            Err(_) => return Arg::opaque(raw),
        };
        let mut b = WordBuf {
            text: String::new(),
            dynamic: false,
            networked: false,
        };
        self.pieces(raw, &pieces, scope, &mut b);
        // A `~` after `=` or `:` in an unquoted word is expanded by bash too.
        let alts = if raw.contains('{') && raw.contains('}') {
            expand_braces(&b.text)
        } else {
            vec![b.text.clone()]
        };
        Arg {
            raw: raw.to_string(),
            text: b.text,
            alts,
            dynamic: b.dynamic,
            networked: b.networked,
        }
    }

    fn pieces(
        &mut self,
        raw: &str,
        pieces: &[WordPieceWithSource],
        scope: &Scope,
        b: &mut WordBuf,
    ) {
        for p in pieces {
            match &p.piece {
                WordPiece::Text(s) | WordPiece::SingleQuotedText(s) => b.text.push_str(s),
                WordPiece::AnsiCQuotedText(s) => {
                    if s.contains('\\') {
                        b.dynamic = true;
                    }
                    b.text.push_str(s);
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(raw, inner, scope, b);
                }
                WordPiece::TildeExpansion(t) => match t {
                    TildeExpr::Home => b.text.push('~'),
                    TildeExpr::UserHome(u) => {
                        b.text.push('~');
                        b.text.push_str(u);
                    }
                    TildeExpr::WorkingDir => b.text.push('.'),
                    _ => {
                        b.dynamic = true;
                        b.text.push_str("~-");
                    }
                },
                WordPiece::ParameterExpansion(expr) => {
                    let src = raw.get(p.start_index..p.end_index).unwrap_or(raw);
                    self.parameter(expr, src, scope, b);
                }
                WordPiece::CommandSubstitution(s) | WordPiece::BackquotedCommandSubstitution(s) => {
                    let before = self.net_events;
                    let mut sub = scope.clone();
                    self.shell_text(s, &mut sub, Stdin::Inherit);
                    b.networked |= self.net_events > before;
                    b.dynamic = true;
                    b.text.push_str("$(…)");
                }
                WordPiece::EscapeSequence(s) => {
                    b.text.push_str(s.strip_prefix('\\').unwrap_or(s));
                }
                WordPiece::ArithmeticExpression(e) => {
                    self.scan(&e.value, scope);
                    b.dynamic = true;
                    b.text.push('0');
                }
            }
        }
    }

    fn parameter(&mut self, expr: &ParameterExpr, src: &str, scope: &Scope, b: &mut WordBuf) {
        let absorb = |b: &mut WordBuf, v: &Arg| {
            b.text.push_str(&v.text);
            b.dynamic |= v.dynamic;
            b.networked |= v.networked;
        };
        match expr {
            ParameterExpr::Parameter {
                parameter,
                indirect: false,
            } => match parameter {
                Parameter::Named(n) if n == "HOME" => b.text.push('~'),
                Parameter::Named(n) if n == "PWD" => b.text.push('.'),
                Parameter::Named(n) => match scope.vars.get(n) {
                    Some(v) => absorb(b, v),
                    None => {
                        b.dynamic = true;
                        b.text.push_str(src);
                    }
                },
                Parameter::Positional(k) => match scope.positional.get(*k as usize) {
                    Some(v) => absorb(b, v),
                    None => {
                        b.dynamic = true;
                        b.text.push_str(src);
                    }
                },
                Parameter::Special(
                    brush_parser::word::SpecialParameter::AllPositionalParameters { .. },
                ) if scope.positional.len() > 1 => {
                    let args = &scope.positional[1..];
                    let v = args
                        .iter()
                        .find(|a| looks_like_path(&a.text) && !a.text.starts_with("./"))
                        .unwrap_or(&args[0]);
                    absorb(b, v);
                }
                _ => {
                    b.dynamic = true;
                    b.text.push_str(src);
                }
            },
            _ => {
                // `${x:-$(cmd)}`, `${x/$(cmd)/y}`: classify what is inside.
                if src.contains("$(") || src.contains('`') {
                    let inner = src
                        .strip_prefix("${")
                        .and_then(|s| s.strip_suffix('}'))
                        .unwrap_or(src);
                    self.scan(inner, scope);
                }
                b.dynamic = true;
                b.text.push_str(src);
            }
        }
    }

    /// Classify the substitutions inside arbitrary text (arithmetic, parameter operands).
    pub fn scan(&mut self, text: &str, scope: &Scope) {
        if text.contains("$(") || text.contains('`') {
            self.word(&format!("\"{}\"", text.replace('"', "\\\"")), scope);
        }
    }

    fn scan_heredoc(&mut self, text: &str, scope: &Scope) {
        if !(text.contains("$(") || text.contains('`')) {
            return;
        }
        let opts = ParserOptions::default();
        match brush_parser::word::parse_heredoc(text, &opts) {
            Ok(pieces) => {
                let mut b = WordBuf {
                    text: String::new(),
                    dynamic: false,
                    networked: false,
                };
                self.pieces(text, &pieces, scope, &mut b);
            }
            Err(_) => self.push(
                &[Category::Unknown],
                "builtin/unparsable",
                "cannot read the substitutions in a here-document".into(),
                None,
                None,
            ),
        }
    }

    // ---- rules -------------------------------------------------------------------------

    /// After the built-in classification of one layer (`facts[start..]`), let the first
    /// matching `[[rule]]` decide it instead.
    pub fn apply_rules(&mut self, name: &str, args: &[Arg], scope: &Scope, start: usize) {
        if self.engine.rules().is_empty() {
            return;
        }
        let rest = &args[1..];
        let sub = super::classify::subcommand(name, rest);
        let mut paths = Vec::new();
        let mut after_dd = false;
        for a in rest {
            if a.dynamic {
                continue;
            }
            if a.text == "--" {
                after_dd = true;
                continue;
            }
            let candidates: Vec<String> = if !after_dd && a.text.starts_with('-') {
                a.text
                    .split_once('=')
                    .map(|(_, v)| vec![v.to_string()])
                    .unwrap_or_default()
            } else if let Some((_, v)) = a.text.split_once('=') {
                a.alts.iter().cloned().chain([v.to_string()]).collect()
            } else {
                a.alts.clone()
            };
            for c in candidates {
                let rel = match resolve(&c, &scope.cwd) {
                    Resolved::Inside(p) => Some(p),
                    _ => None,
                };
                paths.push((c, rel));
            }
        }
        let inv = Invocation {
            program: name,
            subcommand: sub.as_deref(),
            args: rest
                .iter()
                .filter(|a| !a.dynamic)
                .map(|a| a.text.as_str())
                .collect(),
            paths,
        };
        let Some((rule, m)) = self
            .engine
            .rules()
            .iter()
            .find_map(|r| r.matches(&inv).map(|m| (r, m)))
        else {
            return;
        };
        let found: Vec<Fact> = self.facts.drain(start..).collect();
        let categories = match rule.category {
            Some(c) => vec![c],
            None => {
                let mut c: Vec<Category> = found
                    .iter()
                    .filter(|f| f.kind == Kind::Normal)
                    .flat_map(|f| f.categories.iter().copied())
                    .collect();
                c.sort();
                c.dedup();
                if c.is_empty() {
                    c.push(Category::Unknown);
                }
                c
            }
        };
        self.facts.push(Fact {
            categories,
            forced: Some(rule.action),
            rule: rule.name.clone(),
            reason: match &rule.reason {
                Some(r) if r.contains(m.offending.as_str()) => r.clone(),
                Some(r) => format!("{r} (`{}`)", m.offending),
                None => format!(
                    "`{}` matches policy rule `{}` (`{}`)",
                    snippet(args),
                    rule.name,
                    m.offending
                ),
            },
            offending: Some(m.offending.clone()),
            program: Some(name.to_string()),
            kind: Kind::Normal,
        });
        for f in found {
            let keep = match f.kind {
                Kind::Hard => true,
                Kind::Path => !f
                    .offending
                    .as_ref()
                    .is_some_and(|o| m.covered.iter().any(|c| c == o || o.contains(c.as_str()))),
                Kind::Normal => false,
            };
            if keep {
                self.facts.push(f);
            }
        }
    }
}

fn assignment_name(a: &ast::Assignment) -> String {
    match &a.name {
        ast::AssignmentName::VariableName(n) => n.clone(),
        ast::AssignmentName::ArrayElementName(n, _) => n.clone(),
    }
}

fn is_fd_word(a: &Arg) -> bool {
    !a.dynamic
        && (a.text == "-" || (!a.text.is_empty() && a.text.chars().all(|c| c.is_ascii_digit())))
}

/// Whether a value looks like a path worth checking (absolute, home, or climbing).
pub(super) fn looks_like_path(v: &str) -> bool {
    v.starts_with('/')
        || v.starts_with('~')
        || v.starts_with("file://")
        || v == ".."
        || v.starts_with("../")
        || v.contains("/../")
        || v.ends_with("/..")
}

fn file_predicate(p: &ast::UnaryPredicate) -> bool {
    use ast::UnaryPredicate as U;
    !matches!(
        p,
        U::StringHasZeroLength
            | U::StringHasNonZeroLength
            | U::ShellOptionEnabled
            | U::ShellVariableIsSetAndAssigned
            | U::ShellVariableIsSetAndNameRef
            | U::FdIsOpenTerminal
    )
}

/// The text `echo …`/`printf …` writes, when it is fully static (so `echo 'rm -rf /' | sh`
/// is classified as `rm -rf /`).
fn static_echo(cmd: &ast::Command) -> Option<String> {
    let ast::Command::Simple(sc) = cmd else {
        return None;
    };
    let name = sc.word_or_name.as_ref()?.value.as_str();
    if name != "echo" && name != "printf" {
        return None;
    }
    let mut out = Vec::new();
    for item in sc.suffix.iter().flat_map(|s| s.0.iter()) {
        match item {
            ast::CommandPrefixOrSuffixItem::Word(w) => {
                let pieces = brush_parser::word::parse(&w.value, &ParserOptions::default()).ok()?;
                let mut s = String::new();
                for p in pieces {
                    match p.piece {
                        WordPiece::Text(t) | WordPiece::SingleQuotedText(t) => s.push_str(&t),
                        WordPiece::DoubleQuotedSequence(inner) => {
                            for q in inner {
                                match q.piece {
                                    WordPiece::Text(t) => s.push_str(&t),
                                    WordPiece::EscapeSequence(t) => {
                                        s.push_str(t.strip_prefix('\\').unwrap_or(&t));
                                    }
                                    _ => return None,
                                }
                            }
                        }
                        WordPiece::EscapeSequence(t) => {
                            s.push_str(t.strip_prefix('\\').unwrap_or(&t));
                        }
                        _ => return None,
                    }
                }
                out.push(s);
            }
            _ => return None,
        }
    }
    if name == "printf" {
        // Only a format without conversions or escapes is taken literally.
        let first = out.first()?;
        if out.len() != 1 || first.contains('%') || first.contains('\\') {
            return None;
        }
    } else if out.first().is_some_and(|f| f.starts_with('-')) {
        return None;
    }
    Some(out.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces() {
        assert_eq!(expand_braces("{/,x}"), vec!["/", "x"]);
        assert_eq!(expand_braces("a{b,c}d"), vec!["abd", "acd"]);
        assert_eq!(expand_braces("{1..3}"), vec!["{1..3}"]);
        assert_eq!(expand_braces("plain"), vec!["plain"]);
    }

    #[test]
    fn resolving() {
        let root = Cwd::Known(vec![]);
        let src = Cwd::Known(vec!["src".into()]);
        assert_eq!(resolve("a/b", &root), Resolved::Inside("a/b".into()));
        assert!(matches!(resolve("..", &root), Resolved::Outside(_)));
        assert_eq!(resolve("..", &src), Resolved::Inside(String::new()));
        assert!(matches!(resolve("../..", &src), Resolved::Outside(_)));
        assert_eq!(resolve("/dev/null", &root), Resolved::Harmless);
        assert!(matches!(
            resolve("/etc/passwd", &root),
            Resolved::Outside(_)
        ));
        assert!(matches!(resolve("~/.ssh", &root), Resolved::Outside(_)));
    }
}
