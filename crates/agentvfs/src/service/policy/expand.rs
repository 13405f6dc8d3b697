//! Word expansion: quotes, `~`, `$HOME`, known variables and parameter expressions, with the
//! substitutions inside a word classified recursively; and scanning loose text for them.

use brush_parser::ParserOptions;
use brush_parser::word::{Parameter, ParameterExpr, TildeExpr, WordPiece, WordPieceWithSource};

use super::Category;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Scope, Stdin, expand_braces, looks_like_path};

struct WordBuf {
    text: String,
    dynamic: bool,
    networked: bool,
}

impl Analyzer<'_> {
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

    pub(super) fn scan_heredoc(&mut self, text: &str, scope: &Scope) {
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
}
