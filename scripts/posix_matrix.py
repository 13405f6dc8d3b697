#!/usr/bin/env python3
"""File types x operations, run by one caller in one directory; one line per outcome.

The mount's POSIX matrix (tests/mount_posix_matrix.rs) runs this in a native directory and
in a mount, as root and as other users, and the two outputs must be equal line by line.
Lines hold "ok" or the errno name, and only what is deterministic: modes, owners, link
counts, sizes, explicit times, and whether a time changed. Never inode numbers, devices,
blocks or absolute paths (the script works from inside its directory).

    posix_matrix.py setup DIR --uid U --gid G [--types ...]   (as root: DIR and fixtures)
    posix_matrix.py run DIR [--types ...] [--link-types ...]  (as the caller under test)

Fixtures owned by someone else belong to OTHER_UID; a group no caller is in is FOREIGN_GID;
SUPPLEMENTARY_GID is the group a caller may be in besides its own.
"""

import argparse
import ctypes
import errno
import os
import socket
import stat
import sys
import time

OTHER_UID = 65534
OTHER_GID = 65534
FOREIGN_GID = 4343
# The supplementary group the test gives one of its callers.
SUPPLEMENTARY_GID = 4242

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2

# Explicit times, with nanoseconds, before and after the epoch's 2^31 boundary.
ATIME = (1_600_000_000, 123_456_789)
MTIME = (1_700_000_000, 987_654_321)


def make_file(p):
    fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, b"data")
    os.close(fd)


def make_socket(p):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(p)
    finally:
        s.close()


# One row per file type: how to make one, how to remove it, the mode to give an object
# others may write ("open"), and one they may not ("closed").
TYPES = {
    "file": dict(make=make_file, rm=os.unlink, open=0o666, closed=0o644),
    "dir": dict(make=lambda p: os.mkdir(p, 0o755), rm=os.rmdir, open=0o777, closed=0o755),
    "symlink": dict(make=lambda p: os.symlink("nowhere", p), rm=os.unlink, open=None, closed=None),
    "fifo": dict(make=lambda p: os.mkfifo(p, 0o644), rm=os.unlink, open=0o666, closed=0o644),
    "chardev": dict(
        make=lambda p: os.mknod(p, 0o644 | stat.S_IFCHR, os.makedev(1, 3)),
        rm=os.unlink,
        open=0o666,
        closed=0o644,
    ),
    "blockdev": dict(
        make=lambda p: os.mknod(p, 0o644 | stat.S_IFBLK, os.makedev(7, 0)),
        rm=os.unlink,
        open=0o666,
        closed=0o644,
    ),
    "socket": dict(make=make_socket, rm=os.unlink, open=0o666, closed=0o644),
}
# Every file type; --types narrows the list.
DEFAULT_TYPES = ",".join(TYPES)
# Every type but a directory is hard-linked (a directory is always tried: EPERM everywhere).
DEFAULT_LINK_TYPES = ",".join(t for t in TYPES if t != "dir")


def outcome(f, *args, **kw):
    try:
        f(*args, **kw)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def kind(st):
    m = st.st_mode
    for name, test in (
        ("file", stat.S_ISREG),
        ("dir", stat.S_ISDIR),
        ("symlink", stat.S_ISLNK),
        ("fifo", stat.S_ISFIFO),
        ("chardev", stat.S_ISCHR),
        ("blockdev", stat.S_ISBLK),
        ("socket", stat.S_ISSOCK),
    ):
        if test(m):
            return name
    return "?"


def describe(p):
    """The deterministic part of lstat(p), or the errno name."""
    try:
        st = os.lstat(p)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    k = kind(st)
    out = f"{k} mode={stat.S_IMODE(st.st_mode):04o} uid={st.st_uid} gid={st.st_gid}"
    if k != "dir":
        # A directory's link count and size depend on the file system's layout.
        out += f" nlink={st.st_nlink}"
    if k in ("file", "symlink"):
        out += f" size={st.st_size}"
    if k in ("chardev", "blockdev"):
        out += f" rdev={os.major(st.st_rdev)},{os.minor(st.st_rdev)}"
    return out


