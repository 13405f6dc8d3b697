//! The vault's connections: the runtime the `tokio-postgres` clients run on, connecting
//! (with bounds on waiting), the prepared statements of a connection, and the idle
//! connections kept per vault for the next open in the same process.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use postgres::{Client, NoTls};
use tokio_postgres::Statement;

use super::pg_error;
use crate::error::{Error, Result};
use crate::store::lock::lock;

/// Prepared statements of one connection, on one vault's schema.
pub(super) struct Statements {
    pub(super) get: Statement,
    /// Rows of one table by a list of keys.
    pub(super) get_many: Statement,
    /// Which of a list of keys one table holds.
    pub(super) keys: Statement,
    pub(super) from: Statement,
    pub(super) range: Statement,
    pub(super) from_rev: Statement,
    pub(super) range_rev: Statement,
    pub(super) upsert: Statement,
    pub(super) delete: Statement,
    /// A writer's first statement: the vault's lock.
    pub(super) lock: Statement,
    /// Its second: whether the vault was retired. (Not one statement with the lock: a
    /// statement's snapshot is taken before it waits for the lock, and would miss the
    /// commit that retired the vault while it waited.)
    pub(super) retired: Statement,
    /// A speculative write's guard (`known::guard_sql`): rows, and a range's count with
    /// an end and without.
    pub(super) guard_rows: Statement,
    pub(super) guard_range: Statement,
    pub(super) guard_from: Statement,
}

pub(super) struct Conn {
    pub(super) client: tokio_postgres::Client,
    pub(super) st: Statements,
    /// `STALLS` when it was made.
    born: u64,
}

/// The runtime the vault connections run on: one worker, which reads each connection's
/// answers as they come (so a connection the server dropped is seen as closed at once).
pub(super) fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RT: std::sync::OnceLock<std::result::Result<tokio::runtime::Runtime, String>> =
        std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("avfs-postgres")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| Error::Storage(format!("starting the PostgreSQL client's runtime: {e}")))
}

/// How long one request to the server may go unanswered, unless `AVFS_SERVER_TIMEOUT_SECS`
/// says otherwise. A stopped server process (or a host that stopped answering while its
/// TCP stack still does) is an error after it, not a hang.
const DEFAULT_WAIT: Duration = Duration::from_secs(90);
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// `AVFS_SERVER_TIMEOUT_SECS` (seconds, fractions allowed, from 1 to an hour), else 90 s.
pub(super) fn server_wait() -> Result<Duration> {
    crate::store::seconds_from_env("AVFS_SERVER_TIMEOUT_SECS", DEFAULT_WAIT, MAX_WAIT)
}

/// The wait in force (a bad setting was refused at connect, before any request).
fn wait() -> Duration {
    server_wait().unwrap_or(DEFAULT_WAIT)
}

/// How long a writer waits for the vault's lock: two thirds of the server wait, so a lock
/// wait ends in the server's own answer rather than in silence.
pub(super) fn lock_wait() -> Duration {
    wait() * 2 / 3
}

/// Requests this process gave up on after the server wait. A connection made before the
/// last of them is not used again: what the server made of its last request is unknown.
static STALLS: AtomicU64 = AtomicU64::new(0);

/// Wait for `f` on the connections' runtime, for the server wait at most.
pub(super) fn within<F: std::future::Future>(f: F) -> Result<F::Output> {
    let limit = wait();
    runtime()?
        .block_on(async move { tokio::time::timeout(limit, f).await })
        .map_err(|_| silent(limit, "", false))
}

/// The error for a server that did not answer within `limit` (`while`: what it was doing,
/// if said), counted in `STALLS`.
fn silent(limit: Duration, while_: &str, maybe_applied: bool) -> Error {
    STALLS.fetch_add(1, Ordering::SeqCst);
    Error::StoreUnavailable {
        reason: format!(
            "the PostgreSQL server did not answer within {} s (AVFS_SERVER_TIMEOUT_SECS){while_}",
            limit.as_secs_f64()
        ),
        maybe_applied,
        writes_kept: 0,
    }
}

