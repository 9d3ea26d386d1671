"""Every benchmark of the runtime in one command: codec speed, moving one model (codec and
ZeroMQ loopback), then start-up, shutdown and memory of 5- and 20-node local federations.

    python -m experiments.bench

Writes experiments/reports/{codecs,zmq,lifecycle}/bench.{json,md} (see each module for what it measures).
"""

from __future__ import annotations

import sys

from experiments import bench_codecs, bench_lifecycle, bench_zmq


def main(argv: list[str] | None = None) -> int:
    if argv:
        print("python -m experiments.bench takes no options; run experiments.bench_codecs, "
              "experiments.bench_zmq or experiments.bench_lifecycle for theirs",
              file=sys.stderr)
        return 2
    return bench_codecs.main([]) or bench_zmq.main([]) or bench_lifecycle.main([])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
