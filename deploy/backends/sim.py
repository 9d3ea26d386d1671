"""The sim backend: every node of the federation a thread of one process forked from the
launcher, in virtual time (node.sim): the same round loop, algorithms, records and bytes as
node processes, with the network and the clock computed instead of waited for."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from deploy.backends.local import (
    STOP_SIGNALS,
    ForkedNode,
    launcher_entry,
    start_time,
    stop_signals_held,
    terminate_groups,
    wait_for_exit,
    write_output_to,
)
from deploy.backends.plan import Plan
from deploy.backends.runner import STOP_EXITS, run_status
from deploy.run_folder import RUN_FILE, read_node_results
from node.federation import resolve
from node.lifecycle import MISSED_EXIT, exit_now
from node.settings import FederationConfig

# What a node's record says, as the exit code a node process with that end gives.
STATUS_EXITS = {"finished": 0, "left": 0, "missed": MISSED_EXIT, "failed": 1,
                "stopped": 128 + signal.SIGTERM}


def plan_sim(config: FederationConfig, source: Path, overrides: tuple[str, ...],
             run_id: str) -> Plan:
    """Every node in one process: node i is reached as memory://i."""
    addresses = [f"memory://{i}" for i in range(config.nodes)]
    federation = resolve(config, addresses, addresses, str(source), overrides)
    return Plan(run_id=run_id, source=source.resolve(), overrides=overrides,
                results_dir=Path(config.deploy.results_dir) / run_id, federation=federation)


@dataclass
class SimRun:
    """The simulation's process; every node's exit code read from its record once it ends."""

    plan: Plan
    process: ForkedNode
    exit_codes: dict[int, int] = field(default_factory=dict)
    stopping: bool = False
    start_time: int | None = None  # the process's identity with its pid (read at start)

    def poll_exits(self) -> dict[int, int]:
        code = self.process.poll()
        if code is not None and not self.exit_codes:
            records = read_node_results(self.plan.results_dir, len(self.plan.nodes))
            for record in records:
                # a node the process took down with it ends with the process's code
                self.exit_codes[record.node] = STATUS_EXITS.get(record.status, code or 1)
        return dict(self.exit_codes)

    def wait(self, timeout: float) -> None:
        if self.process.poll() is None:
            wait_for_exit([self.process], timeout)

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the simulation (every node records that it stopped), SIGKILL after
        `grace` seconds."""
        self.stopping = True
        terminate_groups([self.process.pid], lambda _pid: self.process.poll() is None, grace)
        self.process.wait()
        self.poll_exits()
        stopped = {i: c if c in STOP_EXITS else 128 + signal.SIGTERM
                   for i, c in self.exit_codes.items() if c != 0}
        self.exit_codes.update(stopped)

    def save_logs(self) -> None:
        """The simulation writes every node's log into logs/: nothing to collect."""

    def remove(self) -> None:
        write_run_file(self, run_status(self.exit_codes, len(self.plan.nodes), self.stopping))


def write_run_file(run: SimRun, status: str) -> None:
    """How `protofed status`, `down` and `logs` find the run: its one process."""
    document = {"run_id": run.plan.run_id, "backend": "sim", "status": status,
                "pids": {"sim": run.process.pid},
                "start_times": {"sim": run.start_time},
                "nodes": len(run.plan.nodes), "launcher": launcher_entry(),
                "exit_codes": {str(i): c for i, c in run.exit_codes.items()}}
    (run.plan.results_dir / RUN_FILE).write_text(json.dumps(document, indent=1))


def start(plan: Plan) -> SimRun:
    """Fork the simulation in its own session, its output in logs/sim.log."""
    arguments = ["--federation", str(plan.federation_file), "--results", str(plan.results_dir)]
    sys.stdout.flush()
    sys.stderr.flush()
    with stop_signals_held():
        pid = os.fork()
        if pid:
            run = SimRun(plan, ForkedNode(pid), start_time=start_time(pid))
            write_run_file(run, "running")
            return run
    code = 1
    try:  # the child: it never returns from here
        os.setsid()
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        write_output_to(plan.results_dir / "logs" / "sim.log")
        logging.root.handlers.clear()  # the simulation sets up its own logging
        from node.sim.__main__ import main as sim_main

        code = sim_main(arguments)
    except BaseException:  # noqa: BLE001 - a child must never run the launcher's code
        import traceback

        traceback.print_exc()
    finally:
        exit_now(code)
