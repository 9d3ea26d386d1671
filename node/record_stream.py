"""A node's record as lines of its standard output, for launchers that can read a node's
output but not its files (a Swarm's manager collects every task's output wherever it runs).

Each write of the record becomes lines ``PROTOFED-RECORD <sequence> <part>/<parts> <text>``:
the JSON cut into pieces short enough that no log driver splits them. A record grows with
every round and each line set carries all of it, so once large it goes out only when it has
grown by a tenth since the last one sent, and always when the node has ended
(`worth_streaming`): 1,000 rounds of 7.7 KB each stream 145 MB of record, not 3.9 GB.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from node.record import to_json

MARKER = "PROTOFED-RECORD"
PIECE_CHARS = 8000  # well under the 16 KiB at which Docker's log drivers split a line
EVERY_WRITE_UP_TO = 1_000_000  # characters: a record up to this size goes out at every write
GROWTH = 1.1  # beyond it, once it is this many times the last one sent


def worth_streaming(chars: int, last_sent: int, ended: bool) -> bool:
    """Whether a record of `chars` characters goes out, the last one sent having had
    `last_sent` (0: none yet); a node that has ended always sends its last."""
    return ended or chars <= EVERY_WRITE_UP_TO or chars >= GROWTH * last_sent


def record_lines(document: dict, sequence: int, piece_chars: int = PIECE_CHARS) -> list[str]:
    """The lines carrying `document` as write number `sequence`."""
    return text_lines(to_json(document), sequence, piece_chars)


def text_lines(text: str, sequence: int, piece_chars: int = PIECE_CHARS) -> list[str]:
    """The lines carrying a record's JSON `text` as write number `sequence`."""
    pieces = [text[i:i + piece_chars] for i in range(0, len(text), piece_chars)] or [""]
    return [f"{MARKER} {sequence} {index}/{len(pieces)} {piece}"
            for index, piece in enumerate(pieces, 1)]


@dataclass
class RecordAssembler:
    """Reads output lines and keeps the newest record that arrived whole."""

    latest: dict | None = None
    sequence: int = -1
    _pieces: dict[int, dict[int, str]] = field(default_factory=dict)

    def feed(self, line: str) -> bool:
        """Take one output line; whether it completed a newer record."""
        head, _, rest = line.strip().partition(" ")
        if head != MARKER:
            return False
        try:
            sequence_text, position, piece = (rest.split(" ", 2) + [""])[:3]
            sequence = int(sequence_text)
            index, parts = (int(n) for n in position.split("/"))
        except ValueError:
            return False
        if sequence <= self.sequence or not 1 <= index <= parts:
            return False
        pieces = self._pieces.setdefault(sequence, {})
        pieces[index] = piece
        if len(pieces) < parts:
            return False
        try:
            document = json.loads("".join(pieces[i] for i in range(1, parts + 1)))
        except (ValueError, KeyError):
            return False
        self.latest, self.sequence = document, sequence
        self._pieces = {s: p for s, p in self._pieces.items() if s > sequence}
        return True


def is_record_line(line: str) -> bool:
    """Whether an output line carries part of a record (left out of the saved log)."""
    return line.lstrip().startswith(MARKER + " ")
