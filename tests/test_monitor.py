"""`protofed monitor`: snapshots of a run folder, the command's errors, and the page in a
real headless Chromium against a real 3-node federation."""

import json
import os
import re
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest

from deploy.views.monitor import Monitor
from node.record import Evaluation, NodeRecord, RoundRecord, write_json_atomically
from tests.helpers import protofed, protofed_running, write_config

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_node(folder, node, status="running", rounds=1, sent=None, limits=None):
    record = NodeRecord(node=node, status=status, started_at=1000.0, rounds_total=3,
                        in_link_bandwidth=limits,
                        in_neighbours=[1 - node], out_neighbours=[1 - node],
                        bytes_sent_by_peer=sent or {},
                        rounds=[RoundRecord(round=r, global_test=Evaluation(f1=0.1 * r),
                                            recorded_at=1000.0 + r) for r in range(rounds)])
    write_json_atomically(folder / f"node-{node}.json", record.to_dict())


def test_a_snapshot_says_who_is_dead_stale_or_done(tmp_path):
    (tmp_path / "federation.json").write_text(json.dumps(
        {"config": {"rounds": 3, "algorithm": "fedavg", "topology": {"kind": "ring"}},
         "nodes": [{}, {}]}))
    write_node(tmp_path, 0, sent={"1": {"model": 100, "control": 5}})
    write_node(tmp_path, 1, limits={"0": 5_000_000})  # [links]: 5 Mbit/s from node 0
    now = [2000.0]
    monitor = Monitor(tmp_path, clock=lambda: now[0])
    first = monitor.snapshot()
    assert [n["state"] for n in first["nodes"]] == ["running", "running"]
    assert first["edges"] == [{"from": 0, "to": 1, "bytes": 105, "last": 0,
                               "limit": 5_000_000}]
    assert (first["algorithm"], first["topology"], first["rounds_total"]) == (
        "fedavg", "ring", 3)
    now[0] += 60  # nothing changed for a minute: stale
    write_node(tmp_path, 1, rounds=2, limits={"0": 5_000_000})  # node 1 moved on
    states = [n["state"] for n in monitor.snapshot()["nodes"]]
    assert states == ["stale", "running"]
    (tmp_path / "run.json").write_text(json.dumps({"status": "running",
                                                   "exit_codes": {"0": -9}}))
    assert monitor.snapshot()["nodes"][0]["state"] == "dead"
    (tmp_path / "node-1.json").write_text('{"node": 1, "rounds": [')  # half written
    assert monitor.snapshot()["nodes"][1]["round"] == 1  # the last whole version


@pytest.mark.parametrize("make", ["missing", "not a run"])
def test_monitor_refuses_what_is_not_a_run_in_one_line(tmp_path, make):
    target = tmp_path / "nothing"
    if make == "not a run":
        target.mkdir()
        (target / "notes.txt").write_text("hello")
    done = protofed("monitor", target, "--port", str(free_port()), timeout=60)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert str(target) in done.stderr
    assert ("no such folder" if make == "missing" else "not a run folder") in done.stderr


def test_monitor_on_a_busy_port_says_so_in_one_line(tmp_path):
    write_node(tmp_path, 0)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        done = protofed("monitor", tmp_path, "--port", str(busy.getsockname()[1]),
                        timeout=60)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "in use" in done.stderr


def test_the_monitors_address_is_printed_once_its_page_answers(tmp_path):
    write_node(tmp_path, 0)
    port = free_port()
    with protofed_running("monitor", tmp_path, "--port", str(port)) as process:
        line = process.stderr.readline()  # blocks until the command says where it is
        assert f"127.0.0.1:{port}" in line, line
        # said only once listening: connecting now succeeds at the first try
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


