"""What the command prints around the end table: its width, where the files went, the one
warning every command that starts nodes gives."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys

from deploy.launch import insecure_warning
from deploy.views.pictures import RunFiles


def table_width(wide: bool) -> int | None:
    """How wide the end table may be: the terminal's width (or $COLUMNS); no limit with
    --wide or when the output goes to a file or a pipe."""
    if wide:
        return None
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def say_files(files: RunFiles) -> None:
    """Where the per-round CSV and the pictures are (or how to get the pictures)."""
    print(f"per-round CSV: {files.csv}", file=sys.stderr)
    if files.pictures:
        print("pictures: " + ", ".join(str(p) for p in files.pictures if p.suffix == ".png")
              + " (and .svg)", file=sys.stderr)
    else:
        print(f"protofed: {files.hint}", file=sys.stderr)


def warn_if_insecure(config) -> None:
    """Say it loudly, once, on the terminal: nothing between the nodes is authenticated."""
    warning = insecure_warning(config)
    if warning:
        print(f"protofed: WARNING: {warning}", file=sys.stderr)


class LosableStream:
    """The launcher's stdout or stderr, which may go away while the run goes on (`protofed
    up | head`, a `tee` ended by Ctrl-C, a closed terminal): from the first failed write
    on, what is written goes nowhere, and nothing is raised."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.lost = False

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                return self._stream.write(text)
            except OSError:  # EPIPE from a closed pipe, EIO from a closed terminal
                self._lose()
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self._stream.flush()
            except OSError:
                self._lose()

    def _lose(self) -> None:
        self.lost = True
        try:  # what the stream still buffers, flushed at exit, then goes nowhere too
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def outlive_the_terminal() -> None:
    """Let `protofed up` watch its run to the end, and write its summary, whatever becomes
    of its terminal: writes to a closed pipe or terminal are dropped, and a hang-up (the
    terminal closed) is ignored. Ctrl-C and `kill` still stop the run."""
    streams = {}
    for name in ("stdout", "stderr"):
        old = getattr(sys, name)
        if not isinstance(old, LosableStream):
            streams[id(old)] = LosableStream(old)
            setattr(sys, name, streams[id(old)])
    for handler in logging.getLogger().handlers:  # set up before `up` began
        if isinstance(handler, logging.StreamHandler) and id(handler.stream) in streams:
            handler.setStream(streams[id(handler.stream)])
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
