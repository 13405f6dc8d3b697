//! Errno mapping: the errno value a POSIX caller expects for each model error.

use super::Errno;
use crate::error::Error;

/// Map a model error to the errno a POSIX caller expects.
pub fn errno(e: &Error) -> Errno {
    use rustix::io::Errno as E;
    let e = match e {
        Error::PathNotFound { .. } => E::NOENT,
        Error::NotADirectory { .. } => E::NOTDIR,
        Error::IsADirectory { .. } => E::ISDIR,
        Error::DirectoryNotEmpty { .. } => E::NOTEMPTY,
        Error::AlreadyExists { .. } => E::EXIST,
        Error::HardLinkNotAllowed { .. } => E::PERM,
        Error::QuotaExceeded { .. } => E::DQUOT,
        Error::FileTooLarge { .. } => E::FBIG,
        Error::DiskFull { .. } => E::NOSPC,
        Error::InvalidPath { .. } | Error::InvalidName { .. } | Error::InvalidArgument { .. } => {
            E::INVAL
        }
        _ => E::IO,
    };
    e.raw_os_error()
}

pub(super) fn err(e: rustix::io::Errno) -> Errno {
    e.raw_os_error()
}
