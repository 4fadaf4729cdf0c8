"""The folder walk of the header scan: every entry met, regular files to read, the rest with a reason.

Links are not followed unless they point at a regular file inside the folder, folders already visited are
not entered again, and an unreadable folder is reported instead of silently skipped.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from sitecal._dicomfile import file_kind
from sitecal.errors import DataError

_UNREADABLE_FOLDER = "unreadable folder ({}): its files were not read"
_OUTSIDE = "symbolic link pointing outside data.dicom_dir (not followed)"


def walk(root: Path) -> Iterator[tuple[Path, str | None]]:
    """Every entry under ``root`` with why it is not read, or ``None`` for a file to read.

    ``os.scandir`` reports each entry's type without following links, so nothing is opened here. A link is
    followed only to a regular file inside ``root``; folder links are never followed, and a folder met a
    second time (a bind mount of its parent) is not entered again, so the walk cannot loop.
    """
    real_root = os.path.realpath(root)
    stack, visited = [root], set[tuple[int, int]]()
    while stack:
        folder = stack.pop()
        try:
            status = os.stat(folder)
            identity = (status.st_dev, status.st_ino)
            if identity in visited:
                yield folder, "folder already scanned under another path (not read twice)"
                continue
            visited.add(identity)
            with os.scandir(folder) as it:
                found = list(it)
        except OSError as exc:
            if folder == root:
                raise DataError(
                    f"{root}: the DICOM folder cannot be read ({_why(exc)}). Check data.dicom_dir in the "
                    "protocol and that the account running sitecal may read it."
                ) from exc
            yield folder, unreadable_folder_reason(exc)
            continue
        for entry in found:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            try:
                if entry.is_symlink():
                    problem = _link_problem(path, real_root)
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(path)
                    continue
                elif entry.is_file(follow_symlinks=False):
                    problem = None
                else:
                    problem = f"not a regular file ({file_kind(entry.stat(follow_symlinks=False).st_mode)})"
            except OSError as exc:  # removed or made unreadable while the walk ran
                problem = f"unreadable file ({_why(exc)})"
            yield path, problem


def unreadable_folder_reason(exc: OSError) -> str:
    """The exclusion reason of a subfolder ``os.scandir`` could not list.

    >>> unreadable_folder_reason(PermissionError(13, "Permission denied"))
    'unreadable folder (permission denied): its files were not read'
    """
    return _UNREADABLE_FOLDER.format(_why(exc))


def _why(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    return exc.strerror.lower() if exc.strerror else type(exc).__name__


def _link_problem(link: Path, real_root: str) -> str | None:
    """Why a symbolic link is not read, or ``None`` when it leads to a regular file inside the root."""
    try:
        mode = os.stat(link).st_mode  # follows the link
    except FileNotFoundError:
        return "dangling symbolic link (its target does not exist)"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop (not followed)"
        return f"unreadable file ({_why(exc)})"
    target = os.path.realpath(link)
    if os.path.commonpath([real_root, target]) != real_root:
        return _OUTSIDE
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "symbolic link to a folder (not followed: its files are read where they are)"
    return f"not a regular file (symbolic link to a {file_kind(mode)})"
