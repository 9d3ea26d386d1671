"""`protofed monitor`: snapshots of a run folder, the command's errors, and the page in a
real headless Chromium against a real 3-node federation."""

import contextlib
import itertools
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


def scored(f1):
    """A measured evaluation (argmax rule) of this F1."""
    return Evaluation(f1=f1, rule="argmax", by_rule={"argmax": {"f1": f1}})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_node(folder, node, status="running", rounds=1, sent=None, limits=None):
    record = NodeRecord(node=node, status=status, started_at=1000.0, rounds_total=3,
                        in_link_bandwidth=limits,
                        in_neighbours=[1 - node], out_neighbours=[1 - node],
                        bytes_sent_by_peer=sent or {},
                        rounds=[RoundRecord(round=r, global_test=scored(0.1 * r),
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
                          codec="fp32", round_timeout=4, deploy="restarts = 0", absent=1)
    config.write_text(config.read_text().replace("subset = 1500", "subset = 6000"))
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


def write_peer_node(folder, node, peers, rounds, status="running", away=None, limits=None):
    """A node that sent every peer a model and a control message in each of `rounds` rounds
    (0, 1, ...), its F1 rising."""
    def sent(round_):
        return {str(p): {"model": 1_200_000 + 1_000 * node, "control": 50 + round_}
                for p in peers}

    history = [RoundRecord(round=r, global_test=scored(0.3 + 0.04 * r + 0.01 * node),
                           recorded_at=1000.0 + r, bytes_sent_by_peer=sent(r))
               for r in range(rounds)]
    totals = {str(p): {kind: sum(x.bytes_sent_by_peer[str(p)][kind] for x in history)
                       for kind in ("model", "control")} for p in peers}
    record = NodeRecord(node=node, status=status, started_at=1000.0, rounds_total=50,
                        in_neighbours=list(peers), out_neighbours=list(peers),
                        in_link_bandwidth=limits, away_rounds=away,
                        bytes_sent_by_peer=totals, rounds=history)
    write_json_atomically(folder / f"node-{node}.json", record.to_dict())


def write_federation(folder, nodes, rounds=50):
    (folder / "federation.json").write_text(json.dumps(
        {"config": {"rounds": rounds, "algorithm": "fedavg",
                    "topology": {"kind": "fully_connected"}},
         "nodes": [{} for _ in range(nodes)]}))


def others(node, nodes=3):
    return [p for p in range(nodes) if p != node]


def test_a_round_not_every_working_node_reported_is_not_charted(tmp_path):
    write_federation(tmp_path, 3)
    write_peer_node(tmp_path, 0, others(0), rounds=3)  # rounds 0, 1, 2
    write_peer_node(tmp_path, 1, others(1), rounds=2)  # round 2 not reported yet
    write_peer_node(tmp_path, 2, others(2), rounds=1, status="left")  # gone: waits for nothing
    monitor = Monitor(tmp_path, clock=lambda: 1010.0)

    def charted():
        per_round = monitor.snapshot()["per_round"]
        lengths = {len(per_round["mean_f1"]), len(per_round["consensus"]),
                   *(len(values) for values in per_round["bytes_by_kind"].values())}
        assert lengths == {len(per_round["rounds"])}
        assert all(r in per_round["rounds"] for points in per_round["f1"].values()
                   for r, _ in points)
        return per_round["rounds"]

    assert charted() == [0, 1]
    write_peer_node(tmp_path, 1, others(1), rounds=3)
    assert charted() == [0, 1, 2]
    # away in rounds 3 and 4 as the scenario says: node 1 holds nothing back there
    write_peer_node(tmp_path, 1, others(1), rounds=3, away=[3, 4])
    write_peer_node(tmp_path, 0, others(0), rounds=4)
    assert charted() == [0, 1, 2, 3]
    # the run ended: every round is as whole as it will ever be
    write_peer_node(tmp_path, 0, others(0), rounds=6, status="stopped")
    write_peer_node(tmp_path, 1, others(1), rounds=5, status="stopped")
    assert charted() == [0, 1, 2, 3, 4, 5]


def asgi_get(application, path):
    """(status, headers, body) of GET `path`, asked of the ASGI application in this process."""
    import asyncio

    answer = {"body": b""}
    asked = []

    async def receive():
        if asked:  # the request has no more to it: wait as a client that stays connected
            await asyncio.Event().wait()
        asked.append(True)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "root_path": "", "query_string": b"", "headers": [],
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1)}
    asyncio.run(application(scope, receive, send))
    return answer["status"], answer["headers"], answer["body"]