def test_up_with_the_monitor_but_not_its_packages_stops_before_anything_starts(
        tmp_path, monkeypatch, capsys):
    import importlib.util

    from deploy import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "starlette" else real(name, *a))
    config = write_config(tmp_path, tmp_path, "no-monitor")
    assert cli.main(["up", "-c", str(config), "--monitor"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "protofed: the monitor needs starlette and uvicorn, which this " \
                          "environment lacks: pip install starlette uvicorn"
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_the_launcher_says_the_page_started_only_when_its_port_answers():
    import subprocess
    import sys

    from deploy.launch import page_answers

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    assert not page_answers(free_port(), gone)  # ended without listening
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            assert page_answers(listening.getsockname()[1], alive)
        finally:
            alive.kill()
            alive.wait()


def chromium():
    """Headless Chromium that cannot resolve any name but 127.0.0.1's: a request to
    anywhere else fails (and the test below finds none)."""
    if not (CHROMIUM.exists() and DRIVER.exists()):
        pytest.fail("Chromium and chromedriver are not installed (.ci/run installs Debian's "
                    "chromium and chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--window-size=1400,1100", "--disable-dev-shm-usage",
                     "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(str(DRIVER)), options=options)


def page_rows(driver) -> dict[int, dict]:
    """The node table as the page shows it (read in one script: the page redraws it)."""
    cells = driver.execute_script(
        "return [...document.querySelectorAll('#nodes tbody tr')]"
        ".map(row => [...row.cells].map(cell => cell.textContent))")
    return {int(row[0]): {"state": row[1], "round": row[2]} for row in cells}


def page_edges(driver) -> dict[tuple[int, int], int]:
    """The bytes each edge of the page's graph shows."""
    return {(int(u), int(v)): int(b) for u, v, b in driver.execute_script(
        "return [...document.querySelectorAll('#graph line')].map(e => "
        "[e.dataset.from, e.dataset.to, e.dataset.bytes])")}


def page_text(driver, element_id: str) -> str:
    return driver.execute_script(f"return document.getElementById('{element_id}').textContent")


def wait_for(condition, timeout, what):
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


@pytest.mark.browser
def test_the_page_follows_a_real_federation(tmp_path, data_dir):
    name = "watched"
    # far more rounds than the test watches (it stops the run with `protofed down`), of
    # about half a second each (2,000 images a node); once node 2 is dead the others wait
    # for it 1 s a round, not the round timeout
    config = write_config(tmp_path, data_dir, name, nodes=3, rounds=200, algorithm="fedavg",
                          codec="fp32", round_timeout=4, deploy="restarts = 0")
    config.write_text(config.read_text().replace("shutdown = 5", "shutdown = 5\nabsent = 1")
                      .replace("subset = 1500", "subset = 6000"))
    run_dir = tmp_path / "results" / name
    port = free_port()
    driver = chromium()
    try:
        with protofed_running("up", "-c", config, "--run-id", name) as up:
            wait_for(lambda: (run_dir / "federation.json").is_file(), 60, "the run folder")
            with protofed_running("monitor", run_dir, "--port", str(port)) as monitor:
                wait_for(lambda: _answers(port), 30, "the monitor answering")
                driver.get(f"http://127.0.0.1:{port}/")
                rows = wait_for(lambda: len(page_rows(driver)) == 3 and page_rows(driver),
                                30, "three nodes on the page")
                assert set(rows) == {0, 1, 2}
                # a round a node writes shows on the page within 5 s
                now = (_latest(run_dir, 0, minimum=0) or {"round": 0})["round"]
                record = wait_for(lambda: _latest(run_dir, 0, minimum=now + 1), 60,
                                  "a new round")
                seen = wait_for(lambda: _shows(driver, 0, record["round"]), 10,
                                "the round on the page")
                assert seen - record["recorded_at"] <= 5.0
                # a node killed mid-run is shown dead
                pids = json.loads((run_dir / "run.json").read_text())["pids"]
                os.kill(int(pids["2"]), signal.SIGKILL)
                wait_for(lambda: page_rows(driver).get(2, {}).get("state") == "dead", 15,
                         "node 2 shown dead")
                down = protofed("down", name, "--results-dir", tmp_path / "results")
                assert down.returncode == 0, down.stderr
                up.wait(timeout=120)
                # the ended run: every edge's bytes equal the node files' per-peer bytes
                # node 2's kill makes it "failed", the stop of the others "stopped"
                wait_for(lambda: re.search(r"run (stopped|failed)", page_text(driver, "summary")),
                         20, "the run's end on the page")
                files = {}
                for node in range(3):
                    record = json.loads((run_dir / f"node-{node}.json").read_text())
                    for peer, kinds in record["bytes_sent_by_peer"].items():
                        files[(node, int(peer))] = sum(kinds.values())
                # the monitor's next push after the last file brings them to the page
                wait_for(lambda: page_edges(driver) == files, 30,
                         f"the page's edges showing the files' bytes {files}")
                # nothing the page loaded came from anywhere but the monitor
                loaded = driver.execute_script(
                    "return [location.href, ...performance.getEntriesByType('resource')"
                    ".map(e => e.name)]")
                assert loaded and all(url.startswith(f"http://127.0.0.1:{port}/")
                                      for url in loaded), loaded
                shot = tmp_path / "monitor.png"
                driver.save_screenshot(str(shot))
                assert shot.stat().st_size > 10_000
                keep = os.environ.get("PROTOFED_SCREENSHOT_DIR")
                if keep:
                    shutil.copy(shot, Path(keep) / "monitor.png")
                monitor.terminate()
    finally:
        driver.quit()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _latest(run_dir: Path, node: int, minimum: int):
    try:
        record = json.loads((run_dir / f"node-{node}.json").read_text())
    except (OSError, ValueError):
        return None
    rounds = record.get("rounds") or []
    return rounds[-1] if rounds and rounds[-1]["round"] >= minimum else None


def _shows(driver, node: int, round_: int):
    row = page_rows(driver).get(node)
    if row and row["round"].isdigit() and int(row["round"]) >= round_:
        return time.time()
    return None


def test_the_page_names_no_address_but_its_own():
    """Every script, style and link of the page is a path on the monitor itself (the browser
    test checks what a real browser loaded)."""
    from deploy.views.monitor import PAGE

    for path in PAGE.iterdir():
        text = path.read_text()
        urls = [u for u in re.findall(r"(?:https?:)?//[\w.-]+", text)
                if u != "http://www.w3.org"]  # the SVG namespace: a name, never fetched
        assert urls == [], (path.name, urls)
        assert "@import" not in text and "url(" not in text
