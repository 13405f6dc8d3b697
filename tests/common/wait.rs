//! Waiting for something to happen instead of sleeping a guessed time. The deadline only
//! bounds a hang; it asserts nothing about speed.

use std::time::{Duration, Instant};

/// How long a condition may take before the test gives up as hung.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Poll `check` until it returns `Some`, and return that; panic naming `what` if it has
/// not after `DEADLINE`.
pub fn until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "still waiting after {DEADLINE:?} for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Poll until `check` holds (see `until`).
pub fn until_true(what: &str, mut check: impl FnMut() -> bool) {
    until(what, || check().then_some(()))
}

/// Whether process `pid` is gone (reaped, or a zombie no longer running).
pub fn process_gone(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
}

/// Host pids of running processes whose command line holds `marker` (a pid a sandboxed
/// command sees is its own namespace's, so tests find its processes by what they run).
pub fn processes_running(marker: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (cmd.contains(marker) && !process_gone(&pid.to_string())).then(|| pid.to_string())
        })
        .collect()
}
