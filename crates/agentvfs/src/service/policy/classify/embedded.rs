//! What a program's own text names: the files and commands written inside an awk program,
//! a sed script, inline python or perl code, and the commands tar runs. Each is classified
//! as if it stood on the command line, so `awk 'BEGIN{system("rm -rf /x")}'` is decided
//! like `rm -rf /x`, and `sed 'w /etc/x'` like a write to `/etc/x`.

use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Role, Scope, Stdin};
/// One thing a program's text names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Named {
    Path {
        text: String,
        role: Role,
    },
    Command(String),
    /// A path the text mentions without saying what it does with it.
    Mention(String),
    /// A command the text runs that is known only at run time (sed's `e`).
    RunsUnknown(&'static str),
}

impl Analyzer<'_> {
    /// Classify what `body` (the program text of `prog`) names.
    pub(super) fn embedded(&mut self, prog: &str, body: &Arg, names: Vec<Named>, scope: &Scope) {
        for named in names {
            match named {
                Named::Path { text, role } => self.path(prog, &body.derived(&text), role, scope),
                Named::Command(cmd) => {
                    let mut sub = scope.clone();
                    self.shell_text(&cmd, &mut sub, Stdin::File);
                }
                Named::Mention(text) => self.mentioned_path(prog, &body.derived(&text), scope),
                Named::RunsUnknown(what) => self.dynamic_code(
                    prog,
                    format!("`{prog}` {what}, a command known only at run time"),
                    &body.raw,
                ),
            }
        }
    }
}

/// The string literals of awk (or python/perl) text with the non-blank text before each:
/// (preceding text, literal content). `quotes` are the quote characters the language uses.
fn literals(text: &str, quotes: &[char]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut before = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if !quotes.contains(&c) {
            before.push(c);
            continue;
        }
        let mut lit = String::new();
        while let Some(d) = chars.next() {
            match d {
                '\\' => match chars.next() {
                    // `\n`, `\t`, …: a control character, which ends a path word.
                    Some(e) if e.is_ascii_alphanumeric() => lit.push(' '),
                    Some(e) => lit.push(e),
                    None => {}
                },
                d if d == c => break,
                d => lit.push(d),
            }
        }
        out.push((before.trim_end().to_string(), lit));
        before.clear();
    }
    out
}

/// Words of `text` that are absolute or home-relative paths, or relative ones that climb
/// (`../x`). Open modes and redirections glued to a path (`>/x`, `+</x`) are split off.
fn path_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| {
        c.is_whitespace() || matches!(c, ';' | '|' | '&' | '(' | ')' | '<' | '>' | '=' | ',' | '+')
    })
    .filter(|w| {
        (w.starts_with('/') && w.len() > 1)
            || w.starts_with("~/")
            || *w == "~"
            || *w == ".."
            || w.starts_with("../")
    })
}

/// What an awk program names: commands it runs (`system("…")`, `print | "…"`, and
/// `"…" | getline`), files it writes (`print > "…"`, `>> "…"`) or reads (`getline < "…"`).
pub(super) fn awk_names(program: &str) -> Vec<Named> {
    let mut out = Vec::new();
    for (before, lit) in literals(program, &['"']) {
        if before.ends_with("system(") || before.ends_with('|') {
            out.push(Named::Command(lit));
        } else if before.ends_with('>') {
            out.push(Named::Path {
                text: lit,
                role: Role::Write,
            });
        } else if before.ends_with('<') {
            out.push(Named::Path {
                text: lit,
                role: Role::Read,
            });
        }
        // Any other literal is text (`print $1 "/bin"`, `$6 ~ "/home"`), not a path.
    }
    out
}

/// What inline python or perl code names: each path word in its string literals that is
/// absolute, home-relative or climbs (`../`). The code may read, write or run it, or only
/// print it (`print("/api/v1")`); the policy cannot tell which, so each one outside the
/// workspace is a question for a person (ask), not a denial.
pub(super) fn inline_code_names(code: &str) -> Vec<Named> {
    literals(code, &['"', '\''])
        .into_iter()
        .flat_map(|(_, lit)| {
            path_words(&lit)
                .map(|w| Named::Mention(w.to_string()))
                .collect::<Vec<_>>()
        })
        .collect()
}

const PATTERN_SPACE: &str = "runs its pattern space";

/// What a sed script names: files of `w`/`W` (written) and `r`/`R` (read) commands and of
/// the `w` flag of `s`, and the commands of `e`.
pub(super) fn sed_names(script: &str) -> Vec<Named> {
    let mut out = Vec::new();
    for line in script.lines() {
        let mut rest = line;
        while !rest.trim().is_empty() {
            let cmd = skip_address(rest.trim_start());
            let mut chars = cmd.chars();
            let Some(c) = chars.next() else { break };
            let arg = chars.as_str();
            match c {
                // The file name (or command) runs to the end of the line.
                'w' | 'W' | 'r' | 'R' => {
                    let role = if matches!(c, 'w' | 'W') {
                        Role::Write
                    } else {
                        Role::Read
                    };
                    out.push(Named::Path {
                        text: arg.trim().to_string(),
                        role,
                    });
                    break;
                }
                'e' => {
                    let cmd = arg.trim();
                    out.push(if cmd.is_empty() {
                        Named::RunsUnknown(PATTERN_SPACE)
                    } else {
                        Named::Command(cmd.to_string())
                    });
                    break;
                }
                's' | 'y' => {
                    let (flags, after) = substitution_flags(arg);
                    // Flags end at `w`, whose file name runs to the end of the line.
                    if c == 's' && flags.split('w').next().unwrap_or("").contains('e') {
                        // The pattern space, as rewritten, runs as a command: known only at
                        // run time.
                        out.push(Named::RunsUnknown(PATTERN_SPACE));
                    }
                    if c == 's'
                        && let Some(pos) = flags.find('w')
                    {
                        out.push(Named::Path {
                            text: flags[pos + 1..].trim().to_string(),
                            role: Role::Write,
                        });
                        break;
                    }
                    rest = after;
                }
                _ => {
                    rest = match cmd.find([';', '}']) {
                        Some(i) => &cmd[i + 1..],
                        None => "",
                    };
                }
            }
            rest = rest.trim_start().trim_start_matches([';', '}']);
        }
    }
    out.retain(|n| !matches!(n, Named::Path { text, .. } if text.is_empty()));
    out
}