def test_the_downloads_offer_every_output_the_run_folder_has(tmp_path):
    from deploy.views.monitor import app
    from deploy.views.pictures import DYNAMIC_PICTURES, FORMATS, PICTURES

    write_federation(tmp_path, 2)
    write_node(tmp_path, 0)
    write_node(tmp_path, 1)
    outputs = ["rounds.csv", "summary.json", "federation.json", "run.json",
               *(f"{name}.{fmt}" for name in (*PICTURES, *DYNAMIC_PICTURES)
                 for fmt in FORMATS)]
    assert {"bytes_per_round.svg", "consensus_per_round.png", "edge_activity.svg"} <= set(
        outputs)
    absent = "f1_per_round.svg"
    for name in outputs:
        if name not in ("federation.json", absent):
            (tmp_path / name).write_text(f"the {name} of the run")
    (tmp_path / absent).unlink(missing_ok=True)
    for stranger in ("notes.png", "secret.txt", "node-0.json.bak"):
        (tmp_path / stranger).write_text("not the run's")
    monitor = Monitor(tmp_path)
    offered = monitor.snapshot()["downloads"]
    assert sorted(offered) == sorted(set(outputs) - {absent})
    application = app(monitor)
    for name in [*offered, "node-0.json", "node-1.json"]:
        status, _, body = asgi_get(application, f"/files/{name}")
        assert status == 200, name
        assert body == (tmp_path / name).read_bytes()
    for name in ("notes.png", "secret.txt", "node-0.json.bak", absent, "../run.json"):
        assert asgi_get(application, f"/files/{name}")[0] == 404, name


def test_the_page_has_an_icon_of_its_own(tmp_path):
    from deploy.views.monitor import PAGE, app

    write_node(tmp_path, 0)
    links = re.findall(r'<link rel="icon"[^>]*href="([^"]+)"', (PAGE / "index.html").read_text())
    assert len(links) == 1, links
    status, headers, body = asgi_get(app(Monitor(tmp_path)), links[0])
    assert status == 200
    assert headers["content-type"].startswith("image/")
    assert b"<svg" in body and len(body) < 4_000


