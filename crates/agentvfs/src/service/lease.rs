//! Keeping a fork's write lease while a long-lived writer runs (a read-write mount, a
//! session): taken at its start, renewed every third of its length, given up at its end.
//! The lease itself, and what it refuses, is the model's (`model::Lease`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::model::{MAX_LEASE, Renewal, Workspace};

/// A lease's length unless `AVFS_LEASE_SECS` sets another: how long a fork stays held
/// after its writer's host dies.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The lease length: `AVFS_LEASE_SECS` (seconds, fractions allowed, from 1 to an hour),
/// else 30 s. Shorter leases would lapse under ordinary load: renewing waits its turn with
/// the writes.
pub fn lease_length() -> Result<Duration> {
    crate::store::seconds_from_env("AVFS_LEASE_SECS", DEFAULT_LEASE, MAX_LEASE)
}

/// A held lease, renewed in the background until dropped, then given up.
pub struct LeaseKeeper {
    ws: Workspace,
    stop: Arc<AtomicBool>,
    renewer: Option<JoinHandle<()>>,
}

impl LeaseKeeper {
    /// Take `ws`'s lease for this process as `what` (`workspace_busy` if another host
    /// holds it); `ws` and its clones write under it from now on.
    pub fn take(ws: &Workspace, what: String) -> Result<LeaseKeeper> {
        let ttl = lease_length()?;
        ws.take_lease(&what, std::process::id(), ttl)?;
        let stop = Arc::new(AtomicBool::new(false));
        let renewer = {
            let (ws, stop) = (ws.clone(), stop.clone());
            std::thread::Builder::new()
                .name("avfs-lease".into())
                .spawn(move || renew(&ws, &what, ttl, &stop))
                .map_err(|e| Error::Storage(format!("starting the lease renewer: {e}")))?
        };
        Ok(LeaseKeeper {
            ws: ws.clone(),
            stop,
            renewer: Some(renewer),
        })
    }
}

/// Renew every third of `ttl` until `stop`. A renewal that fails (the database is
/// unreachable) is tried again at the next turn, while the lease lasts; a lease that was
/// lost stays lost (the writer's changes are refused: see `model::Lease`), and renewing
/// ends. Reports go to stderr: the daemon's log.
fn renew(ws: &Workspace, what: &str, ttl: Duration, stop: &AtomicBool) {
    let every = ttl / 3;
    let mut next = Instant::now() + every;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50).min(every));
        if Instant::now() < next {
            continue;
        }
        next = Instant::now() + every;
        match ws.renew_lease(what, std::process::id(), ttl) {
            Ok(Renewal::Kept) => {}
            Ok(Renewal::Lost(why)) => {
                eprintln!("avfs: fork {}: {why}", ws.name());
                return;
            }
            Err(e) => eprintln!("avfs: renewing the write lease of fork {}: {e}", ws.name()),
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
        // A lease not given up (the database is gone) lapses by itself.
        if let Err(e) = self.ws.release_lease(std::process::id()) {
            eprintln!(
                "avfs: giving up the write lease of fork {}: {e}",
                self.ws.name()
            );
        }
    }
}
