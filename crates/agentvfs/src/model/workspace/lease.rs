//! Write leases. A long-lived writer (a read-write mount, a session) holds its fork's lease
//! while it runs; a change to the fork's files from any other host is then refused with
//! `workspace_busy`, naming the holder. A lease lasts a bounded time and its holders renew
//! it: one whose host died lapses, and the next writer takes the fork with a new epoch.
//!
//! Epochs fence. Every take of a free lease draws a new epoch from a counter of the
//! vault's, so no two takes ever share one. A lease that lapsed still stands for its
//! holders until another host changes the fork (which marks it `overtaken`, in the same
//! transaction), takes the fork or deletes it: a holder that was only slow (its database
//! paused, its host suspended) carries on, and one that stalled while another host worked
//! on the fork is refused from then on, for good, and never writes its stale view over that
//! host's acknowledged work; it has to be started again. Writers on the lease's own host share it: a second
//! read-write mount of the fork joins the first at its epoch, and the lease lapses only
//! when the last of them gives it up (or dies).
//!
//! The lease is a setting of the fork (`fork:NAME/lease`), read and written in the same
//! transaction as the edits it guards. Expiry is by wall clock, so hosts' clocks must agree
//! to well within a lease's length.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Workspace;
use crate::error::{Error, Result};
use crate::model::vault::fork_key;
use crate::store::{StoreRead, StoreWrite};

/// The longest lease: a host that dies holds its forks at most this long.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// The vault's epoch counter (outside any fork's settings, so it outlives fork deletion).
const EPOCH_KEY: &str = "lease.epoch";

/// A fork's write lease, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The host holding it (`AVFS_HOST_ID`, else the host's name).
    pub host: String,
    /// The writers on that host that hold it.
    pub holders: Vec<Holder>,
    /// Drawn anew by every take of a free lease; holders write under it.
    pub epoch: u64,
    /// When it lapses unless renewed (milliseconds since the Unix epoch; 0: given up).
    pub expires_ms: u64,
    /// Another host changed the fork after the lease lapsed: its holders' view is stale.
    #[serde(default)]
    pub overtaken: bool,
}

/// One writer holding a lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// What it is, for people: `mount /dir`, `session NAME`.
    pub what: String,
    pub pid: u32,
}

impl Lease {
    /// Held (not lapsed) at `now_ms`. A lease that claims to last longer than any lease
    /// can (its holder's clock is far ahead) holds nothing: a broken clock on one host must
    /// not lock a fork for ever.
    pub fn live(&self, now_ms: u64) -> bool {
        now_ms < self.expires_ms && self.expires_ms - now_ms <= MAX_TTL.as_millis() as u64
    }

    /// Refuses a change from `host`: held, by another host.
    fn refuses(&self, host: &str, now_ms: u64) -> bool {
        self.live(now_ms) && self.host != host
    }

    /// Still stands for its holders at `epoch` on `host`: live, or lapsed with nobody
    /// else's change since.
    fn stands_for(&self, host: &str, epoch: u64, now_ms: u64) -> bool {
        self.host == host
            && self.epoch == epoch
            && !self.holders.is_empty()
            && (self.live(now_ms) || !self.overtaken)
    }

    fn holder_names(&self) -> String {
        let names: Vec<String> = self
            .holders
            .iter()
            .map(|h| format!("{} (pid {})", h.what, h.pid))
            .collect();
        names.join(", ")
    }

    fn busy(&self, workspace: &str, now_ms: u64, what: &str) -> Error {
        Error::WorkspaceBusy {
            workspace: workspace.to_string(),
            reason: format!(
                "host {} holds this fork's write lease ({}, epoch {}) for {} more s, so {what} from another host is refused; run it on that host, stop that writer, or wait until its lease lapses",
                self.host,
                self.holder_names(),
                self.epoch,
                self.expires_ms.saturating_sub(now_ms).div_ceil(1000)
            ),
        }
    }
}

/// A handle's hold on its fork's lease: the epoch it took (0: none), and whether it lost
/// it (then its changes are refused for good).
#[derive(Debug, Default)]
pub(crate) struct Hold {
    epoch: AtomicU64,
    lost: AtomicBool,
}