/// `text` after a sed address (`12`, `$`, `/re/`, `\%re%`, with `,` ranges and `!`).
fn skip_address(text: &str) -> &str {
    let mut t = text;
    loop {
        t = t.trim_start();
        if let Some(r) = t.strip_prefix('/') {
            t = after_delimited(r, '/');
        } else if let Some(r) = t.strip_prefix('\\') {
            let mut cs = r.chars();
            match cs.next() {
                Some(d) => t = after_delimited(cs.as_str(), d),
                None => return "",
            }
        } else if t.starts_with(|c: char| c.is_ascii_digit() || c == '$') {
            t = t.trim_start_matches(|c: char| c.is_ascii_digit() || c == '$' || c == '~');
        } else {
            break;
        }
        t = t.trim_start();
        if let Some(r) = t.strip_prefix(',') {
            t = r;
            continue;
        }
        break;
    }
    t.trim_start().trim_start_matches('!').trim_start()
}

/// The text after the closing `delim` of a delimited part (escapes skipped).
fn after_delimited(text: &str, delim: char) -> &str {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == delim => return &text[i + c.len_utf8()..],
            _ => {}
        }
    }
    ""
}

/// For `s` (or `y`) given the text after the command letter: (its flags, the text after
/// the command).
fn substitution_flags(arg: &str) -> (&str, &str) {
    let mut cs = arg.chars();
    let Some(delim) = cs.next() else {
        return ("", "");
    };
    let after = after_delimited(after_delimited(cs.as_str(), delim), delim);
    let end = after.find([';', '}', '\n']).unwrap_or(after.len());
    (&after[..end], &after[end..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str, role: Role) -> Named {
        Named::Path {
            text: text.into(),
            role,
        }
    }

    #[test]
    fn awk_literals() {
        assert_eq!(
            awk_names(r#"BEGIN{system("rm -rf /x")}"#),
            vec![Named::Command("rm -rf /x".into())]
        );
        assert_eq!(
            awk_names(r#"{print > "/etc/passwd"; print $1 >> "out"}"#),
            vec![path("/etc/passwd", Role::Write), path("out", Role::Write)]
        );
        assert_eq!(
            awk_names(r#"{print | "sort > /tmp/s"}"#),
            vec![Named::Command("sort > /tmp/s".into())]
        );
        assert_eq!(
            awk_names(r#"BEGIN{while ((getline l < "/etc/hosts") > 0) n++}"#),
            vec![path("/etc/hosts", Role::Read)]
        );
        // Regexes, field references and text are not paths.
        assert!(awk_names(r#"/error/ {print $1, "/"}"#).is_empty());
        assert!(awk_names(r#"{print $1 "/bin"}"#).is_empty());
        assert!(awk_names(r#"$6 ~ "/home""#).is_empty());
        assert!(awk_names("$0 ~ /^a\\/b/ {n++}").is_empty());
    }

    #[test]
    fn sed_commands() {
        assert_eq!(sed_names("w /tmp/out"), vec![path("/tmp/out", Role::Write)]);
        assert_eq!(
            sed_names("/re/w /tmp/out"),
            vec![path("/tmp/out", Role::Write)]
        );
        assert_eq!(
            sed_names("s/a/b/w /etc/x"),
            vec![path("/etc/x", Role::Write)]
        );
        assert_eq!(
            sed_names("1r /etc/hosts"),
            vec![path("/etc/hosts", Role::Read)]
        );
        assert_eq!(
            sed_names("e rm -rf /x"),
            vec![Named::Command("rm -rf /x".into())]
        );
        assert_eq!(
            sed_names("s/a/b/g; 3,$d; /x/,/y/{p}; e ls"),
            vec![Named::Command("ls".into())]
        );
        assert_eq!(
            sed_names("s/.*/touch \\/tmp\\/x/e"),
            vec![Named::RunsUnknown(PATTERN_SPACE)]
        );
        // Addresses and substitutions that look like paths name nothing.
        assert!(sed_names("/usr/bin/d").is_empty());
        assert!(sed_names("s/\\/usr\\/local/\\/opt/g").is_empty());
        assert!(sed_names("s|/usr/local|/opt|g").is_empty());
    }

    #[test]
    fn inline_code() {
        let m = |t: &str| Named::Mention(t.into());
        assert_eq!(
            inline_code_names(r#"import os; os.remove("/etc/hosts")"#),
            vec![m("/etc/hosts")]
        );
        assert_eq!(
            inline_code_names(r#"unlink '/etc/hosts'"#),
            vec![m("/etc/hosts")]
        );
        assert_eq!(
            inline_code_names(r#"import os; os.system('rm -rf ~/x')"#),
            vec![m("~/x")]
        );
        assert_eq!(
            inline_code_names(r#"open(F, ">/tmp/x")"#),
            vec![m("/tmp/x")]
        );
        assert_eq!(
            inline_code_names(r#"open("../../../tmp/x", "w")"#),
            vec![m("../../../tmp/x")]
        );
        assert!(inline_code_names("print(1 / 2)").is_empty());
        assert!(inline_code_names(r#"open("data/x.txt").read()"#).is_empty());
    }
}
