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


def test_a_large_record_goes_out_once_grown_by_a_tenth_and_always_at_the_end(tmp_path,
                                                                            capsys):
    """Each record sent carries the whole record, so sending every write of a growing one
    streams the square of its size: once past EVERY_WRITE_UP_TO characters it goes out when
    it has grown by GROWTH, and the ended node's last record always."""
    from node.record import NodeRecord, RoundRecord
    from node.record_stream import EVERY_WRITE_UP_TO, GROWTH, worth_streaming
    from node.runtime import Recorder

    assert worth_streaming(EVERY_WRITE_UP_TO, 10 ** 9, False)  # small: every write
    assert not worth_streaming(EVERY_WRITE_UP_TO + 1, EVERY_WRITE_UP_TO, False)
    assert worth_streaming(int(GROWTH * 2 * EVERY_WRITE_UP_TO), 2 * EVERY_WRITE_UP_TO, False)
    assert worth_streaming(EVERY_WRITE_UP_TO + 1, EVERY_WRITE_UP_TO + 1, True)
    record = NodeRecord(node=1, status="running")
    recorder = Recorder(tmp_path / "node-1.json", record, stream=True)
    sketch = "x" * 99_399  # each round adds 100,000 characters to a 446-character record
    sent = []
    for round_ in range(30):
        record.rounds.append(RoundRecord(round=round_, model_sketch=sketch))
        record.status = "finished" if round_ == 29 else "running"
        recorder.write()
        assembler = RecordAssembler()
        fresh = [line for line in capsys.readouterr().out.splitlines() if assembler.feed(line)]
        if fresh:
            sent.append(len(assembler.latest["rounds"]))
    # n rounds: 446 + 100,000 n characters. Every write up to 9 rounds (900,446 <= 1 MB);
    # 10 (1,000,446 >= 1.1 x 900,446); not 11 (1,100,446 < 1.1 x 1,000,446 = 1,100,490.6)
    # but 12; then 14, 16, 18, 20, 23 (2,200,446 < 1.1 x 2,000,446), 26, 29; and the last
    assert sent == [*range(1, 11), 12, 14, 16, 18, 20, 23, 26, 29, 30]