/// Run `f`, the vault's administration on a blocking client (which has no wait of its
/// own), on a thread of its own for the server wait at most. After it, `store_unavailable`
/// saying `what` may have been done (the server may yet act on what it was sent), and `f`
/// is left to end on its own.
///
/// `f` is told, through the flag it gets, once it was given up on: it then undoes what it
/// can instead of finishing (a vault file written after the caller heard of a failure).
pub(super) fn bounded<T: Send + 'static>(
    what: &str,
    f: impl FnOnce(&AtomicBool) -> Result<T> + Send + 'static,
) -> Result<T> {
    let limit = server_wait()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let gave_up = std::sync::Arc::new(AtomicBool::new(false));
    let told = gave_up.clone();
    std::thread::Builder::new()
        .name("avfs-postgres-admin".into())
        .spawn(move || {
            let _ = tx.send(f(&told));
        })
        .map_err(|e| Error::Storage(format!("starting a thread for {what}: {e}")))?;
    rx.recv_timeout(limit).unwrap_or_else(|_| {
        gave_up.store(true, Ordering::SeqCst);
        Err(silent(limit, &format!(" while {what}"), true))
    })
}

/// `within`, for a request's answer: its error as ours.
pub(super) fn block<T>(
    f: impl std::future::Future<Output = std::result::Result<T, postgres::Error>>,
) -> Result<T> {
    within(f)?.map_err(pg_error)
}

/// Connect, with bounds on waiting: 10 s to connect and TCP keepalives unless the URL says
/// otherwise, the server wait for every request, and two thirds of it for the vault's lock
/// (so a writer on a host that stopped answering holds no one up for ever).
pub(super) fn connect(url: &str) -> Result<Client> {
    let config = postgres::Config::from(config(url)?);
    config.connect(NoTls).map_err(connect_error)
}

/// A connection for the vault's reads and writes, on the runtime.
pub(super) fn connect_async(url: &str) -> Result<tokio_postgres::Client> {
    let config = config(url)?;
    let rt = runtime()?;
    let (client, connection) = within(config.connect(NoTls))?.map_err(connect_error)?;
    // Its failure shows through the client (closed, and the error of the next request).
    rt.spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

fn connect_error(e: postgres::Error) -> Error {
    match pg_error(e) {
        Error::Storage(reason) => Error::StoreUnavailable {
            reason,
            maybe_applied: false,
            writes_kept: 0,
        },
        other => other,
    }
}

fn config(url: &str) -> Result<tokio_postgres::Config> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| Error::invalid(format!("the PostgreSQL URL does not parse: {e}")))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(10));
    }
    config
        .keepalives(true)
        .keepalives_idle(std::time::Duration::from_secs(30));
    let lock_ms = server_wait()?.as_millis() * 2 / 3;
    let options = config.get_options().unwrap_or_default().to_string();
    config.options(format!("{options} -c lock_timeout={lock_ms}ms").trim());
    if config.get_application_name().is_none() {
        config.application_name("avfs");
    }
    Ok(config)
}

pub(super) fn quoted(schema: &str) -> String {
    format!("\"{}\"", schema.replace('"', "\"\""))
}

impl Conn {
    pub(super) fn open(url: &str, schema: &str) -> Result<Conn> {
        Conn::prepared(connect_async(url)?, schema)
    }

    pub(super) fn prepared(client: tokio_postgres::Client, schema: &str) -> Result<Conn> {
        let st = within(Conn::statements(&client, schema))??;
        Ok(Conn::new(client, st))
    }

    pub(super) fn new(client: tokio_postgres::Client, st: Statements) -> Conn {
        Conn {
            client,
            st,
            born: STALLS.load(Ordering::SeqCst),
        }
    }

