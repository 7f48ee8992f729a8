"""A manifest in every GePPO checkpoint: each file's size and SHA-256, and the iteration saved.

Written last, through a temporary file and a rename, so a checkpoint with a manifest is
complete; ``--resume`` then checks a checkpoint's files against it without unpickling anything
(a pickle runs code as it loads, and a stray one must not run before Ray starts), and finds the
newest complete checkpoint and its iteration without Tune's experiment state, which lags.

Pure Python; no Ray.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

#: The manifest's file name in a checkpoint folder.
MANIFEST = "geppo_checkpoint.json"


def write_manifest(folder: str | os.PathLike, **metadata: Any) -> None:
    """List every file under ``folder`` (size, SHA-256) with ``metadata`` (e.g. the training
    iteration), atomically."""
    folder = Path(folder)
    files = {
        str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    write_json_atomically(folder / MANIFEST, {**metadata, "files": files})


def read_manifest(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest of ``folder``, or None if it has none or it cannot be parsed."""
    try:
        return json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def damaged_files(folder: str | os.PathLike, manifest: dict[str, Any]) -> list[tuple[Path, str]]:
    """The files of ``folder`` that differ from ``manifest``, each with what differs."""
    folder = Path(folder)
    damaged = []
    for name, expected in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            damaged.append((path, "it is missing"))
        elif path.stat().st_size != expected["size"]:
            damaged.append((path, f"it has {path.stat().st_size:,} of its {expected['size']:,} bytes"))
        elif _sha256(path) != expected["sha256"]:
            damaged.append((path, "its contents differ from the checksum written when it was saved"))
    return damaged


def write_atomically(path: Path, write: Callable[[TextIO], None]) -> None:
    """``write(file)`` into a temporary file beside ``path``, flushed to disk, then renamed over
    ``path``: a crash or a full disk leaves the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json_atomically(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, atomically (:func:`write_atomically`)."""
    write_atomically(path, lambda f: json.dump(data, f, indent=1))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
