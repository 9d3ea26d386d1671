"""Codec speed against memory speed: encode + decode of one fp32 tensor, one thread; decode
alone, and the check every received message gets at the door.

    python -m experiments.bench_codecs [--elements 10000000] [--repeats 7]

Writes experiments/reports/codecs/bench.{json,md}. Each figure is the best of `repeats`
runs, in GB/s of fp32 input (4 bytes per element) for the encode + decode round trip,
beside each codec's payload as a share of the fp32 bytes (normal values: int8's DEFLATE
gains more on trained weights, see experiments/reports/paper).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from quant.codecs import CODECS, check, decode, encode

OUT = Path(__file__).resolve().parent / "reports" / "codecs"


def best_seconds(work: Callable[[], object], repeats: int) -> float:
    """The fastest of `repeats` timed calls (the least disturbed by the rest of the machine)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def numpy_int16(x: np.ndarray) -> np.ndarray:
    """A plain numpy int16 quantizer round trip in float32 (the floor a codec can aim at)."""
    delta = float(np.abs(x).max()) / 32767
    return (np.rint(x / delta).astype(np.int16).astype(np.float32)) * delta


def round_trip(x: torch.Tensor, codec: str) -> torch.Tensor:
    spec, payload = encode("w", x, codec)
    return decode(spec, payload)


def measure(elements: int, repeats: int) -> dict[str, float]:
    torch.set_num_threads(1)
    x = torch.randn(elements, generator=torch.Generator().manual_seed(0))
    array = x.numpy()
    gigabytes = elements * 4 / 1e9
    cases = {
        "memcpy (numpy copy)": lambda: array.copy(),
        "fp16 cast round trip (torch)": lambda: x.half().float(),
        "plain numpy int16 quantizer": lambda: numpy_int16(array),
        **{f"protofed {codec} encode+decode": (lambda c=codec: round_trip(x, c))
           for codec in CODECS},
    }
    # what a receiver spends on a message it reads (decode) and on one it only lets in
    # (check: every message at the door, node.net.message)
    for codec in CODECS:
        spec, payload = encode("w", x, codec)
        cases[f"protofed {codec} decode"] = lambda s=spec, p=payload: decode(s, p)
        cases[f"protofed {codec} check at the door"] = lambda s=spec, p=payload: check(s, p)
    return {name: round(gigabytes / best_seconds(work, repeats), 3)
            for name, work in cases.items()}


def payload_shares(elements: int) -> dict[str, float]:
    """Each codec's payload bytes over the fp32 bytes of the same normal tensor."""
    x = torch.randn(elements, generator=torch.Generator().manual_seed(0))
    return {codec: round(len(encode("w", x, codec)[1]) / (elements * 4), 4) for codec in CODECS}


def size_arguments(description: str, argv: list[str] | None) -> argparse.Namespace:
    """--elements (of the fp32 tensor) and --repeats (the best of them is kept)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--elements", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = size_arguments(__doc__.splitlines()[0], argv)
    rates = measure(args.elements, args.repeats)
    shares = payload_shares(args.elements)
    OUT.mkdir(parents=True, exist_ok=True)
    document = {"elements": args.elements, "repeats": args.repeats, "threads": 1,
                "machine": f"{platform.machine()}, {torch.get_num_threads()} thread",
                "gb_per_s": rates, "payload_share_of_fp32": shares}
    (OUT / "bench.json").write_text(json.dumps(document, indent=1) + "\n")
    lines = ["# Codec speed", "",
             (f"Produced by `python -m experiments.bench_codecs` ({args.elements:,} fp32 "
             f"elements, one thread, best of {args.repeats})."), "",
             "| what | GB/s of fp32 input |", "|---|---|"]
    lines += [f"| {name} | {rate:.2f} |" for name, rate in rates.items()]
    lines += ["", "| codec | payload / fp32 bytes |", "|---|---|"]
    lines += [f"| {codec} | {share:.4f} |" for codec, share in shares.items()]
    (OUT / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