def mode_of(p):
    try:
        return f"{stat.S_IMODE(os.lstat(p).st_mode):04o}"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


LIBC = ctypes.CDLL(None, use_errno=True)


def utimensat(p, atime, mtime, nofollow):
    """utimensat(2) with (sec, nsec) pairs, where nsec may be UTIME_NOW or UTIME_OMIT."""
    times = (Timespec * 2)(Timespec(*atime), Timespec(*mtime))
    flags = AT_SYMLINK_NOFOLLOW if nofollow else 0
    if LIBC.utimensat(AT_FDCWD, os.fsencode(p), times, flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), p)


def lchmod(p, mode):
    """fchmodat(2) with AT_SYMLINK_NOFOLLOW (Python has no lchmod on Linux)."""
    if LIBC.fchmodat(AT_FDCWD, os.fsencode(p), mode, AT_SYMLINK_NOFOLLOW) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), p)


def tick():
    # Lets a coarse file-system clock move on, so a change is seen as one.
    time.sleep(0.012)


class Times:
    """Which of a path's times an operation changed."""

    def __init__(self, p):
        self.p = p
        self.before = os.lstat(p)

    def changed(self, what=("m", "c")):
        try:
            after = os.lstat(self.p)
        except OSError as e:
            return errno.errorcode.get(e.errno, str(e.errno))
        parts = []
        for t in what:
            field = f"st_{t}time_ns"
            moved = getattr(after, field) != getattr(self.before, field)
            parts.append(f"{t}time {'changed' if moved else 'unchanged'}")
        return " ".join(parts)


def recent(ns, since):
    """A time the file system set to "now": not before the operation began (less a little
    for coarse clocks) and not in the future."""
    return since - 1_000_000_000 <= ns <= time.time_ns() + 1_000_000_000


