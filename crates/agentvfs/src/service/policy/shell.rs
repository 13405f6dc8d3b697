//! Reading shell text the way a shell would: brush-parser's AST is walked command by command,
//! each simple command handed to the classifiers (`classify`) and to the policy's rules,
//! with redirections, assignments and substitutions followed. Word expansion is `expand`.

use brush_parser::word::WordPiece;
use brush_parser::{Parser, ParserOptions, ast};

use super::Category;
use super::rules::Invocation;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{
    Arg, Fact, Kind, MAX_DEPTH, Resolved, Role, Scope, Stdin, resolve, short, snippet,
};

/// Parse shell text into brush-parser's AST.
pub(super) fn parse_program(text: &str) -> Result<ast::Program, String> {
    let opts = ParserOptions::default();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut p = Parser::new(std::io::Cursor::new(text.as_bytes()), &opts);
        p.parse_program().map_err(|e| e.to_string())
    }));
    res.unwrap_or_else(|_| Err("the shell parser gave up on this text".into()))
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

impl Analyzer<'_> {
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
                "builtin/readonly",
                "only sets shell variables".into(),
                None,
                None,
            );
            return;
        }
        self.classify_argv(words, scope, stdin);
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
