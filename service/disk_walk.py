"""Walking the job folders that jobs own: measuring them and removing them, whatever they hold.

A job's account owns its folder and may fill it with anything: a folder nested thousands
deep, names that make paths longer than the kernel takes (``PATH_MAX``), hundreds of
thousands of files, links, folders renamed while they are walked. So the walk here

- is iterative (an explicit stack, no recursion: Python 3.11's ``os.walk`` and
  ``shutil.rmtree`` recurse and raise ``RecursionError`` about 1,000 levels down);
- works relative to open folder descriptors (``openat``/``fstatat``/``unlinkat``), so no
  path is ever longer than one name, and follows no link (``O_NOFOLLOW``);
- keeps at most ``MAX_OPEN`` folders open: deeper, the oldest are closed and opened again
  through ``..`` when the walk climbs back, checked to be the same folder (device and inode),
  else the walk stops with an error rather than wander outside the tree;
- is resumable in slices (:meth:`TreeWalk.advance` with a time budget), so a huge tree costs
  its owner's measurement time and nobody else's.

Only plain files count (their ``st_size``), as ``du --apparent-size`` counts them.
"""
from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass, field

MAX_OPEN = 64            # folders a walk keeps open at once
CHECK_EVERY = 256        # entries between two looks at the clock
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class TreeChanged(OSError):
    """A folder was moved while it was walked: the walk stops instead of following it."""


@dataclass
class _Frame:
    name: str                        # its name in its parent folder
    dev: int
    ino: int
    fd: int | None
    subdirs: list | None = None      # (name, dev, ino) still to visit; None: not listed yet
    listing: object = None           # the scandir iterator while the folder is being listed
    children: list = field(default_factory=list)


class TreeWalk:
    """Measure (or, with ``remove=True``, delete) the tree at ``root``, in slices.

    ``advance(budget)`` walks for about ``budget`` seconds and returns True once the walk is
    over; ``bytes`` is what plain files held (so far), ``error`` why it stopped early, if it did.
    A root that does not exist is an empty tree."""

    def __init__(self, root, remove: bool = False, clock=time.monotonic):
        self.root, self.remove, self.clock = os.fspath(root), remove, clock
        self.bytes = 0
        self.entries = 0
        self.error: str | None = None
        self.done = False
        self._stack: list[_Frame] = []
        self._open = 0
        self._started = False

    def advance(self, budget: float = float("inf")) -> bool:
        if self.done:
            return True
        deadline = self.clock() + budget
        try:
            if not self._started:
                self._started = True
                if not self._start():
                    return self._finish()
            while self._stack:
                if self._step(deadline):
                    return False        # out of time: resumed at the next call
        except OSError as exc:
            self.error = f"{type(exc).__name__}: {exc.strerror or exc}"
        return self._finish()

    def close(self) -> None:
        """Give up (the walk is not wanted any more): release what it holds open."""
        while self._stack:
            self._close(self._stack.pop())
        self.done = True

    # -- the walk ---------------------------------------------------------------------

    def _start(self) -> bool:
        try:
            fd = os.open(self.root, _DIR_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return False
        st = os.fstat(fd)
        self._open += 1
        self._stack.append(_Frame("", st.st_dev, st.st_ino, fd))
        return True

    def _finish(self) -> bool:
        self.close()
        if self.remove and self.error is None:
            try:
                os.rmdir(self.root)
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.error = f"{type(exc).__name__}: {exc.strerror or exc}"
        return True

    def _step(self, deadline: float) -> bool:
        """One move of the walk; True when the time is up."""
        top = self._stack[-1]
        if top.subdirs is None:
            return self._list(top, deadline)
        if top.subdirs:
            name, dev, ino = top.subdirs.pop()
            self._descend(top, name, dev, ino)
            return False
        self._stack.pop()
        parent = self._stack[-1] if self._stack else None
        if parent is not None and parent.fd is None:
            self._reopen_parent(top, parent)
        self._close(top)
        if parent is not None and self.remove:
            _ignore_gone(os.rmdir, top.name, dir_fd=parent.fd)
        return self.clock() >= deadline

    def _list(self, top: _Frame, deadline: float) -> bool:
        if top.listing is None:
            top.listing = os.scandir(top.fd)
        n = 0
        for entry in top.listing:    # type: ignore[attr-defined]
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue            # gone since listed
            self.entries += 1
            if stat.S_ISDIR(st.st_mode):
                top.children.append((entry.name, st.st_dev, st.st_ino))
            else:
                if stat.S_ISREG(st.st_mode):
                    self.bytes += st.st_size
                if self.remove:
                    _ignore_gone(os.unlink, entry.name, dir_fd=top.fd)
            n += 1
            if n % CHECK_EVERY == 0 and self.clock() >= deadline:
                return True         # the listing goes on from here next time
        top.listing.close()         # type: ignore[attr-defined]
        top.listing, top.subdirs, top.children = None, top.children, []
        return False

    def _descend(self, top: _Frame, name: str, dev: int, ino: int) -> None:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=top.fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):   # gone, or a file or link now
                return
            raise
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (dev, ino):   # replaced since it was listed: not what was seen
            os.close(fd)
            return
        self._open += 1
        self._stack.append(_Frame(name, dev, ino, fd))
        if self._open > MAX_OPEN:   # close the oldest open folder but the root's
            for frame in self._stack[1:]:
                if frame.fd is not None:
                    self._close(frame)
                    break

    def _reopen_parent(self, child: _Frame, parent: _Frame) -> None:
        assert child.fd is not None
        fd = os.open("..", _DIR_FLAGS, dir_fd=child.fd)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (parent.dev, parent.ino):
            os.close(fd)
            raise TreeChanged(0, "a folder was moved while it was walked")
        parent.fd = fd
        self._open += 1

    def _close(self, frame: _Frame) -> None:
        if frame.listing is not None:
            frame.listing.close()   # type: ignore[attr-defined]
            frame.listing = None
        if frame.fd is not None:
            os.close(frame.fd)
            frame.fd = None
            self._open -= 1


def _ignore_gone(op, name: str, dir_fd) -> None:
    try:
        op(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def tree_bytes(root) -> int:
    """What the plain files under ``root`` hold (0 when it does not exist)."""
    walk = TreeWalk(root)
    walk.advance()
    return walk.bytes


def remove_tree(root) -> TreeWalk:
    """Delete ``root`` and everything under it; the walk says how many bytes went, or why not."""
    walk = TreeWalk(root, remove=True)
    walk.advance()
    return walk