    /// Open, and not made before a request this process gave up on.
    pub(super) fn usable(&self) -> bool {
        !self.client.is_closed() && self.born == STALLS.load(Ordering::SeqCst)
    }

    /// Prepare the vault's statements on `client`: all in one round trip.
    pub(super) async fn statements(
        client: &tokio_postgres::Client,
        schema: &str,
    ) -> Result<Statements> {
        let kv = format!("{}.kv", quoted(schema));
        let select = format!("SELECT k, v FROM {kv} WHERE t = $1 AND k >= $2");
        let sql = [
            format!("SELECT v FROM {kv} WHERE t = $1 AND k = $2"),
            format!("SELECT k, v FROM {kv} WHERE t = $1 AND k = ANY($2)"),
            format!("SELECT k FROM {kv} WHERE t = $1 AND k = ANY($2)"),
            format!("{select} ORDER BY k LIMIT $3"),
            format!("{select} AND k < $3 ORDER BY k LIMIT $4"),
            format!("{select} ORDER BY k DESC LIMIT $3"),
            format!("{select} AND k < $3 ORDER BY k DESC LIMIT $4"),
            format!(
                "INSERT INTO {kv} (t, k, v) SELECT * FROM unnest($1::int2[], $2::bytea[], $3::bytea[]) \
                 ON CONFLICT (t, k) DO UPDATE SET v = EXCLUDED.v"
            ),
            format!(
                "DELETE FROM {kv} WHERE (t, k) IN (SELECT * FROM unnest($1::int2[], $2::bytea[]))"
            ),
            "SELECT pg_advisory_xact_lock($1)".into(),
            format!("SELECT EXISTS (SELECT 1 FROM {kv} WHERE t = $1 AND k = $2)"),
        ];
        let sql: Vec<String> = sql
            .into_iter()
            .chain(super::known::guard_sql(&kv))
            .collect();
        let prepared = futures::future::try_join_all(sql.iter().map(|q| client.prepare(q)))
            .await
            .map_err(pg_error)?;
        if prepared.len() != sql.len() {
            return Err(Error::Storage(
                "PostgreSQL prepared a different number of statements".into(),
            ));
        }
        // In the order of `sql`.
        let mut next = prepared.into_iter();
        let mut st = || next.next().expect("counted above");
        Ok(Statements {
            get: st(),
            get_many: st(),
            keys: st(),
            from: st(),
            range: st(),
            from_rev: st(),
            range_rev: st(),
            upsert: st(),
            delete: st(),
            lock: st(),
            retired: st(),
            guard_rows: st(),
            guard_range: st(),
            guard_from: st(),
        })
    }
}

/// Idle connections to each vault: a vault opened again in the same process (a command
/// that looked a fork up in it, then opens it) reuses them instead of connecting anew.
type Idle = std::collections::HashMap<(String, String), Vec<Conn>>;

pub(super) fn idle() -> &'static Mutex<Idle> {
    static IDLE: std::sync::OnceLock<Mutex<Idle>> = std::sync::OnceLock::new();
    IDLE.get_or_init(Mutex::default)
}

/// Connections kept idle per vault: as many as this process read with at once, up to this.
const IDLE_MAX: usize = 16;

/// An idle connection to vault `pool` the server has not dropped (the runtime sees a
/// dropped one closed at once: a server restart drops them all, and all are let go).
pub(super) fn take_idle(pool: &(String, String)) -> Option<Conn> {
    let mut idle = lock(idle());
    let conns = idle.get_mut(pool)?;
    conns.retain(Conn::usable);
    conns.pop()
}

pub(super) fn put_idle(pool: &(String, String), conn: Conn) {
    if !conn.usable() {
        return;
    }
    let mut idle = lock(idle());
    let conns = idle.entry(pool.clone()).or_default();
    if conns.len() < IDLE_MAX {
        conns.push(conn);
    }
}
