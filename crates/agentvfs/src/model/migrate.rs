//! Copying a vault's whole store into another engine, and proving the copy: every object
//! re-hashed against its id, every workspace, overlay entry, checkpoint, op-log entry, audit
//! record and setting compared. The file handling around it (a new file beside the vault,
//! the atomic swap) is the service's `vault migrate`.

use crate::error::{Error, Result};
use crate::model::node::object_id;
use crate::model::path::VPath;
use crate::store::{IdKind, Store, StoreRead, StoreWrite};

/// What a copy moved.
#[derive(Debug, Clone, Default, serde::Serialize, schemars::JsonSchema)]
pub struct CopyCounts {
    pub objects: u64,
    /// Stored bytes of those objects.
    pub bytes: u64,
    pub workspaces: u64,
    pub overlay_entries: u64,
    pub checkpoints: u64,
    pub ops: u64,
    pub audit_records: u64,
    pub settings: u64,
}

/// How far a copy or its check has come: (phase, done, total).
pub type Progress<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// Objects per write transaction of the copy, so no transaction holds the whole vault.
const OBJECTS_PER_COMMIT: usize = 2000;

fn mismatch(what: String) -> Error {
    Error::Storage(format!("the copy differs from the vault: {what}"))
}

/// Copy everything `src` holds into the empty store `dst`, keeping every id.
pub fn copy_store(
    src: &dyn StoreRead,
    dst: &(dyn Store + 'static),
    progress: Progress<'_>,
) -> Result<CopyCounts> {
    let mut n = CopyCounts::default();
    let ids = src.object_ids()?;
    let total = ids.len() as u64;
    for batch in ids.chunks(OBJECTS_PER_COMMIT) {
        dst.write(|w| {
            for (id, _, _) in batch {
                let o = src
                    .object(id)?
                    .ok_or_else(|| mismatch(format!("object {} vanished", id.short())))?;
                w.put_object(id, o.kind, &o.data)?;
                n.bytes += o.data.len() as u64;
            }
            Ok(())
        })?;
        n.objects += batch.len() as u64;
        progress("objects", n.objects, total);
    }
    dst.write(|w| copy_records(src, w, &mut n))?;
    progress("records", 1, 1);
    Ok(n)
}

fn copy_records(src: &dyn StoreRead, w: &mut dyn StoreWrite, n: &mut CopyCounts) -> Result<()> {
    for ws in src.workspaces()? {
        w.copy_workspace(&ws)?;
        n.workspaces += 1;
        for (path, node) in src.overlay_all(ws.id)? {
            let parent = VPath::from_stored(&path).parent().unwrap_or_default();
            w.overlay_put(ws.id, &path, parent.as_str(), node.as_deref())?;
            n.overlay_entries += 1;
        }
        for c in src.checkpoints(ws.id)? {
            w.copy_checkpoint(&c)?;
            n.checkpoints += 1;
        }
    }
    // Oldest first, so an engine that appends in id order keeps its order.
    for op in src.ops(None, usize::MAX)?.into_iter().rev() {
        w.copy_op(&op)?;
        n.ops += 1;
    }
    for a in src.audit(usize::MAX, None, true)?.into_iter().rev() {
        w.copy_audit(&a)?;
        n.audit_records += 1;
    }
    for (k, v) in src.settings_with_prefix("")? {
        w.set_setting(&k, Some(&v))?;
        n.settings += 1;
    }
    // Ids handed out to records deleted since stay handed out in the copy.
    for kind in IdKind::ALL {
        w.keep_ids_past(kind, src.highest_id(kind)?)?;
    }
    Ok(())
}

/// Check that `copy` holds exactly what `src` holds: every object present with its kind and
/// bytes hashing to its id, and every record equal, field by field.
pub fn verify_copy(
    src: &dyn StoreRead,
    copy: &dyn StoreRead,
    progress: Progress<'_>,
) -> Result<()> {
    let ids = src.object_ids()?;
    let total = ids.len() as u64;
    if copy.object_stats()?.0 != total {
        return Err(mismatch(format!(
            "{} objects, the vault has {total}",
            copy.object_stats()?.0
        )));
    }
    for (i, (id, kind, _)) in ids.iter().enumerate() {
        let o = copy
            .object(id)?
            .ok_or_else(|| mismatch(format!("object {} is missing", id.short())))?;
        if o.kind != *kind || object_id(o.kind, &o.data) != *id {
            return Err(mismatch(format!(
                "object {} does not hash to its id",
                id.short()
            )));
        }
        if i % OBJECTS_PER_COMMIT == 0 || i + 1 == ids.len() {
            progress("verify", i as u64 + 1, total);
        }
    }
    let same = |what: &str, a: String, b: String| -> Result<()> {
        if a == b {
            Ok(())
        } else {
            Err(mismatch(what.to_string()))
        }
    };
    for kind in IdKind::ALL {
        same(
            &format!("the highest {} id handed out", kind.name()),
            src.highest_id(kind)?.to_string(),
            copy.highest_id(kind)?.to_string(),
        )?;
    }
    let (wa, wb) = (src.workspaces()?, copy.workspaces()?);
    same("workspaces", format!("{wa:?}"), format!("{wb:?}"))?;
    for ws in &wa {
        same(
            &format!("workspace {}'s overlay", ws.name),
            format!("{:?}", src.overlay_all(ws.id)?),
            format!("{:?}", copy.overlay_all(ws.id)?),
        )?;
        same(
            &format!("workspace {}'s checkpoints", ws.name),
            format!("{:?}", src.checkpoints(ws.id)?),
            format!("{:?}", copy.checkpoints(ws.id)?),
        )?;
    }
    same(
        "the op log",
        format!("{:?}", src.ops(None, usize::MAX)?),
        format!("{:?}", copy.ops(None, usize::MAX)?),
    )?;
    same(
        "the audit log",
        format!("{:?}", src.audit(usize::MAX, None, true)?),
        format!("{:?}", copy.audit(usize::MAX, None, true)?),
    )?;
    same(
        "the settings",
        format!("{:?}", src.settings_with_prefix("")?),
        format!("{:?}", copy.settings_with_prefix("")?),
    )?;
    progress("verify", total, total);
    Ok(())
}