impl Hold {
    /// Refuse every later change through this hold (its lease was found lost).
    pub(super) fn mark_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }
}

/// This host's name in leases: `AVFS_HOST_ID` if set (trimmed, non-empty), else the
/// kernel's host name.
pub fn host_id() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(read_host_id).clone()
}

fn read_host_id() -> String {
    let id = |v: String| Some(v.trim().to_string()).filter(|h| !h.is_empty());
    std::env::var("AVFS_HOST_ID")
        .ok()
        .and_then(id)
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .and_then(id)
        })
        .unwrap_or_else(|| "localhost".into())
}

pub(crate) fn now_ms() -> u64 {
    (crate::model::now_ns().max(0) / 1_000_000) as u64
}

pub(super) fn key(workspace: &str) -> String {
    fork_key(workspace, "lease")
}

fn load(r: &dyn StoreRead, workspace: &str) -> Result<Option<Lease>> {
    match r.setting(&key(workspace))? {
        None => Ok(None),
        Some(v) => serde_json::from_str(&v)
            .map(Some)
            .map_err(|e| Error::CorruptVault {
                reason: format!("the write lease of fork {workspace} does not parse: {e}"),
            }),
    }
}

fn save(w: &mut dyn StoreWrite, workspace: &str, lease: &Lease) -> Result<()> {
    // Strings and numbers only: serializing cannot fail.
    let json = serde_json::to_string(lease).unwrap_or_default();
    w.set_setting(&key(workspace), Some(&json))
}

/// A new epoch: one more than any drawn in this vault before.
fn next_epoch(w: &mut dyn StoreWrite) -> Result<u64> {
    let last: u64 = w
        .setting(EPOCH_KEY)?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let next = last.saturating_add(1);
    w.set_setting(EPOCH_KEY, Some(&next.to_string()))?;
    Ok(next)
}

/// Whether process `pid` of this host is running.
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Refuse a change to `workspace`'s files from `host` while another host holds the fork's
/// lease; a change from another host after it lapsed marks it overtaken. A handle holding
/// the lease (`hold`) may change them only while the lease still stands for it; once it
/// does not, the handle is to be refused for good: `lost` is set, and the caller marks the
/// hold lost (`Hold::mark_lost`) once the write this ran in was the one that counted (a
/// write may run twice, the first time on what a vault handle knew, which may be out of
/// date).
pub(super) fn check_write(
    w: &mut dyn StoreWrite,
    workspace: &str,
    host: &str,
    hold: &Hold,
    lost_now: &mut bool,
) -> Result<()> {
    let lease = load(w, workspace)?;
    let now = now_ms();
    let held = hold.epoch.load(Ordering::SeqCst);
    if held == 0 {
        return match lease {
            Some(l) if l.refuses(host, now) => Err(l.busy(workspace, now, "a change")),
            Some(mut l) if l.host != host && !l.overtaken && !l.holders.is_empty() => {
                l.overtaken = true;
                save(w, workspace, &l)
            }
            _ => Ok(()),
        };
    }
    let stands = !hold.lost.load(Ordering::SeqCst)
        && lease
            .as_ref()
            .is_some_and(|l| l.stands_for(host, held, now));
    if stands {
        return Ok(());
    }
    *lost_now = true;
    Err(lost(workspace, held, lease.as_ref(), now))
}

/// `workspace_busy` for a handle that lost its lease at `held`, saying what became of it.
fn lost(workspace: &str, held: u64, now: Option<&Lease>, now_ms: u64) -> Error {
    let since = match now {
        Some(l) if l.epoch != held && l.live(now_ms) => format!(
            "host {} holds the fork now ({}, epoch {})",
            l.host,
            l.holder_names(),
            l.epoch
        ),
        Some(l) if l.epoch != held => format!("the fork was taken at epoch {} since", l.epoch),
        Some(l) if l.overtaken => {
            "it lapsed (this writer stalled past it) and another host changed the fork since".into()
        }
        Some(_) => "it was given up".into(),
        None => "the fork was deleted since".into(),
    };
    Error::WorkspaceBusy {
        workspace: workspace.to_string(),
        reason: format!(
            "this writer's write lease (epoch {held}) is lost: {since}; its changes are refused, so it cannot write over others' work; end it and start it again"
        ),
    }
}

