//! A test never returns early and counts as passed. A tool or facility it needs that is
//! missing fails it, unless the opt-out variable named for that facility is `1`: then the
//! test prints a `SKIP` line (past the harness's output capture, so the run's log shows it
//! and `.ci/run` counts it) and its caller returns.

use std::io::Write;
use std::path::Path;

/// True when `available`. Otherwise panics, or, with `opt_out=1` set on purpose, prints
/// `SKIP <test>: <what> (<opt_out>=1)` and returns false.
pub fn require(what: &str, available: bool, opt_out: &str) -> bool {
    if available {
        return true;
    }
    if std::env::var(opt_out).as_deref() == Ok("1") {
        let thread = std::thread::current();
        let test = thread.name().unwrap_or("?");
        // Straight to the process's stderr: the harness captures only eprintln!.
        let _ = writeln!(std::io::stderr(), "SKIP {test}: {what} ({opt_out}=1)");
        return false;
    }
    panic!("{what}: this test cannot run (set {opt_out}=1 to skip it on purpose)");
}

/// /dev/fuse, for every test that mounts (opt-out: AVFS_CI_ALLOW_NO_FUSE=1).
pub fn require_fuse() -> bool {
    require(
        "/dev/fuse is missing",
        Path::new("/dev/fuse").exists(),
        "AVFS_CI_ALLOW_NO_FUSE",
    )
}

/// Root, for tests that mount a tmpfs or make network namespaces (opt-out:
/// AVFS_CI_ALLOW_NOT_ROOT=1).
pub fn require_root() -> bool {
    require(
        "not running as root",
        rustix::process::geteuid().is_root(),
        "AVFS_CI_ALLOW_NOT_ROOT",
    )
}

/// A program on PATH that answers `--version` (opt-out: AVFS_CI_ALLOW_NO_TOOLS=1).
pub fn require_tool(program: &str) -> bool {
    let there = std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    require(
        &format!("`{program}` is not installed"),
        there,
        "AVFS_CI_ALLOW_NO_TOOLS",
    )
}

/// What the execution sandbox needs: root, or user namespaces for a non-root user
/// (opt-out: AVFS_CI_ALLOW_NO_SANDBOX=1).
pub fn require_sandbox() -> bool {
    let root = rustix::process::geteuid().is_root();
    let userns = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .is_ok_and(|v| v.trim() != "0");
    require(
        "neither root nor user namespaces: no execution sandbox",
        root || userns,
        "AVFS_CI_ALLOW_NO_SANDBOX",
    )
}

/// The engine the binary under test makes new vaults in: `AVFS_ENGINE`, else sqlite. CI
/// runs the suites once per engine.
pub fn engine() -> String {
    std::env::var("AVFS_ENGINE").unwrap_or_else(|_| "sqlite".into())
}

/// For a test of one engine's own format (SQLite's tables, its page compaction): true when
/// the suite runs in that engine; otherwise prints `SKIP <test>: …` and returns false, so
/// the run shows the test did not apply.
pub fn only_engine(name: &str) -> bool {
    let engine = engine();
    if engine == name {
        return true;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let _ = writeln!(
        std::io::stderr(),
        "SKIP {test}: tests the {name} format itself (AVFS_ENGINE={engine})"
    );
    false
}

/// The test PostgreSQL server (`AVFS_TEST_POSTGRES_URL`; scripts/test.sh and `.ci/run`
/// start one with scripts/postgres.sh). A build with the `postgres` feature fails a test
/// that needs it when it is not set, unless `AVFS_TEST_NO_POSTGRES=1` turns that into a
/// SKIP line; a build without the feature prints SKIP.
pub fn postgres_url() -> Option<String> {
    if !cfg!(feature = "postgres") {
        let thread = std::thread::current();
        let _ = writeln!(
            std::io::stderr(),
            "SKIP {}: built without the postgres feature",
            thread.name().unwrap_or("?")
        );
        return None;
    }
    let url = std::env::var("AVFS_TEST_POSTGRES_URL").unwrap_or_default();
    require(
        "AVFS_TEST_POSTGRES_URL is not set (scripts/postgres.sh start DIR prints one)",
        !url.is_empty(),
        "AVFS_TEST_NO_POSTGRES",
    )
    .then_some(url)
}

/// A database of its own on the test server for the `$AVFS_HOME` at `home`, made on first
/// use: vault names are unique per database, and every test makes its own `demo`. Its URL
/// goes to the binary as `AVFS_POSTGRES_URL` when the suite runs with
/// `AVFS_ENGINE=postgres`; `None` in the other engines' runs.
pub fn postgres_db_for(home: &Path) -> Option<String> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    if engine() != "postgres" {
        return None;
    }
    static MADE: OnceLock<Mutex<HashMap<std::path::PathBuf, String>>> = OnceLock::new();
    let mut made = MADE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(url) = made.get(home) {
        return Some(url.clone());
    }
    let base = std::env::var("AVFS_TEST_POSTGRES_URL")
        .expect("AVFS_ENGINE=postgres needs AVFS_TEST_POSTGRES_URL");
    let name = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        home.hash(&mut h);
        format!("t_{}_{:016x}", std::process::id(), h.finish())
    };
    let out = std::process::Command::new("psql")
        .args([&base, "-qAtc", &format!("CREATE DATABASE {name}")])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "creating test database {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (server, _) = base.rsplit_once('/').expect("a URL with a database");
    let url = format!("{server}/{name}");
    made.insert(home.to_path_buf(), url.clone());
    Some(url)
}
