"""A block of a test run with an unprivileged effective user, in this process: what a file's mode refuses.

Root reads every file (CAP_DAC_OVERRIDE), so a test of an unreadable file run as root (CI runs the suite as root,
for the VM lab) would test nothing. As root, `unprivileged()` sets the real and effective group and user to
nobody (65534) for the block, the saved ones left at 0: the kernel clears the effective capabilities when the
effective user leaves 0 and gives them back from the permitted set when it returns (capabilities(7), "Effect of
user ID changes on capabilities"), so the block sees the file modes as any user does, and the test ends as root
again. As any other user, the block runs as that user. No process is started (the unit tier's rule holds).

`shared_tmp()` is a directory such a user can reach: pytest's tmp_path lies under /tmp/pytest-of-<user>, mode
0700, which nobody cannot traverse.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

NOBODY = 65534


@contextlib.contextmanager
def unprivileged() -> Iterator[int]:
    """The effective user for the block: nobody when this process is root, else this user; yields its uid."""
    if os.geteuid() != 0:
        yield os.geteuid()
        return
    # the real ids too (os.access and access(2) check those), the saved ones kept at 0 to come back by
    os.setresgid(NOBODY, NOBODY, 0)
    os.setresuid(NOBODY, NOBODY, 0)
    try:
        yield NOBODY
    finally:
        os.setresuid(0, 0, 0)
        os.setresgid(0, 0, 0)


@contextlib.contextmanager
def shared_tmp() -> Iterator[Path]:
    """A fresh directory under the system's temp dir, mode 0755 (readable and traversable by every user)."""
    path = Path(tempfile.mkdtemp(prefix="dlrun-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