class Run:
    def __init__(self, types, link_types):
        self.types = types
        self.link_types = link_types
        self.uid = os.geteuid()
        self.gid = os.getegid()
        groups = [g for g in os.getgroups() if g != self.gid]
        # A group the caller is in besides its own, when it has one.
        self.member_gid = groups[0] if groups else self.gid

    def say(self, *parts):
        print(" ".join(str(p) for p in parts), flush=True)

    def who(self):
        return "root" if self.uid == 0 else "user"

    # -- each type, the caller's own object -------------------------------------------------

    def own_types(self):
        for t in self.types:
            row = TYPES[t]
            p = f"new.{t}"
            r = outcome(row["make"], p)
            self.say(f"[{t}] create:", r, describe(p) if r == "ok" else "")
            if r != "ok":
                # Devices need CAP_MKNOD: the operations run on the one made by setup.
                p = f"made.{t}"
            self.ops_on(t, p)

    def ops_on(self, t, p):
        nofollow = t == "symlink"
        say = lambda op, r: self.say(f"[{t}] {op}:", r)  # noqa: E731

        say("lstat", describe(p))
        # chmod; on a symlink only the no-follow form applies, and Linux refuses it.
        tick()
        tm = Times(p)
        if nofollow:
            r = outcome(lchmod, p, 0o600)
        else:
            r = outcome(os.chmod, p, 0o640)
        say("chmod 0640", f"{r} mode={mode_of(p)} {tm.changed()}")
        if not nofollow:
            r = outcome(os.chmod, p, 0o4755 if t == "file" else 0o1755 if t == "dir" else 0o644)
            say("chmod special bits", f"{r} mode={mode_of(p)}")

        # Ownership: to itself, to another user, to a group it is in and one it is not.
        for label, uid, gid in (
            ("chown self", self.uid, -1),
            ("chown self:self", self.uid, self.gid),
            ("chown -1:-1", -1, -1),
            ("chgrp member", -1, self.member_gid),
            ("chgrp foreign", -1, FOREIGN_GID),
            ("chown other", OTHER_UID, -1),
        ):
            tick()
            tm = Times(p)
            r = outcome(os.chown, p, uid, gid, follow_symlinks=False)
            say(label, f"{r} {describe(p)} {tm.changed(('c',))}")
            # Back to the caller, so every step starts from the same owner.
            outcome(os.chown, p, self.uid, self.gid, follow_symlinks=False)

        # utimensat: explicit, both now, one left alone, both left alone.
        for label, a, m in (
            ("utime explicit", ATIME, MTIME),
            ("utime now now", (0, UTIME_NOW), (0, UTIME_NOW)),
            ("utime omit explicit", (0, UTIME_OMIT), MTIME),
            ("utime explicit omit", ATIME, (0, UTIME_OMIT)),
            ("utime now omit", (0, UTIME_NOW), (0, UTIME_OMIT)),
            ("utime omit now", (0, UTIME_OMIT), (0, UTIME_NOW)),
            ("utime omit omit", (0, UTIME_OMIT), (0, UTIME_OMIT)),
        ):
            # A known starting point, far from now, so "now" is told apart.
            utimensat(p, (1_000_000_000, 5), (1_100_000_000, 7), nofollow)
            tick()
            tm = Times(p)
            since = time.time_ns()
            r = outcome(utimensat, p, a, m, nofollow)
            st = os.lstat(p)
            shown = []
            for name, want, got in (("atime", a, st.st_atime_ns), ("mtime", m, st.st_mtime_ns)):
                if want[1] == UTIME_NOW:
                    shown.append(f"{name}={'now' if recent(got, since) else 'not-now'}")
                else:
                    shown.append(f"{name}={got // 10**9}.{got % 10**9:09d}")
            same = "a=m" if st.st_atime_ns == st.st_mtime_ns else "a!=m"
            now_c = "c=m" if st.st_ctime_ns == st.st_mtime_ns else "c!=m"
            say(label, f"{r} {' '.join(shown)} {same} {now_c} {tm.changed(('c',))}")
        # The no-follow flag on a symlink; without it the (dangling) target is meant.
        if nofollow:
            say("utime follow", outcome(utimensat, p, ATIME, MTIME, False))

        # Hard links: to every type the mount links today, and a directory.
        if t in self.link_types or t == "dir":
            tick()
            tm = Times(p)
            r = outcome(os.link, p, f"{p}.link", follow_symlinks=False)
            say("link", f"{r} {describe(p)} {tm.changed(('c',))} link={describe(p + '.link')}")
            # Tried after a refused link too (ENOENT), so the lines stay aligned.
            tick()
            tm = Times(p)
            r = outcome(os.unlink, p + ".link")
            say("unlink other name", f"{r} {describe(p)} {tm.changed(('c',))}")

        # rename within the directory: the object's ctime and the directory's times move.
        tick()
        tm, dm = Times(p), Times(".")
        r = outcome(os.rename, p, f"{p}.moved")
        tm.p = f"{p}.moved"
        say("rename", f"{r} {describe(p + '.moved')} {tm.changed(('c',))} dir {dm.changed()}")
        p = f"{p}.moved"

        # Removing it the wrong way, then the right way.
        wrong = os.unlink if t == "dir" else os.rmdir
        say("remove wrong way", outcome(wrong, p))
        tick()
        dm = Times(".")
        say("remove", f"{outcome(TYPES[t]['rm'], p)} {describe(p)} dir {dm.changed()}")

    # -- other users' objects -------------------------------------------------------------

    def others(self):
        for t in self.types:
            nofollow = t == "symlink"
            p = f"theirs.{t}"
            say = lambda op, r: self.say(f"[{t} of another user] {op}:", r)  # noqa: E731
            say("lstat", describe(p))
            r = outcome(lchmod if nofollow else os.chmod, p, 0o600)
            say("chmod", f"{r} mode={mode_of(p)}")
            r = outcome(os.chown, p, self.uid, -1, follow_symlinks=False)
            say("chown to caller", f"{r} {describe(p)}")
            r = outcome(os.chown, p, -1, self.gid, follow_symlinks=False)
            say("chgrp to caller's group", f"{r} {describe(p)}")
            r = outcome(utimensat, p, ATIME, MTIME, nofollow)
            say("utime explicit", r)
            for q, label in ((p, "writable"), (f"closed.{t}", "not writable")):
                tick()
                tm = Times(q)
                r = outcome(utimensat, q, (0, UTIME_NOW), (0, UTIME_NOW), nofollow)
                say(f"utime now now ({label})", f"{r} {tm.changed()}")
                r = outcome(utimensat, q, (0, UTIME_OMIT), (0, UTIME_NOW), nofollow)
                say(f"utime omit now ({label})", r)

    # -- set-user-ID and set-group-ID ---------------------------------------------------------

    def setid(self):
        say = lambda op, r: self.say(f"[setid] {op}:", r)  # noqa: E731
        # chown by the owner (or root) clears set-user-ID, and set-group-ID when the file
        # is group-executable; a directory keeps both.
        for p in ("own.suid", "own.sgid-x", "own.sgid", "own.suid-sgid-x", "own.dir-sgid"):
            r = outcome(os.chown, p, self.uid, -1)
            say(f"chown {p}", f"{r} {describe(p)}")
        # A write or truncate clears them unless the writer has CAP_FSETID (root here), for
        # the owner and for others alike.
        for p in (
            "own.w-suid",
            "theirs.suid",
            "theirs.sgid-x",
            "theirs.sgid",
            "theirs.both",
            "theirs.both-nx",
            "theirs.both-nx-own-group",
            "theirs.both-nx-supplementary",
        ):
            tick()
            tm = Times(p)
            try:
                fd = os.open(p, os.O_WRONLY | os.O_APPEND)
                os.write(fd, b"more")
                os.close(fd)
                r = "ok"
            except OSError as e:
                r = errno.errorcode.get(e.errno, str(e.errno))
            say(f"write {p}", f"{r} {describe(p)} {tm.changed()}")
        r = outcome(os.truncate, "theirs.trunc", 1)
        say("truncate theirs.trunc", f"{r} {describe('theirs.trunc')}")
        # chmod g+s by an owner not in the file's group: the bit is dropped, no error.
        for p in ("own.foreign", "own.foreign-dir"):
            r = outcome(os.chmod, p, 0o2775)
            say(f"chmod g+s {p}", f"{r} {describe(p)}")
        r = outcome(os.chmod, "own.member", 0o2775)
        say("chmod g+s own.member", f"{r} {describe('own.member')}")
        # In a set-group-ID directory, new entries take its group, and directories its bit.
        for t in self.types:
            q = f"sgid-dir/{t}"
            r = outcome(TYPES[t]["make"], q)
            say(f"create in sgid-dir {t}", f"{r} {describe(q) if r == 'ok' else ''}")

    # -- sticky directories -------------------------------------------------------------------

    def sticky(self):
        for d in ("sticky-other", "sticky-own"):
            self.say(f"[{d}] lstat:", describe(d))
            for t in self.types:
                say = lambda op, r: self.say(f"[{d} {t}] {op}:", r)  # noqa: E731
                rm = TYPES[t]["rm"]
                say("remove another's entry", f"{outcome(rm, f'{d}/a.{t}')} {describe(f'{d}/a.{t}')}")
                r = outcome(os.rename, f"{d}/b.{t}", f"{d}/b.{t}.moved")
                say("rename another's entry away", f"{r} {describe(f'{d}/b.{t}')}")
                r = outcome(os.rename, f"{d}/mine.{t}", f"{d}/c.{t}")
                say("rename over another's entry", f"{r} {describe(f'{d}/c.{t}')}")
                say("remove own entry", outcome(rm, f"{d}/own.{t}"))


