//! The crash-injection campaign (scripts/crash_campaign.sh) at CI size: random vault
//! operations killed with -9 at random moments (write, import, export, checkpoint, restore,
//! undo, redo, gc, compact, merge, a proxied command, a mount's fsynced writes); after every
//! kill the vault checks clean and every acknowledged change is in it and its history.
//! The full campaign (500 iterations) is `scripts/crash_campaign.sh 500`.

mod common;

#[test]
fn kill_9_at_random_moments_loses_nothing_acknowledged() {
    let Some(out) = common::mount::run_script("bash", "crash_campaign.sh", &["60", "4242"]) else {
        return;
    };
    assert!(out.contains("60 iterations"), "{out}");
}
