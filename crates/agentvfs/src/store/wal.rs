//! Background WAL checkpoints. These are SQLite's checkpoints (copying the write-ahead log
//! back into the vault file), not avfs checkpoints. The writer connection does not run one
//! inside its commits, so no commit pays for that copy and its fsyncs; a thread with its
//! own connection runs a PASSIVE one whenever a commit leaves the log past
//! `WAL_CHECKPOINT_FRAMES`. SQLite reuses the log from its start only after a checkpoint
//! copied all of it, which a thread racing a writer that never pauses does not manage; so
//! past `WAL_INLINE_FRAMES` the writer checkpoints itself once the thread's current pass is
//! over (FULL, copying only what that pass left), and past twice that it waits for the
//! pass, which also holds back a writer faster than the disk.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rusqlite::{Connection, OpenFlags};

use super::lock::lock;

/// Log size, in frames (pages), past which a commit asks for a background checkpoint:
/// 2,048 frames is 8 MiB at the default 4 KiB page, twice SQLite's inline default.
pub(super) const WAL_CHECKPOINT_FRAMES: i64 = 2048;

/// Log size past which the writer checkpoints after its commit (32 MiB at 4 KiB pages).
pub(super) const WAL_INLINE_FRAMES: i64 = 4 * WAL_CHECKPOINT_FRAMES;

/// Owns the checkpoint thread of one vault handle. The thread starts on the first request,
/// so a short CLI process that never fills the log never spawns it.
pub(super) struct WalCheckpointer {
    path: PathBuf,
    state: Mutex<State>,
    /// Signals a request or a stop to the thread, and the end of a pass to the writer.
    wake: Condvar,
    /// Frames in the log after the last commit, as SQLite's WAL hook reported them.
    frames: AtomicI64,
}

#[derive(Default)]
struct State {
    requested: bool,
    stopping: bool,
    /// The thread is in a pass.
    running: bool,
    thread: Option<JoinHandle<()>>,
}

impl WalCheckpointer {
    pub(super) fn new(path: &Path) -> Arc<WalCheckpointer> {
        Arc::new(WalCheckpointer {
            path: path.to_path_buf(),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            frames: AtomicI64::new(0),
        })
    }

    /// Called from the writer's WAL hook right after a commit, with the log's size. Records
    /// and signals; returns true when the writer should checkpoint itself (see above).
    pub(super) fn committed(self: &Arc<Self>, frames: i64) -> bool {
        self.frames.store(frames, Ordering::Relaxed);
        if frames < WAL_CHECKPOINT_FRAMES {
            return false;
        }
        if frames >= WAL_INLINE_FRAMES {
            // Only one checkpoint runs at a time (a second one is refused as busy): the
            // thread starts no new pass, and the writer checkpoints at the first commit
            // after the current pass, when only what came in during that pass is left.
            // Past twice the limit it waits for the pass instead.
            let mut st = lock(&self.state);
            st.requested = false;
            if st.running && frames < 2 * WAL_INLINE_FRAMES {
                return false;
            }
            while st.running {
                st = self.wake.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            return true;
        }
        self.request();
        false
    }

    /// The log, `frames` long, was copied back completely. A commit since then has a
    /// longer log and keeps its count.
    pub(super) fn caught_up(&self, frames: i64) {
        let _ = self
            .frames
            .compare_exchange(frames, 0, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn request(self: &Arc<Self>) {
        let mut st = lock(&self.state);
        if st.stopping || st.requested {
            return;
        }
        if st.thread.is_none() {
            let me = Arc::clone(self);
            match std::thread::Builder::new()
                .name("avfs-wal-checkpoint".into())
                .spawn(move || me.run())
            {
                Ok(handle) => st.thread = Some(handle),
                // No thread: the writer's own checkpoint past `WAL_INLINE_FRAMES` still
                // bounds the log.
                Err(_) => return,
            }
        }
        st.requested = true;
        self.wake.notify_all();
    }

    /// Whether the log was past the threshold at the last commit.
    pub(super) fn log_is_large(&self) -> bool {
        self.frames.load(Ordering::Relaxed) >= WAL_CHECKPOINT_FRAMES
    }

    /// Stop the thread, letting a checkpoint it is running finish.
    pub(super) fn stop(&self) {
        let handle = {
            let mut st = lock(&self.state);
            st.stopping = true;
            self.wake.notify_all();
            st.thread.take()
        };
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }

    fn run(&self) {
        let mut conn: Option<Connection> = None;
        loop {
            {
                let mut st = lock(&self.state);
                while !st.requested && !st.stopping {
                    st = self.wake.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                if st.stopping {
                    return;
                }
                st.requested = false;
                st.running = true;
            }
            if conn.is_none() {
                // A failed open is retried on the next request; meanwhile the writer's own
                // checkpoint bounds the log.
                conn = Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .ok();
            }
            if let Some(c) = &conn
                && let Ok((log, done)) = passive_checkpoint(c)
                && log == done
            {
                // Everything is copied back: the writer restarts the log on its next commit.
                self.caught_up(log);
            }
            lock(&self.state).running = false;
            self.wake.notify_all();
        }
    }
}

/// A PASSIVE checkpoint copies what it can without waiting on readers or writers, so its
/// cost is bounded by the log's size. Returns (frames in the log, frames checkpointed).
pub(super) fn passive_checkpoint(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get(1)?, r.get(2)?))
    })
}

#[cfg(test)]
mod tests {
    use crate::store::id::ObjectId;
    use crate::store::{SqliteStore, Store};

    /// With inline checkpoints off, the vault file itself only grows when something copies
    /// the log back: the thread while the handle lives, or the handle's drop.
    #[test]
    fn committed_pages_reach_the_vault_file_without_inline_checkpoints() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("v.avfs");
        let store = SqliteStore::create(&path).expect("create");
        // Another connection keeps SQLite from checkpointing when the handle closes, so
        // only our own checkpoints can move the pages.
        let other = rusqlite::Connection::open(&path).expect("second connection");
        let _: i64 = other
            .query_row("SELECT count(*) FROM objects", [], |r| r.get(0))
            .expect("read");
        commit_chunks(&store, 400, 7);
        drop(store);
        // Up to one threshold's worth (8 MiB) may legitimately stay in the log.
        let vault_bytes = std::fs::metadata(&path).expect("stat").len();
        assert!(
            vault_bytes > 12 * 1024 * 1024,
            "only {vault_bytes} bytes of 25 MiB were copied back into the vault file"
        );
    }

    /// A writer that never pauses must not starve the checkpoints: the log is reused from
    /// its start once copied back, so its file stays far below what was written.
    #[test]
    fn continuous_commits_keep_the_log_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("v.avfs");
        let store = SqliteStore::create(&path).expect("create");
        commit_chunks(&store, 2400, 3);
        let wal = std::fs::metadata(dir.path().join("v.avfs-wal"))
            .expect("stat log")
            .len();
        // 150 MiB written; the log stops at twice the writer's own limit (2 x 32 MiB) plus
        // a commit.
        assert!(wal < 72 * 1024 * 1024, "log grew to {wal} bytes");
        drop(store);
    }

    /// `n` commits of one distinct 64 KiB object each.
    fn commit_chunks(store: &SqliteStore, n: u32, fill: u8) {
        let chunk = vec![fill; 64 * 1024];
        for i in 0..n {
            let mut data = chunk.clone();
            data[..4].copy_from_slice(&i.to_le_bytes());
            let id = ObjectId::of(&data);
            store
                .write_with(&mut |tx| tx.put_object(&id, 1, &data))
                .expect("write");
        }
    }
}
