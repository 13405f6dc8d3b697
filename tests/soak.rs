//! The soak (scripts/soak.py) at CI size: agents on forks, half in sessions, running
//! writes, deletes, git commits and rollbacks for a bounded time. Afterwards every fork
//! holds exactly what its agents' commands left, everything merges into main, and no
//! mount, avfs process or temp directory is left. The full soak is
//! `scripts/soak.py --agents 8 --forks 8 --seconds 600`.

mod mount_support;

#[test]
fn agents_on_forks_lose_nothing_and_leave_nothing_behind() {
    assert!(
        mount_support::require_fuse(),
        "the soak mounts: FUSE is required"
    );
    let out = std::process::Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/soak.py"))
        .args([
            "--agents",
            "4",
            "--forks",
            "4",
            "--seconds",
            "20",
            "--seed",
            "7",
        ])
        .env("AVFS_BIN", env!("CARGO_BIN_EXE_avfs"))
        .output()
        .expect("run the soak");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("failed 0"), "{stdout}");
    println!("{stdout}");
}
