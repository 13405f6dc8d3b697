//! What a vault handle knows of the server after its last write: the rows that write read
//! or wrote, and the scans it read whole, as they were when it committed (it held the
//! vault's lock, so nothing changed them before its `COMMIT`).
//!
//! A write that may run twice (`ReadAhead::repeatable`) first runs on this knowledge alone:
//! its reads are answered here, each one remembered, and its changes go out in one
//! exchange with `BEGIN`, the lock, a guard and the `COMMIT`. The guard checks, under the
//! lock, that every row it read still has the value it saw (a row it did not know is taken
//! to be absent, and checked absent) and that every scan it read still has as many rows;
//! if one does not, the guard fails the transaction, nothing is applied, and the write runs
//! again the usual way. Another host's write in between costs that one exchange more;
//! nothing is ever applied on knowledge that was out of date.

use std::collections::HashMap;

use crate::store::kv::{Buffer, Table};

/// Rows in the first page of a scan (small: most scans stop early). A first page shorter
/// than this holds its whole range, which is what a handle can know.
pub(super) const FIRST_PAGE: i64 = 64;

/// A scan's first page, by what was asked: (table, from, to, descending).
pub(super) type PageKey = (Table, Vec<u8>, Option<Vec<u8>>, bool);

/// Rows by (table, key); `None`: no such row.
pub(super) type Rows = HashMap<(Table, Vec<u8>), Option<Vec<u8>>>;

/// First pages of scans, by what was asked.
pub(super) type FirstPages = HashMap<PageKey, Vec<(Vec<u8>, Vec<u8>)>>;

/// Rows known past this many are forgotten (all but the last write's): knowledge is a
/// shortcut, and a long-lived handle must not grow without bound.
const MAX_ROWS: usize = 4096;

#[derive(Default)]
pub(super) struct Known {
    pub(super) rows: Rows,
    /// Scans read whole (shorter than a page), in their order.
    pub(super) pages: FirstPages,
}

impl Known {
    /// Whether a write may start from this knowledge: it has the counters every write
    /// reads, so it saw at least one write through this handle.
    pub(super) fn warm(&self, counters: &[&[u8]]) -> bool {
        counters
            .iter()
            .all(|k| self.rows.contains_key(&(Table::Meta, k.to_vec())))
    }

    /// Forget everything (a write failed, or its outcome is unknown).
    pub(super) fn clear(&mut self) {
        self.rows.clear();
        self.pages.clear();
    }

    /// Take in a committed write: the rows and whole pages it read under the lock, then its
    /// own changes (`changes`, per table; objects are never kept here).
    pub(super) fn absorb(&mut self, read: Rows, pages: FirstPages, changes: &[(Table, Buffer)]) {
        if self.rows.len() + read.len() > MAX_ROWS {
            self.clear();
        }
        // What was read now is newer than what was known: a known page that disagrees with
        // a row read now is dropped, and rows known in a range read whole now give way to it.
        self.pages.retain(|pk, rows| {
            read.iter().all(|((t, k), v)| {
                *t != pk.0
                    || !inside(pk, k)
                    || rows.iter().find(|(r, _)| r == k).map(|(_, v)| v) == v.as_ref()
            })
        });
        self.rows.extend(read);
        for (key, rows) in pages {
            if (rows.len() as i64) < FIRST_PAGE {
                self.rows
                    .retain(|(t, k), _| *t != key.0 || !inside(&key, k));
                for (k, v) in &rows {
                    self.rows.insert((key.0, k.clone()), Some(v.clone()));
                }
                self.pages.insert(key, rows);
            } else {
                self.pages.remove(&key);
            }
        }
        for (t, buf) in changes {
            for (k, v) in buf {
                self.rows.insert((*t, k.clone()), v.clone());
            }
            self.pages.retain(|(pt, lo, hi, rev), rows| {
                if pt != t {
                    return true;
                }
                let within = |k: &[u8]| k >= lo.as_slice() && hi.as_deref().is_none_or(|h| k < h);
                for (k, v) in buf.iter().filter(|(k, _)| within(k)) {
                    let at = if *rev {
                        rows.binary_search_by(|(r, _)| k.cmp(r))
                    } else {
                        rows.binary_search_by(|(r, _)| r.cmp(k))
                    };
                    match (at, v) {
                        (Ok(i), Some(v)) => rows[i].1 = v.clone(),
                        (Ok(i), None) => {
                            rows.remove(i);
                        }
                        (Err(i), Some(v)) => rows.insert(i, (k.clone(), v.clone())),
                        (Err(_), None) => {}
                    }
                }
                (rows.len() as i64) < FIRST_PAGE
            });
        }
        // A write of many rows (an import) is not worth keeping.
        if self.rows.len() > MAX_ROWS {
            self.clear();
        }
    }
}

