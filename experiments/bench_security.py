"""What CurveZMQ costs: TCP bytes and time per message, with and without security.

    python -m experiments.bench_security [--out experiments/reports/security]

One node sends messages of a ProFe student's size (and a prototype message's) to another
over loopback through a byte-counting TCP relay, so the figures are the exact TCP payload
bytes both ways (handshake included), not the application's own count.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from node.net.message import encode_message
from node.net.security import generate_keys, load_keyring, write_keys
from node.net.transport import ZmqTransport

# ProFe's MNIST student (CNN 8/16, 105,194 parameters) at int16, and one prototype message.
SIZES = {"model (105,194 int16 values)": {"w": torch.randn(105_194)},
         "prototypes (10 x 128 int16)": {"p": torch.randn(10, 128)}}


class Relay:
    """A TCP relay from a local port to `target`, counting the bytes in each direction."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.counts = {"to_receiver": 0, "to_sender": 0}
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for source, sink, key in ((client, server, "to_receiver"),
                                      (server, client, "to_sender")):
                threading.Thread(target=self._pump, args=(source, sink, key), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, key: str) -> None:
        while True:
            try:
                data = source.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self.counts[key] += len(data)
            try:
                sink.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(secure: bool, frames: list[bytes], messages: int) -> dict:
    """Send `messages` copies of `frames` one by one, each answered; bytes and seconds."""
    port = free_port()
    relay = Relay(("127.0.0.1", port))
    rings = [None, None]
    if secure:
        folder = Path(tempfile.mkdtemp())
        write_keys(folder, generate_keys(2))
        rings = [load_keyring(folder, i, 2) for i in range(2)]
    receiver = ZmqTransport(0, f"tcp://127.0.0.1:{port}", {}, 1 << 28, rings[0],
                            in_neighbours=[1]).open()
    sender = ZmqTransport(1, f"tcp://127.0.0.1:{free_port()}",
                          {0: f"tcp://127.0.0.1:{relay.port}"}, 1 << 28, rings[1]).open()
    latencies = []
    try:
        for _ in range(messages + 1):  # the first message also pays the handshake
            started = time.perf_counter()
            sender.send(0, frames)
            while receiver.receive(5.0) is None:
                pass
            receiver.reply(1, [b"ok"])
            while sender.receive(5.0) is None:
                pass
            latencies.append(time.perf_counter() - started)
        time.sleep(0.2)  # let the relay count the last bytes
    finally:
        sender.close(0)
        receiver.close(0)
        relay.close()
    payload = sum(len(f) for f in frames)
    total = relay.counts["to_receiver"] + relay.counts["to_sender"]
    return {"secure": secure, "messages": messages + 1, "payload_bytes": payload,
            "tcp_bytes_total": total, "tcp_bytes_per_message": total / (messages + 1),
            "overhead_bytes_per_message": total / (messages + 1) - payload - 2,
            "round_trip_ms_median": 1000 * statistics.median(latencies[1:]),
            "first_round_trip_ms": 1000 * latencies[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.bench_security",
                                     description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("experiments/reports/security"))
    parser.add_argument("--messages", type=int, default=200)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rows = []
    for label, tensors in SIZES.items():
        frames = encode_message(1, 1, "model", tensors, codec="int16")
        for secure in (False, True):
            row = measure(secure, frames, args.messages)
            row["message"] = label
            rows.append(row)
            print(f"{label}, {'curve' if secure else 'none'}: {row['tcp_bytes_per_message']:.0f} "
                  f"B/message, {row['round_trip_ms_median']:.2f} ms", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"command": "python -m experiments.bench_security " + " ".join(argv or sys.argv[1:]),
            "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} "
                       "cores", "python": platform.python_version()}
    (args.out / "bench.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = ["# What CurveZMQ costs", "", f"Produced by `{meta['command']}` on {meta['machine']}.",
             "", ("Bytes are TCP payload bytes both ways through a counting relay, averaged over "
             "every message including the first, which also carries the connection's "
             "handshake; each message is answered by a 2-byte reply. Times are the median "
             "round trip (send, receive, reply) over loopback, handshake excluded."), "",
             ("| message | security | app bytes | TCP bytes / message | overhead / message | "
             "round trip (median ms) | first round trip (ms) |"),
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['message']} | {'curve' if row['secure'] else 'none'} | "
                     f"{row['payload_bytes']:,} | {row['tcp_bytes_per_message']:,.0f} | "
                     f"{row['overhead_bytes_per_message']:,.0f} | "
                     f"{row['round_trip_ms_median']:.2f} | {row['first_round_trip_ms']:.1f} |")
    (args.out / "bench.md").write_text("\n".join(lines) + "\n")
    print(args.out / "bench.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
