"""ZeroMQ loopback against the codecs: what moving one model costs, wire and codec together.

    python -m experiments.bench_zmq [--elements 10000000] [--repeats 7]

Sends one message of each codec's payload for a normal fp32 tensor of `elements` values
over ZeroMQ TCP on 127.0.0.1 (PUSH to PULL, a thread each), in plaintext and with
CurveZMQ (protofed's default, `deploy.security = "curve"`), and times the codec's encode +
decode on one thread. Writes experiments/reports/zmq/bench.{json,md}; each time is the best
of `repeats`. The break-even link speed of a codec is the fp32 bytes it saves divided by
the extra codec time it costs over fp32: below that speed it moves a model sooner.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import torch
import zmq

from experiments.bench_codecs import best_seconds, round_trip, size_arguments
from quant.codecs import CODECS, encode

OUT = Path(__file__).resolve().parent / "reports" / "zmq"


def loopback_seconds(payload: bytes, repeats: int, curve: bool) -> float:
    """Best time from handing `payload` to a PUSH socket until a PULL socket on 127.0.0.1
    has all of it (a fresh pair of sockets, connected once, for all the repeats)."""
    context = zmq.Context()
    pull, push = context.socket(zmq.PULL), context.socket(zmq.PUSH)
    if curve:
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        pull.curve_server, pull.curve_secretkey = True, server_secret
        push.curve_serverkey, push.curve_publickey = server_public, client_public
        push.curve_secretkey = client_secret
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push.connect(f"tcp://127.0.0.1:{port}")
    arrived = threading.Semaphore(0)

    def receive() -> None:
        for _ in range(repeats + 1):
            pull.recv(copy=False)
            arrived.release()

    receiver = threading.Thread(target=receive)
    receiver.start()
    push.send(b"x" * 16)  # the handshake (and key exchange) happens before any timing
    arrived.acquire()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        push.send(payload, copy=False)
        arrived.acquire()
        times.append(time.perf_counter() - started)
    receiver.join()
    push.close(linger=0)
    pull.close(linger=0)
    context.term()
    return min(times)


def measure(elements: int, repeats: int) -> dict:
    torch.set_num_threads(1)
    x = torch.randn(elements, generator=torch.Generator().manual_seed(0))
    rows = {}
    for codec in CODECS:
        payload = encode("w", x, codec)[1]
        # to the microsecond: a small payload crosses loopback in well under 0.1 ms, which
        # rounding to 4 decimals recorded as 0 s
        rows[codec] = {
            "payload_bytes": len(payload),
            "codec_s": round(best_seconds(lambda c=codec: round_trip(x, c), repeats), 6),
            "plain_s": round(loopback_seconds(bytes(payload), repeats, curve=False), 6),
            "curve_s": round(loopback_seconds(bytes(payload), repeats, curve=True), 6),
        }
    fp32 = rows["fp32"]
    for codec, row in rows.items():
        saved = fp32["payload_bytes"] - row["payload_bytes"]
        extra = row["codec_s"] - fp32["codec_s"]
        # A codec no slower than fp32 pays off on any link; one that saves nothing on none.
        row["break_even_mb_per_s"] = (None if codec == "fp32" or saved <= 0 or extra <= 0
                                      else round(saved / extra / 1e6, 1))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = size_arguments(__doc__.splitlines()[0], argv)
    rows = measure(args.elements, args.repeats)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench.json").write_text(json.dumps(
        {"elements": args.elements, "repeats": args.repeats, "zmq": zmq.zmq_version(),
         "codecs": rows}, indent=1) + "\n")
    fp32_mb = args.elements * 4 / 1e6
    lines = ["# Moving one model: codec and ZeroMQ loopback", "",
             (f"Produced by `python -m experiments.bench_zmq` ({args.elements:,} fp32 elements "
              f"= {fp32_mb:,.0f} MB, best of {args.repeats}; ZeroMQ {zmq.zmq_version()} over "
              "TCP on 127.0.0.1; codec on one thread)."), "",
             ("| codec | payload (MB) | encode+decode (ms) | loopback plain (ms) | "
              "loopback CurveZMQ (ms) | pays off below (MB/s) |"),
             "|---|---|---|---|---|---|"]
    for codec, row in rows.items():
        even = row["break_even_mb_per_s"]
        even_text = ("-" if codec == "fp32" else "any link" if even is None
                     else f"{even:,.0f}")
        lines.append(f"| {codec} | {row['payload_bytes'] / 1e6:.1f} | "
                     f"{row['codec_s'] * 1e3:.0f} | {row['plain_s'] * 1e3:.0f} | "
                     f"{row['curve_s'] * 1e3:.0f} | {even_text} |")
    (OUT / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