/// Refuse deleting fork `workspace` from another host while its lease is held.
pub(crate) fn check_delete(r: &dyn StoreRead, workspace: &str) -> Result<()> {
    let now = now_ms();
    match load(r, workspace)? {
        Some(l) if l.refuses(&host_id(), now) => Err(l.busy(workspace, now, "deleting it")),
        _ => Ok(()),
    }
}

impl crate::model::Vault {
    /// Refuse (`workspace_busy`) `what` to the whole vault (deleting it, moving it to
    /// another engine) while another host holds a lease on any of its forks.
    pub fn check_unleased(&self, what: &str) -> Result<()> {
        let (host, now) = (host_id(), now_ms());
        self.store.read(|r| {
            for (k, v) in r.settings_with_prefix("fork:")? {
                let Some(fork) = k
                    .strip_prefix("fork:")
                    .and_then(|k| k.strip_suffix("/lease"))
                else {
                    continue;
                };
                if let Ok(l) = serde_json::from_str::<Lease>(&v)
                    && l.refuses(&host, now)
                {
                    return Err(l.busy(fork, now, what));
                }
            }
            Ok(())
        })
    }
}

/// What a renewal found.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Still this handle's, now until the new expiry.
    Kept,
    /// Lost (why): this handle's changes are refused from now on.
    Lost(String),
}

impl Workspace {
    /// The fork's lease as stored (live or lapsed), if any.
    pub fn lease(&self) -> Result<Option<Lease>> {
        self.vault.store.read(|r| load(r, &self.name))
    }

    /// Whether this handle held the fork's lease and lost it (its changes are refused).
    pub fn lease_lost(&self) -> bool {
        self.lease.lost.load(Ordering::SeqCst)
    }

    /// Refuse (`workspace_busy`) when another host holds the fork's lease: a check made
    /// before starting a long-lived writer, so it fails at once rather than in a daemon.
    pub fn check_lease_free(&self, what: &str) -> Result<()> {
        let host = host_id();
        let now = now_ms();
        match self.lease()? {
            Some(l) if l.refuses(&host, now) => Err(l.busy(&self.name, now, what)),
            _ => Ok(()),
        }
    }

    /// Take the fork's lease for `ttl` as `what`, process `pid`: a new epoch when it is
    /// free, or a share of this host's when another writer here holds it. This handle and
    /// its clones then write under it. `workspace_busy` while another host holds it.
    pub fn take_lease(&self, what: &str, pid: u32, ttl: Duration) -> Result<Lease> {
        check_ttl(ttl)?;
        let host = host_id();
        let me = Holder {
            what: what.to_string(),
            pid,
        };
        let lease = self.vault.store.write(|w| {
            let now = now_ms();
            self.record(w)?;
            let until = now.saturating_add(ttl.as_millis() as u64);
            let lease = match load(w, &self.name)? {
                Some(l) if l.refuses(&host, now) => {
                    return Err(l.busy(&self.name, now, "a read-write mount or session"));
                }
                // This host's, standing: joined at its epoch.
                Some(mut l) if l.stands_for(&host, l.epoch, now) => {
                    l.holders.retain(|h| h.pid != pid && alive(h.pid));
                    l.holders.push(me);
                    l.expires_ms = l.expires_ms.max(until);
                    l
                }
                _ => Lease {
                    host: host.clone(),
                    holders: vec![me],
                    epoch: next_epoch(w)?,
                    expires_ms: until,
                    overtaken: false,
                },
            };
            save(w, &self.name, &lease)?;
            Ok(lease)
        })?;
        self.lease.epoch.store(lease.epoch, Ordering::SeqCst);
        self.lease.lost.store(false, Ordering::SeqCst);
        Ok(lease)
    }

