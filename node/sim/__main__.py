"""Run a federation in virtual time: `python -m node.sim --federation FILE --results DIR`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from node.errors import ProtofedError
from node.federation import read as read_federation
from node.lifecycle import exit_now
from node.sim.run import engine_for, simulate

log = logging.getLogger("node")
STOP_GRACE = 10.0  # seconds the nodes get to record that they stopped


class NodeLogs(logging.Handler):
    """Each node thread's lines into logs/node-<i>.log, as node processes write them
    (opened per line: a thousand nodes would otherwise hold a thousand files)."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(levelname)s "
                                            "%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        name = record.threadName or ""
        target = f"{name}.log" if name.startswith("node-") else "sim.log"
        try:
            with open(self.folder / target, "a") as handle:
                handle.write(self.format(record) + "\n")
        except OSError:
            self.handleError(record)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m node.sim", description=__doc__)
    parser.add_argument("--federation", required=True, help="the resolved federation file")
    parser.add_argument("--results", required=True, help="folder for node-<id>.json")
    args = parser.parse_args(argv)
    logs = Path(args.results) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, handlers=[NodeLogs(logs)])
    try:
        federation = read_federation(args.federation)
    except ProtofedError as exc:
        log.error("%s", exc)
        print(exc, file=sys.stderr)
        return 2
    engine = engine_for(federation)

    def stop(signum: int, frame: object) -> None:
        engine.stop()
        for thread in threading.enumerate():
            if thread is not threading.main_thread():
                thread.join(STOP_GRACE)
        exit_now(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    simulate(federation, Path(args.results), engine)
    return 0


if __name__ == "__main__":
    exit_now(main())
