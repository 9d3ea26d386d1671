"""What the command prints around the end table: its width, where the files went, the one
warning every command that starts nodes gives."""

from __future__ import annotations

import os
import shutil
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