def setup(root, uid, gid, types):
    """As root: the caller's directory and the fixtures owned by others."""
    os.umask(0o022)
    os.mkdir(root, 0o755)
    os.chown(root, uid, gid)
    os.chdir(root)

    def make(p, t, mode, owner, group):
        try:
            TYPES[t]["make"](p)
        except OSError as e:
            sys.exit(f"setup: making {p} ({t}): {errno.errorcode.get(e.errno, e.errno)}")
        os.chown(p, owner, group, follow_symlinks=False)
        if mode is not None and t != "symlink":
            os.chmod(p, mode)

    for t in types:
        row = TYPES[t]
        make(f"made.{t}", t, None, uid, gid)
        make(f"theirs.{t}", t, row["open"], OTHER_UID, OTHER_GID)
        make(f"closed.{t}", t, row["closed"], OTHER_UID, OTHER_GID)
    for p, mode, owner in (
        ("own.suid", 0o4755, uid),
        ("own.sgid-x", 0o2755, uid),
        ("own.sgid", 0o2745, uid),
        ("own.suid-sgid-x", 0o6755, uid),
        ("own.w-suid", 0o4755, uid),
        ("theirs.suid", 0o4666, OTHER_UID),
        ("theirs.sgid-x", 0o2676, OTHER_UID),
        ("theirs.sgid", 0o2666, OTHER_UID),
        ("theirs.both", 0o6676, OTHER_UID),
        ("theirs.both-nx", 0o6666, OTHER_UID),
        ("theirs.both-nx-own-group", 0o6666, OTHER_UID),
        ("theirs.both-nx-supplementary", 0o6666, OTHER_UID),
        ("theirs.trunc", 0o4666, OTHER_UID),
    ):
        make(p, "file", mode, owner, gid if owner == uid else OTHER_GID)
    os.chown("theirs.both-nx-own-group", OTHER_UID, gid)
    os.chown("theirs.both-nx-supplementary", OTHER_UID, SUPPLEMENTARY_GID)
    for p in ("theirs.both-nx-own-group", "theirs.both-nx-supplementary"):
        os.chmod(p, 0o6666)
    make("own.dir-sgid", "dir", 0o2755, uid, gid)
    make("own.foreign", "file", 0o0775, uid, FOREIGN_GID)
    make("own.foreign-dir", "dir", 0o0775, uid, FOREIGN_GID)
    make("own.member", "file", 0o0775, uid, gid)
    make("sgid-dir", "dir", 0o2777, OTHER_UID, FOREIGN_GID)
    for d, owner in (("sticky-other", OTHER_UID), ("sticky-own", uid)):
        make(d, "dir", 0o1777, owner, OTHER_GID)
        for t in types:
            for n in ("a", "b", "c"):
                make(f"{d}/{n}.{t}", t, TYPES[t]["open"], OTHER_UID, OTHER_GID)
            make(f"{d}/mine.{t}", t, None, uid, gid)
            make(f"{d}/own.{t}", t, None, uid, gid)
    print("setup ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=["setup", "run"])
    ap.add_argument("dir")
    ap.add_argument("--uid", type=int, default=0)
    ap.add_argument("--gid", type=int, default=0)
    ap.add_argument("--types", default=DEFAULT_TYPES, help=f"of {','.join(TYPES)}")
    ap.add_argument("--link-types", default=DEFAULT_LINK_TYPES, help="types to hard-link")
    a = ap.parse_args()
    types = [t for t in a.types.split(",") if t]
    unknown = [t for t in types if t not in TYPES]
    if unknown:
        ap.error(f"unknown types {unknown}; known: {','.join(TYPES)}")
    if a.phase == "setup":
        setup(a.dir, a.uid, a.gid, types)
        return
    os.umask(0o022)
    os.chdir(a.dir)
    r = Run(types, [t for t in a.link_types.split(",") if t])
    r.say(f"caller {r.who()} uid={r.uid} gid={r.gid} member_gid={r.member_gid}")
    r.own_types()
    r.others()
    r.setid()
    r.sticky()


if __name__ == "__main__":
    sys.exit(main())
