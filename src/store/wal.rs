//! Background WAL checkpoints. These are SQLite's checkpoints (copying the write-ahead log
//! back into the vault file), not avfs checkpoints. The writer connection never runs one
//! inline, so no commit pays for that copy and its fsyncs; a thread with its own connection
//! runs a PASSIVE one whenever a commit leaves the log past `WAL_CHECKPOINT_FRAMES`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use rusqlite::{Connection, OpenFlags};

use super::sqlite::lock;

/// Log size, in frames (pages), past which a commit asks for a background checkpoint:
/// 2,048 frames is 8 MiB at the default 4 KiB page, twice SQLite's inline default.
pub(super) const WAL_CHECKPOINT_FRAMES: i64 = 2048;

/// Owns the checkpoint thread of one vault handle. The thread starts on the first request,
/// so a short CLI process that never fills the log never spawns it.
pub(super) struct WalCheckpointer {
    path: PathBuf,
    state: Mutex<State>,
    wake: Condvar,
    /// Frames in the log after the last commit, as SQLite's WAL hook reported them.
    frames: AtomicI64,
}

#[derive(Default)]
struct State {
    requested: bool,
    stopping: bool,
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

    /// Called from the writer's WAL hook right after a commit, with the log's size. Runs
    /// inside the commit, so it only records and signals.
    pub(super) fn committed(self: &Arc<Self>, frames: i64) {
        self.frames.store(frames, Ordering::Relaxed);
        if frames < WAL_CHECKPOINT_FRAMES {
            return;
        }
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
                // No thread: the log keeps growing until the handle's drop checkpoints it
                // or a later commit manages to start one.
                Err(_) => return,
            }
        }
        st.requested = true;
        self.wake.notify_one();
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
            self.wake.notify_one();
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
            }
            if conn.is_none() {
                // A failed open is retried on the next request; meanwhile the log grows.
                conn = Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .ok();
            }
            if let Some(c) = &conn
                && passive_checkpoint(c).is_ok_and(|(log, done)| log == done)
            {
                // Everything is copied back: the writer restarts the log on its next commit.
                self.frames.store(0, Ordering::Relaxed);
            }
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
    use crate::model::id::ObjectId;
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
        let chunk = vec![7u8; 64 * 1024];
        for i in 0u32..400 {
            let mut data = chunk.clone();
            data[..4].copy_from_slice(&i.to_le_bytes());
            let id = ObjectId::of(&data);
            store
                .write_with(&mut |tx| tx.put_object(&id, 1, &data))
                .expect("write");
        }
        drop(store);
        // Up to one threshold's worth (8 MiB) may legitimately stay in the log.
        let vault_bytes = std::fs::metadata(&path).expect("stat").len();
        assert!(
            vault_bytes > 12 * 1024 * 1024,
            "only {vault_bytes} bytes of 25 MiB were copied back into the vault file"
        );
    }
}
