"""The end-of-run summary and table, from node result files (no processes)."""

import json

import pytest

from deploy.views.report import format_table, summarize


def write_node(folder, node, f1, prototype_f1=None, status="finished"):
    by_rule = {"argmax": {"accuracy": f1, "f1": f1}}
    if prototype_f1 is not None:
        by_rule["prototype"] = {"accuracy": prototype_f1, "f1": prototype_f1}
    final = {"accuracy": f1, "f1": f1, "rule": "argmax", "by_rule": by_rule}
    (folder / f"node-{node}.json").write_text(json.dumps({
        "node": node, "status": status, "in_neighbours": [1 - node],
        "out_neighbours": [1 - node], "rounds_done": 1, "bytes_sent": 1000 + node,
        "bytes_received": 1001 - node,
        "rounds": [{"global_test": final, "local_test": final}]}))


def test_the_table_names_the_rule_it_prints_and_shows_the_other_beside_it(tmp_path):
    write_node(tmp_path, 0, 0.9, 0.8)
    write_node(tmp_path, 1, 0.7, 0.6)
    summary = summarize(tmp_path, "run", 2)
    assert summary["mean_global_f1"] == 0.8
    table = format_table(summary)
    header = table.splitlines()[0]
    assert "F1 global" in header and "F1 global (prototype)" in header
    assert "argmax rule" in table  # the rule of the unnamed columns, in the footnote
    total = next(line for line in table.splitlines() if line.startswith("total")).split()
    assert total[:5] == ["total", "2,001", "2,001", "0.8000", "0.8000"]
    assert "0.7000" in total  # the prototype rule's mean, beside the argmax one


def test_a_single_rule_run_has_no_extra_column(tmp_path):
    write_node(tmp_path, 0, 0.9)
    write_node(tmp_path, 1, 0.7)
    table = format_table(summarize(tmp_path, "run", 2))
    assert "prototype" not in table and "F1 global" in table and "argmax rule" in table


def test_a_missing_node_is_shown_as_missing(tmp_path):
    write_node(tmp_path, 0, 0.9, 0.8)
    summary = summarize(tmp_path, "run", 2)
    assert summary["failed_nodes"] == [1]
    assert "missing" in format_table(summary)


def test_a_killed_node_is_dead_and_left_out_of_the_means(tmp_path):
    write_node(tmp_path, 0, 0.9, 0.8)
    write_node(tmp_path, 1, 0.1, 0.1, status="running")  # its file stopped mid-run
    summary = summarize(tmp_path, "run", 2, exit_codes={0: 0, 1: -9})
    assert [r["status"] for r in summary["nodes"]] == ["finished", "dead"]
    assert summary["mean_global_f1"] == 0.9 and summary["failed_nodes"] == [1]
    assert "dead" in format_table(summary)
    # while the launcher still watches it (no exit code yet), a running node is running
    assert summarize(tmp_path, "run", 2)["nodes"][1]["status"] == "running"


def test_stopped_nodes_count_in_the_total_rows_means(tmp_path):
    write_node(tmp_path, 0, 0.9, 0.8, status="stopped")  # `protofed down`, or Ctrl-C
    write_node(tmp_path, 1, 0.7, 0.6, status="stopped")
    summary = summarize(tmp_path, "run", 2, exit_codes={0: 0, 1: 0})
    assert summary["mean_global_f1"] == pytest.approx(0.8)
    table = format_table(summary)
    total = next(line for line in table.splitlines() if line.startswith("total"))
    assert "0.8000" in total and " - " not in f" {total} "
    assert "the mean over the finished nodes and those stopped." in table


