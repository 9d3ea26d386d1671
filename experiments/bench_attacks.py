"""What an attacker can cost a node's memory and CPU at the connection level.

    python -m experiments.bench_attacks [--out experiments/reports/robustness] [--seconds 60]

The target is a separate process holding one node's CurveZMQ ROUTER (node 0; in-neighbour
1), as a node has it while it trains: it reads nothing for the whole window. Its resident
memory is sampled every 50 ms and its CPU is split by thread.

- memory: 8 connections with node 1's stolen key, each sending its messages as fast as TCP
  takes them: the issue's attack (2 messages of one 200 MiB frame per connection) and one
  shaped to today's limits (messages of 16 frames just under the frame cap).
- storm: CurveZMQ handshakes with random keys at a fixed rate from another process while
  the target runs a single-threaded CPU loop; its loop throughput against an undisturbed run.

Each attack runs with the node's settings before this report (one 256 MiB frame cap, 64
queued messages per connection, any number of connections per key, no address bans), with
the gate alone (frame cap from the model, 16 queued messages, 3 connections per key per
minute, address bans) and with today's (the gate and the connection guard, which closes a
connection holding more unread bytes than an honest queue can).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import zmq

from experiments.bench_security import free_port
from node.net import gate, transport
from node.net.security import generate_keys, load_keyring, write_keys
from node.net.transport import ZmqTransport
from node.runtime import MESSAGE_MARGIN

# exchange.max_message_bytes = 0 for ProFe's MNIST student (105,194 parameters at fp32)
MODEL_BOUND = 2 * 4 * 105_194 + MESSAGE_MARGIN
SETTINGS = {
    "before": {"bound": 256 * 1024 * 1024, "hwm": 64, "admissions": 1_000_000, "bans": False,
               "guard": False},
    "gate only": {"bound": MODEL_BOUND, "hwm": transport.RECEIVE_HWM,
                  "admissions": gate.ADMISSIONS_PER_KEY, "bans": True, "guard": False},
    "today": {"bound": MODEL_BOUND, "hwm": transport.RECEIVE_HWM,
              "admissions": gate.ADMISSIONS_PER_KEY, "bans": True, "guard": True},
}
ATTACKS = {  # connections, messages per connection, frames per message, bytes per frame
    "issue: 2 x 1 frame of 200 MiB": (8, 2, 1, 200 * 1024 * 1024),
    "16 frames just under the cap": (8, 64, 16, None),
}


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's threads, by name."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = (task / "comm").read_text().strip()
        except FileNotFoundError:  # a thread that ended while they were listed
            continue
        out[name] = out.get(name, 0) + (int(fields[11]) + int(fields[12])) / os.sysconf(
            "SC_CLK_TCK")
    return out


def target(args: argparse.Namespace) -> int:
    """The node side: open the ROUTER under the given settings, then never read."""
    settings = SETTINGS[args.settings]
    transport.RECEIVE_HWM = settings["hwm"]
    if not settings["guard"]:  # no connection is ever over its unread budget
        transport.unread_budget = lambda queued, bound: 1 << 62
    ring = load_keyring(Path(args.keys), 0, 2)
    node = ZmqTransport(0, f"tcp://127.0.0.1:{args.port}", {}, settings["bound"], ring,
                        in_neighbours=[1])
    node.policy = gate.AdmissionPolicy(frozenset({1}), admissions_per_key=settings["admissions"],
                                       ban_after=gate.BAN_AFTER if settings["bans"] else 10**9)
    node.open()
    torch.set_num_threads(1)
    start_rss, peak, samples = rss_bytes(), [0], threading.Event()

    def sample() -> None:
        while not samples.wait(0.05):
            peak[0] = max(peak[0], rss_bytes())

    threading.Thread(target=sample, daemon=True).start()
    print("ready", flush=True)
    work, iterations, started = torch.randn(256, 256), 0, time.monotonic()
    while time.monotonic() - started < args.seconds:
        if args.work:
            for _ in range(50):
                work = (work @ work).tanh()
            iterations += 1
        else:
            time.sleep(0.05)
    samples.set()
    counts = node.security_counts()
    print(json.dumps({"rss_start": start_rss, "rss_peak": max(peak[0], rss_bytes()),
                      "iterations": iterations, "threads_cpu": thread_cpu(),
                      "counts": counts}), flush=True)
    os._exit(0)  # what it holds is not the point: leave without draining it


def start_target(keys: Path, port: int, settings: str, seconds: float,
                 work: bool) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "experiments.bench_attacks", "--target", "--keys", str(keys),
         "--port", str(port), "--settings", settings, "--seconds", str(seconds)]
        + (["--work"] if work else []), stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def finish(process: subprocess.Popen) -> dict:
    out, _ = process.communicate(timeout=600)
    return json.loads(out.strip().splitlines()[-1])


def memory_attack(keys: Path, settings: str, attack: str, seconds: float) -> dict:
    connections, messages, frames, frame_bytes = ATTACKS[attack]
    frame_bytes = frame_bytes or SETTINGS[settings]["bound"] - 1024
    port = free_port()
    process = start_target(keys, port, settings, seconds, work=False)
    ring = load_keyring(keys, 1, 2)  # the stolen key
    context = zmq.Context()
    payload = os.urandom(frame_bytes)
    sockets = []
    for _ in range(connections):
        dealer = context.socket(zmq.DEALER)
        dealer.curve_secretkey, dealer.curve_publickey = ring.secret, ring.public
        dealer.curve_serverkey = ring.publics[0]
        dealer.linger = 0
        dealer.sndhwm = messages
        dealer.connect(f"tcp://127.0.0.1:{port}")
        sockets.append(dealer)
    sent = 0
    for dealer in sockets:
        for _ in range(messages):
            try:
                dealer.send_multipart([payload] * frames, flags=zmq.NOBLOCK, copy=False)
                sent += 1
            except zmq.Again:
                break
    result = finish(process)
    for dealer in sockets:
        dealer.close()
    context.term()
    return {"kind": "memory", "settings": settings, "attack": attack,
            "frame_bytes": frame_bytes, "frames": frames, "messages_queued": sent,
            "rss_growth_bytes": result["rss_peak"] - result["rss_start"], **result}


def storm_attack(keys: Path, settings: str | None, rate: float, seconds: float) -> dict:
    port = free_port()
    process = start_target(keys, port, settings or "today", seconds, work=True)
    storm = None
    if settings is not None:
        storm = subprocess.Popen([sys.executable, "-m", "experiments.bench_attacks", "--storm",
                                  "--port", str(port), "--rate", str(rate),
                                  "--seconds", str(seconds - 2), "--keys", str(keys)],
                                 stdout=subprocess.PIPE, text=True)
    result = finish(process)
    handshakes = int(storm.communicate(timeout=120)[0].split()[0]) if storm else 0
    return {"kind": "storm", "settings": settings or "no attack", "handshakes": handshakes,
            **result}


def storm(args: argparse.Namespace) -> int:
    """Open connections with random keys at `rate` per second, each left to fail."""
    server = load_keyring(Path(args.keys), 0, 2).public
    context, live, count = zmq.Context(), [], 0
    started = time.monotonic()
    while time.monotonic() - started < args.seconds:
        wait = started + count / args.rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        dealer = context.socket(zmq.DEALER)
        dealer.curve_publickey, dealer.curve_secretkey = zmq.curve_keypair()
        dealer.curve_serverkey, dealer.linger = server, 0
        dealer.connect(f"tcp://127.0.0.1:{args.port}")
        live.append(dealer)
        if len(live) > 50:
            live.pop(0).close()
        count += 1
    for dealer in live:
        dealer.close()
    context.term()
    print(count)
    return 0


def report(rows: list[dict], meta: dict) -> str:
    mib = 1024 * 1024
    lines = ["# Connection-level attacks: memory and handshake storms", "",
             (f"Produced by `{meta['command']}` on {meta['machine']}; rebuild the tables "
              "from attacks.json with `--report-only`."), "",
             (f"Memory: the target reads nothing for {meta['memory_seconds']:.0f} s (as while "
              "training); its peak resident memory growth over that window."), "",
             ("| settings | attack | frame cap | messages queued by the attacker | "
             "memory growth | refused repeats | refused keys | connections closed by the guard |"),
             "|---|---|---|---|---|---|---|---|"]
    for row in (r for r in rows if r["kind"] == "memory"):
        lines.append(f"| {row['settings']} | {row['attack']} | "
                     f"{SETTINGS[row['settings']]['bound'] / mib:.1f} MiB | "
                     f"{row['messages_queued']} | {row['rss_growth_bytes'] / mib:,.0f} MiB | "
                     f"{row['counts'].get('refused_repeats', 0)} | "
                     f"{row['counts'].get('refused_keys', 0)} | "
                     f"{row['counts'].get('cut_connections', 0)} |")
    quiet = next(r for r in rows if r["kind"] == "storm" and r["settings"] == "no attack")
    lines += ["", (f"Handshake storm: random keys at {meta['rate']:.0f}/s for "
              f"{meta['seconds'] - 2:.0f} s against a target running a one-thread CPU loop."), "",
              ("| settings | handshakes | loop throughput | slowdown | extra target CPU | "
               "refused keys | banned addresses |"), "|---|---|---|---|---|---|---|"]
    for row in (r for r in rows if r["kind"] == "storm"):
        other = sum(row["threads_cpu"].values()) - sum(quiet["threads_cpu"].values())
        lines.append(f"| {row['settings']} | {row['handshakes']:,} | {row['iterations']} | "
                     f"{100 * (1 - row['iterations'] / quiet['iterations']):.1f}% | "
                     f"{other:.1f} s | {row['counts'].get('refused_keys', 0):,} | "
                     f"{row['counts'].get('banned_addresses', 0)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.bench_attacks",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("experiments/reports/robustness"))
    parser.add_argument("--seconds", type=float, default=60.0, help="storm window")
    parser.add_argument("--memory-seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=float, default=667.0, help="storm handshakes per second")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild attacks.md from attacks.json in --out")
    parser.add_argument("--only", nargs="+", choices=list(SETTINGS), default=list(SETTINGS),
                        help="run these settings; the other rows are kept from attacks.json")
    parser.add_argument("--target", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--storm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keys", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--settings", default="today", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.target:
        return target(args)
    if args.storm:
        return storm(args)
    if args.report_only:
        saved = json.loads((args.out / "attacks.json").read_text())
        (args.out / "attacks.md").write_text(report(saved["rows"], saved["meta"]))
        return 0
    keys = Path(tempfile.mkdtemp()) / "keys"
    write_keys(keys, generate_keys(2))
    store = args.out / "attacks.json"
    kept = [row for row in (json.loads(store.read_text())["rows"] if store.is_file() else [])
            if row["settings"] not in [*args.only, "no attack"]]
    rows = [row for row in kept if row["kind"] == "memory"]
    for settings in args.only:
        for attack in ATTACKS:
            rows.append(memory_attack(keys, settings, attack, args.memory_seconds))
            print(f"memory, {settings}, {attack}: "
                  f"+{rows[-1]['rss_growth_bytes'] / 2**20:.0f} MiB", file=sys.stderr)
    rows += [row for row in kept if row["kind"] == "storm"]
    for settings in (None, *args.only):
        rows.append(storm_attack(keys, settings, args.rate, args.seconds))
        print(f"storm, {settings}: {rows[-1]['iterations']} iterations, "
              f"{rows[-1]['handshakes']} handshakes", file=sys.stderr)
    meta = {"command": "python -m experiments.bench_attacks " + shlex.join(argv or sys.argv[1:]),
            "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
            "python": platform.python_version(), "seconds": args.seconds, "rate": args.rate,
            "memory_seconds": args.memory_seconds}
    args.out.mkdir(parents=True, exist_ok=True)
    order = ["no attack", *SETTINGS]
    rows.sort(key=lambda row: (row["kind"], order.index(row["settings"])))
    store.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (args.out / "attacks.md").write_text(report(rows, meta))
    print(report(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