/// Whether key `k` is in the range page `pk` was read from.
fn inside(pk: &PageKey, k: &[u8]) -> bool {
    k >= pk.1.as_slice() && pk.2.as_deref().is_none_or(|hi| k < hi)
}

/// What a speculative write read, for its guard: rows with the value it saw (`None`:
/// absent), and whole pages with their row counts.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) rows: Rows,
    pub(super) pages: Vec<(PageKey, usize)>,
}

/// One statement of a guard: table `t`'s rows `keys` are exactly the rows whose image (see
/// `rows_image`) is `expected` (a key named and not in it must be absent), or the range
/// [lo, hi) of table `t` holds `n` rows.
pub(super) enum Check {
    Rows {
        t: i16,
        keys: Vec<Vec<u8>>,
        expected: Vec<u8>,
    },
    Count {
        t: i16,
        lo: Vec<u8>,
        hi: Option<Vec<u8>>,
        n: i64,
    },
}

/// What a failed guard raises (`division_by_zero`, from its `1 / 0`).
pub(super) const GUARD_FAILED: &str = "22012";

/// The image of rows, sorted by key, as the `guard_rows` statement builds it: each key and
/// value after its length (four bytes, big-endian), so no two sets of rows share one.
fn rows_image<'r>(rows: impl Iterator<Item = (&'r [u8], &'r [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in rows {
        for part in [k, v] {
            out.extend_from_slice(&(part.len() as u32).to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

impl Seen {
    /// The guard for what was seen, with `absent` (rows that must not exist) added: a
    /// statement per table read and per range read whole. A range's rows went into `rows`
    /// when it was read, so a range adds only its count.
    pub(super) fn guard(&self, absent: &[(Table, &[u8])]) -> Vec<Check> {
        type ByKey<'a> = std::collections::BTreeMap<&'a [u8], Option<&'a [u8]>>;
        let mut by_table: std::collections::BTreeMap<i16, ByKey<'_>> = Default::default();
        for ((t, k), v) in &self.rows {
            by_table
                .entry(*t as i16)
                .or_default()
                .insert(k.as_slice(), v.as_deref());
        }
        for (t, k) in absent {
            by_table.entry(*t as i16).or_default().insert(k, None);
        }
        let mut checks: Vec<Check> = by_table
            .into_iter()
            .map(|(t, rows)| Check::Rows {
                t,
                keys: rows.keys().map(|k| k.to_vec()).collect(),
                expected: rows_image(rows.iter().filter_map(|(k, v)| v.map(|v| (*k, v)))),
            })
            .collect();
        for ((t, lo, hi, _), n) in &self.pages {
            checks.push(Check::Count {
                t: *t as i16,
                lo: lo.clone(),
                hi: hi.clone(),
                n: *n as i64,
            });
        }
        checks
    }
}

/// The guard's statements on table `kv` (quoted), each failing with `division_by_zero`
/// when what it checks does not hold: rows (`Check::Rows`), and a range's count with an
/// end and without (`Check::Count`). One statement per table keeps each plan a plain index
/// lookup: one statement over every table (`unnest` joins) cost several times more here.
pub(super) fn guard_sql(kv: &str) -> [String; 3] {
    let count = format!("SELECT count(*) FROM {kv} WHERE t = $1 AND k >= $2");
    [
        format!(
            "SELECT 1 / ((SELECT coalesce(string_agg(int4send(length(k)) || k || int4send(length(v)) || v, \
             ''::bytea ORDER BY k), ''::bytea) FROM {kv} WHERE t = $1 AND k = ANY($2)) = $3)::int"
        ),
        format!("SELECT 1 / (({count} AND k < $3) = $4)::int"),
        format!("SELECT 1 / (({count}) = $3)::int"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(keys: &[&str]) -> Vec<(Vec<u8>, Vec<u8>)> {
        keys.iter()
            .map(|k| (k.as_bytes().to_vec(), b"v".to_vec()))
            .collect()
    }

    fn keys(rows: &[(Vec<u8>, Vec<u8>)]) -> Vec<String> {
        rows.iter()
            .map(|(k, _)| String::from_utf8(k.clone()).unwrap())
            .collect()
    }

    #[test]
    fn a_write_moves_known_pages_in_their_order_and_drops_a_page_grown_full() {
        let asc: PageKey = (Table::Settings, b"a".to_vec(), Some(b"b".to_vec()), false);
        let desc: PageKey = (Table::Settings, b"a".to_vec(), Some(b"b".to_vec()), true);
        let mut known = Known::default();
        let mut pages = FirstPages::new();
        pages.insert(asc.clone(), page(&["a1", "a3"]));
        pages.insert(desc.clone(), page(&["a3", "a1"]));
        known.absorb(Rows::new(), pages, &[]);
        let mut buf = Buffer::new();
        buf.insert(b"a2".to_vec(), Some(b"new".to_vec()));
        buf.insert(b"a3".to_vec(), None);
        buf.insert(b"c".to_vec(), Some(b"outside".to_vec()));
        known.absorb(Rows::new(), FirstPages::new(), &[(Table::Settings, buf)]);
        assert_eq!(keys(&known.pages[&asc]), ["a1", "a2"]);
        assert_eq!(keys(&known.pages[&desc]), ["a2", "a1"]);
        assert_eq!(known.rows[&(Table::Settings, b"a3".to_vec())], None);

        let mut many = Buffer::new();
        for i in 0..FIRST_PAGE {
            many.insert(format!("a{i:03}").into_bytes(), Some(b"x".to_vec()));
        }
        known.absorb(Rows::new(), FirstPages::new(), &[(Table::Settings, many)]);
        assert!(
            known.pages.is_empty(),
            "a page of {FIRST_PAGE} rows is no longer whole"
        );
    }

    #[test]
    fn what_is_read_later_replaces_what_disagrees_with_it() {
        let pk: PageKey = (Table::Meta, b"k".to_vec(), Some(b"l".to_vec()), false);
        let mut known = Known::default();
        let mut rows = Rows::new();
        rows.insert((Table::Meta, b"k1".to_vec()), Some(b"old".to_vec()));
        let mut pages = FirstPages::new();
        pages.insert(pk.clone(), vec![(b"k2".to_vec(), b"v".to_vec())]);
        known.absorb(rows, pages, &[]);
        // The page, read after the row, says k1 is gone.
        assert!(!known.rows.contains_key(&(Table::Meta, b"k1".to_vec())));
        assert_eq!(
            known.rows[&(Table::Meta, b"k2".to_vec())],
            Some(b"v".to_vec())
        );
        // A row read later that disagrees with the page drops the page.
        let mut later = Rows::new();
        later.insert((Table::Meta, b"k2".to_vec()), Some(b"w".to_vec()));
        known.absorb(later, FirstPages::new(), &[]);
        assert!(known.pages.is_empty());
        assert_eq!(
            known.rows[&(Table::Meta, b"k2".to_vec())],
            Some(b"w".to_vec())
        );
    }
}
