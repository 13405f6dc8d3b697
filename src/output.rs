//! Rendering: one JSON document per run under `--json` (success or failure), concise text
//! otherwise, and the documented exit codes.

use std::io::Write;

use agentvfs::Error;
use agentvfs::error::exit;
use serde::Serialize;
use serde_json::{Value, json};

/// What a command produced: the JSON `data` and its human rendering.
pub struct Reply {
    pub data: Value,
    pub human: Human,
    /// Exit with this code even on success (proxy exec mirrors the child's code).
    pub exit_code: Option<i32>,
}

pub enum Human {
    Text(String),
    /// Raw bytes for stdout (`cat`), binary-safe.
    Bytes(Vec<u8>),
}

impl Reply {
    pub fn new<T: Serialize>(data: &T, human: impl Into<String>) -> Reply {
        Reply {
            data: json_data(data),
            human: Human::Text(human.into()),
            exit_code: None,
        }
    }

    pub fn bytes<T: Serialize>(data: &T, bytes: Vec<u8>) -> Reply {
        Reply {
            data: json_data(data),
            human: Human::Bytes(bytes),
            exit_code: None,
        }
    }
}

/// A command's `data`: its output, with each time field also as an RFC 3339 string.
pub fn json_data<T: Serialize>(data: &T) -> Value {
    let mut v = serde_json::to_value(data).unwrap_or(Value::Null);
    agentvfs::schema::add_iso_times(&mut v);
    v
}

/// Set when `proxy exec --stream --json` prints NDJSON events: the closing document then
/// says it is the `finished` event.
static FINISHED_EVENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn mark_finished_event() {
    FINISHED_EVENT.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn finished_event(mut doc: Value) -> Value {
    if FINISHED_EVENT.load(std::sync::atomic::Ordering::Relaxed)
        && let Value::Object(map) = &mut doc
    {
        map.insert("event".into(), Value::String("finished".into()));
    }
    doc
}

/// Print the outcome and return the process exit code.
pub fn finish(json_mode: bool, command: &str, result: Result<Reply, Error>) -> i32 {
    let mut stdout = std::io::stdout().lock();
    match result {
        Ok(reply) => {
            let code = reply.exit_code.unwrap_or(exit::OK);
            if json_mode {
                let doc =
                    finished_event(json!({ "ok": true, "command": command, "data": reply.data }));
                let _ = writeln!(stdout, "{doc}");
            } else {
                match reply.human {
                    Human::Text(t) if t.is_empty() => {}
                    Human::Text(t) => {
                        let _ = writeln!(stdout, "{}", t.trim_end_matches('\n'));
                    }
                    Human::Bytes(b) => {
                        let _ = stdout.write_all(&b);
                    }
                }
            }
            code
        }
        Err(e) => {
            if json_mode {
                let doc = finished_event(error_doc(command, e.kind(), &e.to_string(), e.details()));
                let _ = writeln!(stdout, "{doc}");
            } else {
                eprintln!("error: {e}");
            }
            e.exit_code()
        }
    }
}

pub fn error_doc(command: &str, kind: &str, message: &str, details: Value) -> Value {
    json!({
        "ok": false,
        "command": command,
        "error": { "kind": kind, "message": message, "details": details }
    })
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push('\n');
    }
    out
}

/// Free text (a command, a description) as one table cell: control characters shown as
/// escapes (`\n`, `\t`, `\x1b`), and at most `max` characters, cut with `…`. A multi-line
/// shell script then stays on its row.
pub fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A file name for a terminal, quoted as GNU ls quotes one with control characters:
/// `$'new\nline'`, so a newline or tab in a name cannot break a listing into lines or
/// columns. Names without control characters are shown as they are.
pub fn quote_name(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = String::from("$'");
    for c in name.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\x{b:02x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    std::borrow::Cow::Owned(out)
}

/// Nanoseconds since the epoch as a local-agnostic UTC timestamp.
pub fn time(ns: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Bytes in human units.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
