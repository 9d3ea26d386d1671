"""A node's record through its output lines: cut into pieces, put back whole, newest wins."""

from node.record_stream import MARKER, RecordAssembler, is_record_line, record_lines


def test_a_record_cut_into_pieces_is_put_back_whole():
    document = {"node": 3, "rounds": [{"round": r, "f1": r / 10} for r in range(40)]}
    lines = record_lines(document, 7, piece_chars=100)
    assert len(lines) > 5 and all(len(line) < 130 for line in lines)
    assert lines[0].startswith(f"{MARKER} 7 1/{len(lines)} ")
    assembler = RecordAssembler()
    assert [assembler.feed(line) for line in lines] == [False] * (len(lines) - 1) + [True]
    assert assembler.latest == document and assembler.sequence == 7


def test_other_lines_half_records_and_older_records_change_nothing():
    assembler = RecordAssembler()
    newer = record_lines({"status": "finished"}, 2, piece_chars=8)
    older = record_lines({"status": "running"}, 1, piece_chars=8)
    for line in ["2026-11-24 node-0 INFO node: round 1/3 done", f"{MARKER} x 1/1 {{}}",
                 f"{MARKER} 5 2/1 {{}}", *newer[:-1]]:
        assert not assembler.feed(line)
    assert assembler.latest is None  # the newer one is not whole yet
    assert [assembler.feed(line) for line in older][-1]  # older but whole: taken for now
    assert assembler.feed(newer[-1]) and assembler.latest == {"status": "finished"}
    assert not any(assembler.feed(line) for line in older)  # older than what it holds
    assert is_record_line(newer[0]) and not is_record_line("node-0 INFO PROTOFED-RECORD")
