//! Locking a mutex whose holder panicked: the SQLite engine and its WAL checkpoint thread
//! share connections behind mutexes, and a poisoned one stays usable.

use std::sync::{Mutex, MutexGuard};

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves the connection usable: SQLite rolls back any
    // transaction the panicking code left open when the next BEGIN fails or on close.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
