//! The crash-injection campaign (scripts/crash_campaign.sh) at CI size: random vault
//! operations killed with -9 at random moments (write, import, export, checkpoint, restore,
//! undo, redo, gc, compact, merge, a proxied command, a mount's fsynced writes); after every
//! kill the vault checks clean and every acknowledged change is in it and its history.
//! The full campaign (500 iterations) is `scripts/crash_campaign.sh 500`.

mod mount_support;

#[test]
fn kill_9_at_random_moments_loses_nothing_acknowledged() {
    assert!(
        mount_support::require_fuse(),
        "the campaign mounts: FUSE is required"
    );
    let out = std::process::Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/crash_campaign.sh"
        ))
        .args(["60", "4242"])
        .env("AVFS_BIN", env!("CARGO_BIN_EXE_avfs"))
        .output()
        .expect("run the campaign");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("60 iterations"), "{stdout}");
    println!("{stdout}");
}
