//! A host file's extended attributes, read without following a symlink.

use std::path::Path;

/// The value of extended attribute `name` of `path`, if it has one.
pub(crate) fn get(path: &Path, name: impl AsRef<[u8]>) -> Option<Vec<u8>> {
    let name = name.as_ref();
    let mut buf = vec![0u8; 256];
    loop {
        match rustix::fs::lgetxattr(path, name, &mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Some(buf);
            }
            Err(rustix::io::Errno::RANGE) if buf.len() < (1 << 16) => buf.resize(buf.len() * 4, 0),
            Err(_) => return None,
        }
    }
}

/// The names of `path`'s extended attributes, as the kernel lists them (not necessarily
/// UTF-8).
pub(crate) fn names(path: &Path) -> std::io::Result<Vec<Vec<u8>>> {
    let mut buf = vec![0u8; 1024];
    loop {
        match rustix::fs::llistxattr(path, &mut buf) {
            Ok(n) => {
                return Ok(buf[..n]
                    .split(|b| *b == 0)
                    .filter(|s| !s.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect());
            }
            Err(rustix::io::Errno::RANGE) if buf.len() < (1 << 20) => buf.resize(buf.len() * 4, 0),
            Err(e) => return Err(e.into()),
        }
    }
}