def test_report_of_a_missing_run_says_the_folder_does_not_exist(tmp_path, capsys):
    from deploy.cli import main
    code = main(["report", str(tmp_path / "nowhere"), "--results-dir", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "no such run folder" in err and "node-<i>.json" not in err


def test_version_is_printed(capsys):
    from deploy.cli import build_parser
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.startswith("protofed ")


def wide_summary(tmp_path, nodes=20):
    """A Docker run of 20 nodes with two rules and bytes in the hundreds of millions."""
    for node in range(nodes):
        write_node(tmp_path, node, 0.9, 0.8)
        path = tmp_path / f"node-{node}.json"
        record = json.loads(path.read_text())
        record.update(bytes_sent=412_345_678, bytes_received=398_765_432,
                      in_neighbours=list(range(19)), out_neighbours=list(range(19)),
                      interface_bytes={"tx_bytes": 420_000_000, "rx_bytes": 410_000_000})
        path.write_text(json.dumps(record))
    return summarize(tmp_path, "run", nodes)


def test_at_80_columns_no_line_is_wider_and_the_left_out_columns_are_named(tmp_path):
    table = format_table(wide_summary(tmp_path), width=80)
    assert max(map(len, table.splitlines())) <= 80, table
    header = table.splitlines()[0].split("  ")
    kept = [h.strip() for h in header if h.strip()]
    assert kept[0] == "node" and kept[-1] == "status"
    assert {"bytes sent", "bytes received", "F1 global"} <= set(kept)
    assert "iface sent" not in kept and "F1 global (prototype)" not in kept
    notes = " ".join(table.splitlines()[-4:])
    assert "iface sent" in notes and "F1 global (prototype)" in notes and "--wide" in notes


def test_without_a_width_every_column_is_there(tmp_path):
    table = format_table(wide_summary(tmp_path))
    header = table.splitlines()[0]
    for name in ("out/in", "iface sent", "iface received", "acc global", "F1 local",
                 "F1 global (prototype)"):
        assert name in header
    assert "Not shown" not in table and max(map(len, table.splitlines())) > 80


def test_report_fits_the_terminal_it_is_given_and_wide_shows_everything(tmp_path,
                                                                         monkeypatch, capsys):
    from deploy import cli

    wide_summary(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(cli, "write_run_files", lambda run_dir, records: None)
    monkeypatch.setattr(cli, "say_files", lambda files: None)
    assert cli.main(["report", str(tmp_path)]) == 0
    assert max(map(len, capsys.readouterr().out.splitlines())) <= 80
    assert cli.main(["report", str(tmp_path), "--wide"]) == 0
    assert "iface received" in capsys.readouterr().out


def test_beyond_twenty_nodes_the_table_shows_the_extremes_and_all_of_them_with_all(tmp_path):
    """100 nodes: F1 0.500 + node/1000; node 42 failed. The table shows nodes 0-4 (worst),
    95-99 (best) and 42, the totals over all 100, and says how to see every row."""
    for node in range(100):
        write_node(tmp_path, node, 0.5 + node / 1000,
                   status="failed" if node == 42 else "finished")
    summary = summarize(tmp_path, "run", 100)
    table = format_table(summary)
    rows = [line.split()[0] for line in table.splitlines()[2:]
            if line.split() and line.split()[0].isdigit()]
    assert rows == ["0", "1", "2", "3", "4", "42", "95", "96", "97", "98", "99"]
    assert f"{sum(1000 + n for n in range(100)):,}" in table  # bytes sent: every node
    assert "Shown: 11 of 100 nodes" in table and "--all" in table
    every = format_table(summary, every=True)
    assert len([line for line in every.splitlines() if line.split()
                and line.split()[0].isdigit()]) == 100 and "Shown:" not in every
    assert len(format_table(summarize(tmp_path, "run", 20)).splitlines()) == 20 + 5


def test_report_into_a_pipe_closed_early_stops_quietly(tmp_path):
    # `protofed report RUN | head -1`: a table far larger than the pipe's buffer
    import subprocess
    import sys
    # about 100 KB of table against a 64 KiB pipe, read unbuffered one line at a time: the
    # writer is still writing when the pipe closes
    for node in range(1200):
        write_node(tmp_path, node, 0.5)
    with subprocess.Popen([sys.executable, "-m", "deploy.cli", "report", str(tmp_path),
                           "--all", "--wide"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, bufsize=0) as reader:
        assert reader.stdout.readline().startswith(b"node")
        reader.stdout.close()
        err = reader.stderr.read().decode()
        assert reader.wait() == 141
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_a_run_without_a_global_test_set_shows_no_global_f1_and_says_why(tmp_path):
    for node in (0, 1):
        write_node(tmp_path, node, 0.5)
        record = json.loads((tmp_path / f"node-{node}.json").read_text())
        record["rounds"][0]["global_test"] = {"rule": "argmax"}  # nothing to measure on
        (tmp_path / f"node-{node}.json").write_text(json.dumps(record))
    summary = summarize(tmp_path, "r", 2)
    assert [n["global_f1"] for n in summary["nodes"]] == [None, None]
    assert [n["local_f1"] for n in summary["nodes"]] == [0.5, 0.5]
    assert summary["no_global_test"] and summary["mean_global_f1"] is None
    table = format_table(summary)
    assert "No global test set (data.global_test_fraction = 0)" in table
    assert "0.0000" not in table