def relative_luminance(colour: str) -> float:
    """WCAG 2's relative luminance of #rgb or #rrggbb."""
    digits = colour.lstrip("#")
    if len(digits) == 3:
        digits = "".join(2 * d for d in digits)
    channels = [int(digits[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    darker, lighter = sorted((relative_luminance(a), relative_luminance(b)))
    return (lighter + 0.05) / (darker + 0.05)


NAMED = {"white": "#ffffff", "black": "#000000"}


def css_rules(text: str) -> list[tuple[str, str]]:
    """(selector, declarations) of every rule of a style sheet."""
    return re.findall(r"([^{}]+)\{([^}]*)\}", re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL))


def colours_in(text: str) -> list[str]:
    return [NAMED.get(c, c) for c in re.findall(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b|\bwhite\b"
                                                 r"|\bblack\b", text)]


def test_every_state_colour_reads_on_the_page_background():
    from deploy.views.monitor import PAGE

    script = (PAGE / "monitor.js").read_text()
    states = re.findall(r'"(\w+)"', re.search(r"const STATES = \[([^\]]*)\]", script)[1])
    rules = css_rules((PAGE / "monitor.css").read_text())
    backgrounds = {c for selector, body in rules if selector.strip() in ("body", "section")
                   for c in colours_in(" ".join(re.findall(r"background[\w-]*:\s*([^;]+)",
                                                           body)))}
    assert backgrounds, "no page background in monitor.css"
    colours = {state: set() for state in states}
    for selector, body in rules:
        for state in re.findall(r"\.state-(\w+)", selector):
            if state in colours:  # not .state-cell
                colours[state].update(colours_in(body))
    for state, colour in re.findall(r'\b(\w+): "(#[0-9a-fA-F]{3,6})"', script):
        if state in colours:
            colours[state].add(colour)
    assert all(colours.values()), {s: c for s, c in colours.items() if not c}
    low = [(state, colour, background, round(contrast(colour, background), 2))
           for state, found in colours.items() for colour in found
           for background in backgrounds if contrast(colour, background) < 4.5]
    assert low == [], low


def write_mesh(folder, nodes):
    """A run of `nodes` fully connected nodes, 13 rounds in, one edge limited, some of the
    run's outputs written."""
    write_federation(folder, nodes)
    for node in range(nodes):
        write_peer_node(folder, node, others(node, nodes), rounds=13,
                        limits={"2": 5_000_000} if node == 1 else None)
    for name in ("rounds.csv", "summary.json", "bytes_per_round.png", "bytes_per_round.svg",
                 "consensus_per_round.png", "topology.png"):
        (folder / name).write_text(name)
    return folder


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def page_of(driver, folder, nodes):
    """`protofed monitor` of `folder`, its page loaded in `driver` once its graph is drawn."""
    port = free_port()
    with protofed_running("monitor", folder, "--port", str(port)):
        wait_for(lambda: _answers(port), 60, "the monitor answering")
        driver.get(f"http://127.0.0.1:{port}/")
        wait_for(lambda: driver.execute_script(
            "return document.querySelectorAll('#graph circle').length") == nodes, 30,
            "the graph drawn")
        yield driver


@pytest.fixture(scope="module")
def mesh_page(browser, tmp_path_factory):
    """The page of 3 fully connected nodes: (driver, run folder)."""
    folder = write_mesh(tmp_path_factory.mktemp("mesh"), 3)
    with page_of(browser, folder, 3):
        yield browser, folder


def intersect(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.browser
@pytest.mark.parametrize("nodes, labelled", [(3, 6), (5, 14)])
def test_edge_labels_overlap_no_other_label_nor_node(browser, tmp_path, nodes, labelled):
    with page_of(browser, write_mesh(tmp_path, nodes), nodes) as driver:
        # one script: the page redraws the graph at each push
        shown = driver.execute_script(
            "const boxes = s => [...document.querySelectorAll(s)].map(e => {"
            "const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; });"
            "return [boxes('#graph .edge-label'), boxes('#graph .node-f1'),"
            "boxes('#graph circle')]")
    labels, f1s, circles = ([tuple(b) for b in found] for found in shown)
    assert len(f1s) == len(circles) == nodes
    # every edge of a small graph has its label; a denser one labels at least most
    assert labelled <= len(labels) <= nodes * (nodes - 1)
    assert all(right > left and bottom > top for left, top, right, bottom in labels)
    crossing = [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:] + f1s + circles
                if intersect(a, b)]
    assert crossing == [], crossing


def tick_texts(driver, chart: str) -> tuple[list[str], list[str]]:
    return tuple(driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)",
        f"#{chart} .tick-{axis}") for axis in "xy")


@pytest.mark.browser
def test_every_chart_has_numbered_ticks_on_both_axes(mesh_page):
    driver, _ = mesh_page
    for chart in ("f1-chart", "bytes-chart"):
        xs, ys = tick_texts(driver, chart)
        rounds = [int(x) for x in xs]  # whole rounds
        assert len(rounds) >= 3 and rounds[0] == 0 and rounds[-1] >= 10, xs
        steps = {b - a for a, b in itertools.pairwise(rounds)}
        assert len(steps) == 1 and steps.pop() in (1, 2, 5, 10, 20, 50, 100), xs
        assert len(ys) >= 3, ys
    assert tick_texts(driver, "f1-chart")[1] == ["0", "0.2", "0.4", "0.6", "0.8", "1"]
    _, ys = tick_texts(driver, "bytes-chart")
    assert ys[0] == "0" and all(re.fullmatch(r"\d+(\.\d+)? (B|KB|MB|GB)", y) for y in ys[1:]), ys
    # 3 nodes each sending 2 models of 1.2 MB a round: about 7.2 MB a round at the top
    assert ys[-1].endswith(" MB") and float(ys[-1].split()[0]) >= 7.2, ys


@pytest.mark.browser
def test_the_page_links_every_download_the_run_folder_has(mesh_page):
    driver, folder = mesh_page
    expected = Monitor(folder).snapshot()["downloads"]
    links = wait_for(lambda: driver.execute_script(
        "return [...document.querySelectorAll('#downloads a')].map(a => a.pathname)"), 10,
        "the download links")
    assert sorted(links) == sorted(f"/files/{name}" for name in expected)
