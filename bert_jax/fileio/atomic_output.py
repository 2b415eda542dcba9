"""Write outputs under a temporary name and rename on success.

A crash, a kill or an exception never leaves a half-written file or folder
under the final name, and an existing output is replaced only when asked.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile


def check_writable(path: str, overwrite: bool, flag: str = "--overwrite") -> None:
    """Raises FileExistsError if `path` exists and `overwrite` is off."""
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"{path} already exists; pass {flag} to replace it")


def _set_default_mode(path: str, mode: int) -> None:
    # mkstemp/mkdtemp make owner-only entries; outputs get the mode a plain
    # open()/mkdir() would give under the user's umask.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, mode & ~umask)


@contextlib.contextmanager
def atomic_directory(path: str, overwrite: bool = False):
    """Yields a temporary folder beside `path` that becomes `path` on success."""
    path = os.path.abspath(path)
    check_writable(path, overwrite)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.tmp-", dir=parent)
    _set_default_mode(tmp, 0o777)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.lexists(path):
        # Move the old output aside, then the new one in: two renames, so a
        # crash between them leaves `path` empty and the old output complete
        # in .NAME.old-*/x (never a half-written one under `path`).
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.old-", dir=parent)
        os.rename(path, os.path.join(old, "x"))
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, path)


@contextlib.contextmanager
def atomic_file(path: str, overwrite: bool = False, mode: str = "w"):
    """Yields a file object whose content appears at `path` only on success."""
    path = os.path.abspath(path)
    check_writable(path, overwrite)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.tmp-", dir=parent)
    _set_default_mode(tmp, 0o666)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
