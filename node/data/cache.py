"""Decoded datasets kept as .npy files beside the data, mapped instead of decoded again.

A cache folder holds `images.npy` (uint8, N first), `labels.npy` (int64 [N]) and
`cache.json`: the format version, the source files' sizes, mtimes and sha256, and the
arrays' dtypes, shapes and sha256. The arrays are opened with `np.load(mmap_mode="r")`, so
a process reads only the pages of the samples it indexes, and those pages are clean,
file-backed and shared by every process on the machine through the page cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

log = logging.getLogger(__name__)

CACHE_FORMAT = 2  # 2: MNIST-style images kept [N, H, W]
CACHE_FOLDER = "protofed-cache"
SIDECAR = "cache.json"
ARRAY_NAMES = ("images", "labels")
CACHE_ENV = "PROTOFED_CACHE_DIR"

Arrays = tuple[np.ndarray, np.ndarray]


def cache_folders(root: Path, folder: str, name: str) -> list[Path]:
    """Where `name`'s cache may live, in order: beside the data, then the fallback folder."""
    return [root / folder / CACHE_FOLDER, fallback_home(root) / name]


def fallback_home(root: Path) -> Path:
    """$PROTOFED_CACHE_DIR, else $XDG_CACHE_HOME/protofed/datasets/<digest of the data dir>."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return base / "protofed" / "datasets" / key


def source_stamp(root: Path, sources: list[Path]) -> dict[str, dict[str, int]]:
    """Size and mtime (ns) of each source file, keyed by its path relative to root."""
    stamp = {}
    for path in sources:
        info = path.stat()
        stamp[_relative(path, root)] = {"size": info.st_size, "mtime_ns": info.st_mtime_ns}
    return stamp


def cached_arrays(name: str, root: Path, folder: str, sources: list[Path],
                  decode: Callable[[], Arrays]) -> tuple[Arrays, Path | None]:
    """The dataset's (images, labels) mapped from a valid cache, else decoded and cached.

    Returns the arrays and the cache folder they are mapped from (None: decoded in memory
    because no cache folder could be written).
    """
    stamp = source_stamp(root, sources)
    folders = cache_folders(root, folder, name)
    problems = []
    for directory in folders:
        arrays, problem = open_cache(directory, stamp)
        if arrays is not None:
            return arrays, directory
        if problem:
            problems.append(f"{directory}: {problem}")
    if problems:
        log.warning("%s: rebuilding the decoded-array cache (%s)", name, "; ".join(problems))
    images, labels = decode()
    unwritable = []
    for directory in folders:
        try:
            write_cache(directory, images, labels, root, sources)
        except OSError as exc:
            unwritable.append(f"{directory} ({exc.strerror or exc})")
            continue
        arrays, problem = open_cache(directory, stamp)
        if arrays is not None:
            if unwritable:
                log.info("%s: cache written to %s (cannot write %s)", name, directory,
                         "; ".join(unwritable))
            else:
                log.info("%s: decoded-array cache written to %s", name, directory)
            return arrays, directory
        unwritable.append(f"{directory} ({problem} after writing)")
    log.warning("%s: no cache folder is writable (%s): decoded into memory; set %s to a "
                "writable folder to map it instead", name, "; ".join(unwritable), CACHE_ENV)
    return (images, labels), None


def open_cache(directory: Path, stamp: dict[str, dict[str, int]]) -> tuple[Arrays | None, str]:
    """The mapped arrays of a valid cache, else None and why ('' when there is none)."""
    sidecar = directory / SIDECAR
    if not sidecar.is_file():
        leftovers = [n for n in ARRAY_NAMES if (directory / f"{n}.npy").exists()]
        return None, f"damaged ({SIDECAR} missing)" if leftovers else ""
    try:
        meta = json.loads(sidecar.read_text())
        if meta.get("format") != CACHE_FORMAT:
            return None, f"format {meta.get('format')} is not {CACHE_FORMAT}"
        recorded = {path: {k: entry[k] for k in ("size", "mtime_ns")}
                    for path, entry in meta["sources"].items()}
        if recorded != stamp:
            return None, "the source files changed"
        arrays = tuple(_mapped(directory / f"{key}.npy", meta["arrays"][key])
                       for key in ARRAY_NAMES)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"damaged ({type(exc).__name__}: {exc})"
    images, labels = arrays
    if images.ndim < 2 or labels.shape != (len(images),):
        return None, f"damaged (images {images.shape}, labels {labels.shape})"
    return (images, labels), ""


def _mapped(path: Path, expected: dict[str, Any]) -> np.ndarray:
    """The .npy file mapped read-only, checked against its sidecar entry and its size."""
    array = np.load(path, mmap_mode="r", allow_pickle=False)
    if array.dtype.str != expected["dtype"] or list(array.shape) != expected["shape"]:
        raise ValueError(f"{path.name} holds {array.dtype.str} {list(array.shape)}, "
                         f"{SIDECAR} says {expected['dtype']} {expected['shape']}")
    size = path.stat().st_size
    if size != array.offset + array.nbytes:
        raise ValueError(f"{path.name} has {size} bytes, its header needs "
                         f"{array.offset + array.nbytes}")
    return np.asarray(array)  # a plain ndarray view of the mapping


def write_cache(directory: Path, images: np.ndarray, labels: np.ndarray, root: Path,
                sources: list[Path]) -> None:
    """Write the arrays then the sidecar, each atomically (tmp file, fsync, rename)."""
    made = make_dirs(directory)
    try:
        stamp = source_stamp(root, sources)
        meta: dict[str, Any] = {"format": CACHE_FORMAT, "arrays": {}, "sources": {
            _relative(path, root): {**stamp[_relative(path, root)], "sha256": _sha256(path)}
            for path in sources}}
        for key, array in zip(ARRAY_NAMES, (images, labels), strict=True):
            digest = atomic_write(directory / f"{key}.npy",
                                  lambda out, a=array: np.save(out, a, allow_pickle=False))
            meta["arrays"][key] = {"dtype": array.dtype.str, "shape": list(array.shape),
                                   "sha256": digest}
        text = json.dumps(meta, indent=1).encode()
        atomic_write(directory / SIDECAR, lambda out: out.write(text))
    except BaseException:
        remove_empty(made)
        raise


def atomic_write(dest: Path, fill: Callable[[BinaryIO], object],
                 verify: Callable[[Path], None] | None = None) -> str:
    """Write dest through a uniquely named tmp file in its folder (fsync, `verify` of the
    whole file if given, then rename onto dest), so racing writers each leave a whole file
    and a failure leaves none; return the content's sha256."""
    descriptor, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.",
                                            suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(descriptor, "wb") as raw:
            out = _HashingWriter(raw)
            fill(out)
            raw.flush()
            os.fsync(raw.fileno())
        if verify is not None:
            verify(tmp)
        tmp.chmod(0o644)  # mkstemp makes 0600; nodes in containers may run as another user
        tmp.replace(dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(dest.parent)
    return out.digest.hexdigest()


class _HashingWriter:
    """A write-only file object that hashes what passes through it."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()

    def write(self, chunk: bytes) -> int:
        self.digest.update(chunk)
        return self.raw.write(chunk)


def make_dirs(directory: Path) -> list[Path]:
    """mkdir -p; return the folders it created, deepest first."""
    missing = []
    current = directory
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    directory.mkdir(parents=True, exist_ok=True)
    return missing


def remove_empty(folders: list[Path]) -> None:
    """Remove the given folders (deepest first) where they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (best effort)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _sha256(path: Path) -> str:
    with path.open("rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def _relative(path: Path, root: Path) -> str:
    """path relative to root when inside it (the same in a container), else absolute."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
