//! The overlay rows of a batching writer (a mount), mirrored in memory so point lookups —
//! every path component of every lookup while a path is overlaid — cost a map probe
//! instead of a query. SQLite stays the truth: each write goes to both, a rolled-back
//! savepoint is undone here from a journal, and another connection's commit (seen as a new
//! `PRAGMA data_version` when the next batch begins) empties the mirror.

use std::collections::{BTreeMap, HashMap};

/// One overlay row as stored: `None` is a whiteout.
pub(super) type Row = Option<Vec<u8>>;

enum Undo {
    /// A row's value before the change; `None` when there was no row.
    Row(i64, String, Option<Row>),
    /// A workspace's rows before the change; `None` when they were not loaded.
    Workspace(i64, Option<BTreeMap<String, Row>>),
}

#[derive(Default)]
pub(super) struct Mirror {
    /// Every overlay row of each workspace loaded so far.
    rows: HashMap<i64, BTreeMap<String, Row>>,
    /// The writer connection's data version when the rows were last known current.
    data_version: Option<i64>,
    /// Changes since the current savepoint began, newest last.
    journal: Vec<Undo>,
}

impl Mirror {
    /// A batch is beginning and the connection's data version is `v`: forget everything if
    /// another connection committed since the last batch.
    pub(super) fn begin(&mut self, v: i64) {
        if self.data_version != Some(v) {
            self.clear();
            self.data_version = Some(v);
        }
    }

    pub(super) fn clear(&mut self) {
        self.rows.clear();
        self.journal.clear();
        self.data_version = None;
    }

    /// The savepoint was released: its changes stay.
    pub(super) fn keep(&mut self) {
        self.journal.clear();
    }

    /// The savepoint was rolled back: undo its changes here too.
    pub(super) fn undo(&mut self) {
        while let Some(u) = self.journal.pop() {
            match u {
                Undo::Row(ws, path, before) => {
                    if let Some(rows) = self.rows.get_mut(&ws) {
                        match before {
                            Some(row) => rows.insert(path, row),
                            None => rows.remove(&path),
                        };
                    }
                }
                Undo::Workspace(ws, before) => match before {
                    Some(rows) => {
                        self.rows.insert(ws, rows);
                    }
                    None => {
                        self.rows.remove(&ws);
                    }
                },
            }
        }
    }

    pub(super) fn loaded(&self, ws: i64) -> bool {
        self.rows.contains_key(&ws)
    }

    /// Install a workspace's rows as read from the store.
    pub(super) fn load(&mut self, ws: i64, rows: impl IntoIterator<Item = (String, Row)>) {
        self.journal.push(Undo::Workspace(ws, None));
        self.rows.insert(ws, rows.into_iter().collect());
    }

    /// `None` when `ws` is not loaded; otherwise the row at `path`, if there is one.
    pub(super) fn get(&self, ws: i64, path: &str) -> Option<Option<Row>> {
        self.rows.get(&ws).map(|rows| rows.get(path).cloned())
    }

    pub(super) fn put(&mut self, ws: i64, path: &str, row: Row) {
        if let Some(rows) = self.rows.get_mut(&ws) {
            let before = rows.insert(path.to_string(), row);
            self.journal.push(Undo::Row(ws, path.to_string(), before));
        }
    }

    pub(super) fn delete(&mut self, ws: i64, path: &str) {
        if let Some(rows) = self.rows.get_mut(&ws)
            && let Some(before) = rows.remove(path)
        {
            self.journal
                .push(Undo::Row(ws, path.to_string(), Some(before)));
        }
    }

    /// Delete the rows with `lo <= path < hi`.
    pub(super) fn delete_range(&mut self, ws: i64, lo: &str, hi: &str) {
        let Some(rows) = self.rows.get_mut(&ws) else {
            return;
        };
        let doomed: Vec<String> = rows
            .range::<str, _>((std::ops::Bound::Included(lo), std::ops::Bound::Excluded(hi)))
            .map(|(p, _)| p.clone())
            .collect();
        for p in doomed {
            if let Some(before) = rows.remove(&p) {
                self.journal.push(Undo::Row(ws, p, Some(before)));
            }
        }
    }

    /// Every row of `ws` is gone.
    pub(super) fn delete_workspace(&mut self, ws: i64) {
        if let Some(before) = self.rows.remove(&ws) {
            self.rows.insert(ws, BTreeMap::new());
            self.journal.push(Undo::Workspace(ws, Some(before)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rolled_back_savepoint_leaves_the_rows_as_they_were() {
        let mut m = Mirror::default();
        m.begin(1);
        m.load(
            7,
            [("a".to_string(), Some(vec![1])), ("a/b".to_string(), None)],
        );
        m.keep();
        m.put(7, "a", Some(vec![2]));
        m.put(7, "c", Some(vec![3]));
        m.delete_range(7, "a/", "a0");
        m.delete_workspace(7);
        m.undo();
        assert_eq!(m.get(7, "a"), Some(Some(Some(vec![1]))));
        assert_eq!(m.get(7, "a/b"), Some(Some(None)));
        assert_eq!(m.get(7, "c"), Some(None));
        // A load undone: the workspace is not known any more.
        m.load(8, []);
        m.undo();
        assert_eq!(m.get(8, "x"), None);
    }

    #[test]
    fn another_connections_commit_empties_the_mirror() {
        let mut m = Mirror::default();
        m.begin(1);
        m.load(7, [("a".to_string(), None)]);
        m.keep();
        m.begin(1);
        assert!(m.loaded(7));
        m.begin(2);
        assert!(!m.loaded(7));
    }
}
