"""Ingest: the files of a local source folder, and the text of a file (plain functions).

Every path under a folder is indexed or reported: a dangling symlink, a symlink loop, a folder
that cannot be listed and a path that is not a regular file (a FIFO would block the reader) each
get a reason naming the path, instead of being skipped without a word.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# (byte-order mark, codec): UTF-32 before UTF-16, whose little-endian mark starts UTF-32's
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))


def decode_text(raw: bytes) -> str:
    """Bytes to text, or ValueError with a reason a person can act on. UTF-8 (with or without a
    byte-order mark); UTF-16 and UTF-32 with one."""
    if not raw.strip():
        raise ValueError("empty file")
    for bom, codec in _BOMS:
        if raw.startswith(bom):
            try:
                text = raw.decode(codec)  # the codec reads the mark and drops it
            except UnicodeDecodeError as exc:
                raise ValueError(f"{codec.upper()} text (it starts with a {codec.upper()} byte-order mark) with invalid "
                                 f"data at byte {exc.start}; convert it to UTF-8") from None
            return _not_blank(text)
    if b"\x00" in raw[:8192]:
        guess = _utf16_without_bom(raw[:8192])
        if guess:
            raise ValueError(f"looks like {guess} text without a byte-order mark (NUL bytes between ASCII letters); "
                             "convert it to UTF-8, or save it with a byte-order mark")
        raise ValueError("binary file (contains NUL bytes)")
    bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0  # a UTF-8 byte-order mark is not text
    try:
        text = raw[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start + bom
        raise ValueError(f"not valid UTF-8 (byte {at}: {raw[at:at + 1]!r}); convert it to UTF-8") from None
    return _not_blank(text)


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("empty file (whitespace only)")
    return text


def _utf16_without_bom(head: bytes) -> str | None:
    """'UTF-16LE' or 'UTF-16BE' when NUL bytes alternate with ASCII ones, as in English UTF-16."""
    head = head[: len(head) // 2 * 2]
    if len(head) < 4:
        return None
    even, odd = head[0::2], head[1::2]
    for name, zeros, text in (("UTF-16LE", odd, even), ("UTF-16BE", even, odd)):
        if zeros.count(0) >= 0.9 * len(zeros) and sum(32 <= b < 127 or b in (9, 10, 13) for b in text) >= 0.9 * len(text):
            return name
    return None


def folder_files(root: Path, report) -> list[Path]:
    """The regular files under `root`, symlinks followed, hidden names (.git, .cache) skipped,
    in path order. `report(path, reason)` is called for every other path."""
    found: list[Path] = []
    walked: dict[tuple[int, int], Path] = {}  # (device, inode) of each folder read -> the path it was read by
    stack, linked = [root], []  # folders reached through a symlink are read after the real ones
    while stack or linked:
        folder = stack.pop() if stack else linked.pop(0)
        try:
            info = folder.stat()
            entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
        except OSError as exc:
            report(folder, f"cannot list this folder: {exc.strerror or exc}")
            continue
        if (info.st_dev, info.st_ino) in walked:
            real, parent = os.path.realpath(folder), os.path.realpath(folder.parent)
            if parent == real or parent.startswith(real.rstrip(os.sep) + os.sep):
                report(folder, f"symlink loop: {folder.name} -> {os.readlink(folder)} leads back to a folder above it; not followed")
            else:
                report(folder, f"symlink to a folder already read as {walked[(info.st_dev, info.st_ino)]}; not read twice")
            continue
        walked[(info.st_dev, info.st_ino)] = folder
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            try:
                if entry.is_dir():
                    (linked if entry.is_symlink() else stack).append(path)
                elif entry.is_file():
                    found.append(path)
                else:
                    report(path, _not_a_file(path))
            except OSError as exc:
                report(path, _not_a_file(path) if path.is_symlink() else f"cannot read: {exc.strerror or exc}")
    return sorted(found)


def _not_a_file(path: Path) -> str:
    """Why a path that is neither a folder nor a regular file was not read."""
    if path.is_symlink():
        target = os.readlink(path)
        try:
            path.stat()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return f"symlink loop: {path.name} -> {target} never reaches a file"
            return f"dangling symlink: {path.name} -> {target}, which does not exist"
    return "not a regular file (a FIFO, socket or device); not read"