    /// Extend this handle's lease by `ttl` from now, if it still holds it: the stored
    /// lease is live at its epoch. Otherwise it is lost, for good.
    pub fn renew_lease(&self, what: &str, pid: u32, ttl: Duration) -> Result<Renewal> {
        check_ttl(ttl)?;
        let host = host_id();
        let held = self.lease.epoch.load(Ordering::SeqCst);
        if held == 0 || self.lease_lost() {
            return Ok(Renewal::Lost("this writer holds no lease".into()));
        }
        let renewal = self.vault.store.write(|w| {
            let now = now_ms();
            let gone = w.workspace(&self.name)?.is_none();
            let lease = load(w, &self.name)?;
            match lease {
                Some(mut l) if !gone && l.stands_for(&host, held, now) => {
                    l.holders.retain(|h| h.pid != pid && alive(h.pid));
                    l.holders.push(Holder {
                        what: what.to_string(),
                        pid,
                    });
                    l.expires_ms = l.expires_ms.max(now.saturating_add(ttl.as_millis() as u64));
                    save(w, &self.name, &l)?;
                    Ok(Renewal::Kept)
                }
                other => {
                    let other = if gone { None } else { other };
                    Ok(Renewal::Lost(
                        lost(&self.name, held, other.as_ref(), now).to_string(),
                    ))
                }
            }
        })?;
        if matches!(renewal, Renewal::Lost(_)) {
            self.lease.lost.store(true, Ordering::SeqCst);
        }
        Ok(renewal)
    }

    /// Give this handle's share of the lease up (process `pid`); the lease lapses when no
    /// writer of this host holds it any more. Its epoch stays drawn.
    pub fn release_lease(&self, pid: u32) -> Result<()> {
        let held = self.lease.epoch.swap(0, Ordering::SeqCst);
        if held == 0 {
            return Ok(());
        }
        self.drop_holder(Some(held), pid)
    }

    /// Drop process `pid` of this host from the fork's lease (it died: `avfs unmount`
    /// cleaning up after a killed daemon), so its lease does not hold the fork until it
    /// lapses.
    pub fn release_lease_of(&self, pid: u32) -> Result<()> {
        self.drop_holder(None, pid)
    }

    fn drop_holder(&self, epoch: Option<u64>, pid: u32) -> Result<()> {
        let host = host_id();
        self.vault.store.write(|w| {
            let Some(mut l) = load(w, &self.name)? else {
                return Ok(());
            };
            if l.host != host || epoch.is_some_and(|e| e != l.epoch) {
                return Ok(());
            }
            let before = l.holders.len();
            l.holders.retain(|h| h.pid != pid && alive(h.pid));
            if l.holders.len() == before {
                return Ok(());
            }
            if l.holders.is_empty() {
                l.expires_ms = 0;
            }
            save(w, &self.name, &l)
        })
    }
}

fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl.is_zero() || ttl > MAX_TTL {
        return Err(Error::invalid(format!(
            "a lease lasts from 1 ms to {} s, not {} ms",
            MAX_TTL.as_secs(),
            ttl.as_millis()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(expires_ms: u64) -> Lease {
        Lease {
            host: "a".into(),
            holders: vec![Holder {
                what: "mount /m".into(),
                pid: 1,
            }],
            epoch: 1,
            expires_ms,
            overtaken: false,
        }
    }

    #[test]
    fn a_lease_is_live_until_it_lapses_and_never_past_the_longest_length() {
        let now = 1_000_000_000;
        assert!(lease(now + 1).live(now));
        assert!(!lease(now).live(now));
        assert!(!lease(0).live(now));
        let longest = MAX_TTL.as_millis() as u64;
        assert!(lease(now + longest).live(now));
        // A holder whose clock is far ahead, or a damaged record, holds nothing.
        assert!(!lease(now + longest + 1).live(now));
        assert!(!lease(u64::MAX).live(now));
        // Only another host is refused.
        assert!(lease(now + 1).refuses("b", now));
        assert!(!lease(now + 1).refuses("a", now));
        // A lapsed lease stands for its holders until another host changes the fork.
        let mut lapsed = lease(now - 1);
        assert!(lapsed.stands_for("a", 1, now));
        assert!(!lapsed.stands_for("a", 2, now) && !lapsed.stands_for("b", 1, now));
        lapsed.overtaken = true;
        assert!(!lapsed.stands_for("a", 1, now));
        // A lease given up stands for nobody.
        let mut given_up = lease(0);
        given_up.holders.clear();
        assert!(!given_up.stands_for("a", 1, now));
    }
}
