//! The soak (scripts/soak.py) at CI size: agents on forks, half in sessions, running
//! writes, deletes, git commits and rollbacks for a bounded time. Afterwards every fork
//! holds exactly what its agents' commands left, everything merges into main, and no
//! mount, avfs process or temp directory is left. The full soak is
//! `scripts/soak.py --agents 8 --forks 8 --seconds 600`.

mod common;

#[test]
fn agents_on_forks_lose_nothing_and_leave_nothing_behind() {
    let Some(out) = common::mount::run_script(
        "python3",
        "soak.py",
        &[
            "--agents",
            "4",
            "--forks",
            "4",
            "--seconds",
            "20",
            "--seed",
            "7",
        ],
    ) else {
        return;
    };
    assert!(out.contains("failed 0"), "{out}");
}
