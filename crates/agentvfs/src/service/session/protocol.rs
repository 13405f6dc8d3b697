//! The session protocol: one JSON line per request from a client, answered by the daemon
//! with one JSON line (a streamed command's output first, as `Output` lines).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::SessionRecord;
use crate::error::{Error, Result};
use crate::service::policy::CommandRequest;
use crate::service::proxy::{Envelope, ExecOptions};
use crate::service::runner::{Event, Observer};

/// What a client asks a session daemon.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Exec {
        argv: Option<Vec<String>>,
        shell: Option<String>,
        options: Box<ExecOptions>,
        /// A policy file for this command instead of the session's (an absolute path).
        #[serde(default)]
        policy: Option<PathBuf>,
        /// Send the command's output as it comes (`Response::Output` lines), before the
        /// envelope.
        #[serde(default)]
        stream: bool,
    },
    Ping,
    Stop,
}

/// What the daemon answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    Envelope(Box<Envelope>),
    /// One piece of a streamed command's output: `started`, `stdout` or `stderr`, and the
    /// bytes (base64).
    Output {
        event: String,
        data: String,
    },
    Pong {
        pid: u32,
    },
    Stopping,
    Error {
        kind: String,
        message: String,
        details: Value,
        exit_code: i32,
    },
}

/// Send one request to a session daemon and wait for its answer.
pub fn call(rec: &SessionRecord, req: &Request) -> Result<Response> {
    call_observed(rec, req, None)
}

/// [`call`], handing each `Output` line to `observer` until the answer comes.
fn call_observed(
    rec: &SessionRecord,
    req: &Request,
    observer: Option<&Observer>,
) -> Result<Response> {
    let failed = |reason: String| Error::SessionFailed {
        name: rec.name.clone(),
        reason,
    };
    let mut stream = UnixStream::connect(&rec.socket)
        .map_err(|e| failed(format!("cannot reach the daemon (pid {}): {e}", rec.pid)))?;
    let mut line = serde_json::to_vec(req).map_err(|e| Error::Storage(e.to_string()))?;
    line.push(b'\n');
    stream
        .write_all(&line)
        .map_err(|e| failed(format!("sending the request: {e}")))?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut answer = String::new();
        reader
            .read_line(&mut answer)
            .map_err(|e| failed(format!("reading the answer: {e}")))?;
        if answer.is_empty() {
            return Err(failed("the daemon ended without answering".into()));
        }
        let response: Response =
            serde_json::from_str(&answer).map_err(|e| failed(format!("unreadable answer: {e}")))?;
        let Response::Output { event, data } = &response else {
            return Ok(response);
        };
        let Some(see) = observer else { continue };
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| failed(format!("unreadable output: {e}")))?;
        see(match event.as_str() {
            "started" => Event::Started,
            "stderr" => Event::Stderr(&bytes),
            _ => Event::Stdout(&bytes),
        });
    }
}

/// Run one command in the session (under `policy` instead of the session's, if given).
pub fn exec(
    rec: &SessionRecord,
    req: CommandRequest,
    options: ExecOptions,
    policy: Option<&Path>,
    observer: Option<Observer>,
) -> Result<Envelope> {
    let policy = match policy {
        Some(p) => Some(
            p.canonicalize()
                .map_err(|e| Error::io("reading policy", p, e))?,
        ),
        None => None,
    };
    let request = Request::Exec {
        argv: req.argv,
        shell: req.shell,
        options: Box::new(options),
        policy,
        stream: observer.is_some(),
    };
    match call_observed(rec, &request, observer.as_ref())? {
        Response::Envelope(e) => Ok(*e),
        Response::Error {
            kind,
            message,
            details,
            exit_code,
        } => Err(Error::forwarded(&kind, message, details, exit_code)),
        other => Err(Error::SessionFailed {
            name: rec.name.clone(),
            reason: format!("unexpected answer {other:?}"),
        }),
    }
}

/// An observer that sends each piece of a command's output to the client as an `Output`
/// line. A client that stops reading only loses its stream (the write times out).
pub(super) fn forward_output(stream: &UnixStream) -> Observer {
    let sink = std::sync::Mutex::new(stream.try_clone().ok());
    Arc::new(move |ev: Event<'_>| {
        use base64::Engine;
        let (event, bytes): (&str, &[u8]) = match ev {
            Event::Started => ("started", &[]),
            Event::Stdout(b) => ("stdout", b),
            Event::Stderr(b) => ("stderr", b),
        };
        let response = Response::Output {
            event: event.to_string(),
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
        };
        let mut line = serde_json::to_vec(&response).unwrap_or_default();
        line.push(b'\n');
        let mut sink = sink.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = sink.as_mut()
            && s.write_all(&line).is_err()
        {
            *sink = None;
        }
    })
}

pub(super) fn error_response(e: &Error) -> Response {
    Response::Error {
        kind: e.kind().to_string(),
        message: e.to_string(),
        details: e.details(),
        exit_code: e.exit_code(),
    }
}
