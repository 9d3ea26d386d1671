"""One capacity rule for every backend: the federation's nodes must fit the memory a host can
give, checked before any node starts, from what one node of this very config was measured
to use.

The measurement (`measure_footprint`) loads what a node loads, builds node 0's algorithm,
trains PROBE_BATCHES batches, evaluates one batch and codes its messages, and reads its own
resident memory at each step. From that footprint:

- a local node is forked from the warm launcher and shares the runtime and the dataset with
  it, so the probe is forked from it too (`deploy.backends.local.probe_footprint`): the federation
  needs the shared part once, and per node what the probe added on top of it plus its
  in-neighbours' messages;
- a container shares nothing, so the probe is a fresh process (`python -m deploy.backends.capacity`,
  `probe`): per node, its whole peak plus its in-neighbours' messages, and
  CONTAINER_LIMIT_MARGIN times that as the container's memory limit;
- a sim node is a thread of one process forked from the launcher, so the forked probe builds
  more nodes beside the first: per further node, what each added (its models, optimiser
  state and data, no runtime), its in-neighbours' messages, and the transient of training
  once per node computing at once.

`deploy.memory` replaces the per-node figure of each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Self

from node.config import FederationConfig, memory_bytes
from node.errors import DeployError
from node.wording import counted

if TYPE_CHECKING:
    from deploy.backends.plan import Plan

MiB, GiB = 1024**2, 1024**3
HEADROOM = 0.9  # of a machine's available memory, leave a tenth to everything else
PROBE_BATCHES = 2  # memory per batch does not grow with the number of batches
PROBE_TIMEOUT = 300.0
# A neighbour can be one round ahead (not more: it waits for this node's messages), so a
# node may hold its next round's messages beside this round's.
ROUNDS_HELD = 2
ROBUST_COPIES = 2  # float64 copies of the neighbours' values a robust rule holds at once
THREAD_PROBE_NODES = 6  # nodes the sim probe measures, after those that start the arenas
# The sim probe builds no round loop (each node's thread, transport, peers, growing
# record): measured, that rest was 0.28 to 0.92 of the probe's estimate (50 to 10,000
# nodes, FedAvg and ProFe: experiments/reports/scale), so a sim run counts twice it.
SIM_MARGIN = 2.0
CONTAINER_LIMIT_MARGIN = 1.5  # a container's limit over its estimate: beyond it, an OOM kill


@dataclass(frozen=True)
class NodeFootprint:
    """Resident bytes of one node of a config, as measured by the probe."""

    runtime: int  # Python, torch and the node's code loaded
    shared: int  # ... and the dataset and global test set: what forked nodes share
    peak: int  # the most while training, evaluating and coding its messages
    per_neighbour: int  # one in-neighbour's messages of a round, as this node holds them
    next_node: int = 0  # what one more node built in the same process adds (sim threads)
    decoded_per_neighbour: int = 0  # the part of per_neighbour a robust rule decodes
    transient: int = 0  # what training or evaluation held for a moment (within peak)
    # one in-neighbour's model decoded, as the intake keeps it for its screens while the
    # judged in-neighbours' fit node.intake.checks.DECODED_BUDGET together (`kept_models`)
    decoded_model: int = 0

    def forked_node(self, in_degree: int) -> int:
        """What one more node forked from the warm launcher adds."""
        return max(0, self.peak - self.shared) + in_degree * self.per_neighbour

    def container_node(self, in_degree: int) -> int:
        """What one node alone in its container holds at its peak."""
        return self.peak + in_degree * self.per_neighbour

    @property
    def wire_per_neighbour(self) -> int:
        """The part of per_neighbour held in wire form (two rounds of messages)."""
        return self.per_neighbour - self.decoded_per_neighbour

    def thread_node(self, in_degree: int) -> int:
        """What one more node, a thread of a process that holds others, adds: the sim hands
        every receiver the sender's own frames, so a broadcast's wire form is held once,
        and what a robust rule decodes, once per in-neighbour."""
        return (self.next_node + self.wire_per_neighbour
                + in_degree * self.decoded_per_neighbour)


def kept_models(config: FederationConfig, footprint: NodeFootprint, in_degree: int) -> int:
    """The in-neighbours' decoded models a node keeps through its screens: those it judges
    (at most aggregation.judged_per_round where a screen is on) while they fit the intake's
    budget together; beyond it each read decodes again and none is kept."""
    from node.intake.checks import keeps_decoded
    from node.intake.drawn import judged_count

    judged = judged_count(config.aggregation, in_degree)
    return (judged * footprint.decoded_model
            if keeps_decoded(judged, footprint.decoded_model) else 0)


def node_memory(config: FederationConfig, footprint: NodeFootprint | None, in_degree: int,
                container: bool) -> int:
    """Bytes one node counts: deploy.memory, else its estimate from the measured footprint."""
    if config.deploy.memory:
        return memory_bytes(config.deploy.memory)
    if footprint is None:
        raise DeployError("no measured footprint and no deploy.memory: nothing to count")
    return (footprint.container_node(in_degree) if container else footprint.forked_node(
        in_degree)) + kept_models(config, footprint, in_degree)


def container_limit(config: FederationConfig, footprint: NodeFootprint | None,
                    in_degree: int) -> int:
    """A node container's memory limit (beyond it the kernel kills the node): deploy.memory,
    else the estimate with CONTAINER_LIMIT_MARGIN, in whole MiB."""
    if config.deploy.memory:
        return memory_bytes(config.deploy.memory)
    estimate = node_memory(config, footprint, in_degree, container=True)
    return -(-round(CONTAINER_LIMIT_MARGIN * estimate) // MiB) * MiB


def in_degrees(plan: Plan) -> list[int]:
    """Every planned node's number of in-neighbours, in node order."""
    return [len(member.in_neighbours) for member in plan.nodes]


def with_limits(config: FederationConfig, footprint: NodeFootprint | None,
                plan: Plan) -> Plan:
    """The plan with each node container's memory limit (see container_limit)."""
    return replace(plan, memory_limits={
        member.node_id: container_limit(config, footprint, len(member.in_neighbours))
        for member in plan.nodes})


def need(config: FederationConfig, footprint: NodeFootprint | None, in_degrees: list[int],
         container: bool) -> tuple[int, str]:
    """Bytes `in_degrees`' nodes need together (a local run: with what they all share from
    the launcher), and what that estimate came from, in words."""
    per_node = [node_memory(config, footprint, d, container) for d in in_degrees]
    shared = 0 if container or config.deploy.memory or footprint is None else footprint.shared
    low, high = min(per_node, default=0) / MiB, max(per_node, default=0) / MiB
    each = f"{low:.0f} MiB" if round(low) == round(high) else f"{low:.0f}-{high:.0f} MiB"
    if config.deploy.memory:
        source = f"deploy.memory {each} per node"
    elif container:
        source = f"measured {each} per node"
    else:
        source = f"measured {shared / MiB:.0f} MiB shared by all, {each} per node"
    return shared + sum(per_node), source


def check_memory(config: FederationConfig, footprint: NodeFootprint | None,
                 in_degrees: list[int], available: int, container: bool, where: str) -> str:
    """Refuse nodes (their in-degrees given) that would not fit in `available` bytes of
    `where` (0: unknown, nothing is refused); else say in one line what they need."""
    needed, source = need(config, footprint, in_degrees, container)
    nodes = counted(len(in_degrees), "node" if container else "local node")
    return _fits(needed, available, nodes, source, where, "use fewer nodes, a smaller "
                 "deploy.memory, or a larger host")


def sim_need(config: FederationConfig, footprint: NodeFootprint | None,
             in_degrees: list[int], workers: int) -> tuple[int, str]:
    """Bytes the sim process needs for `in_degrees`' nodes with `workers` computing at
    once, and what that estimate came from, in words."""
    if config.deploy.memory:
        each = memory_bytes(config.deploy.memory)
        return len(in_degrees) * each, f"deploy.memory {each / MiB:.0f} MiB per node"
    if footprint is None:
        raise DeployError("no measured footprint and no deploy.memory: nothing to count")
    # the probe's peak holds node 0 and one transient; each further node adds its own
    # pages, and each further node computing at once a transient
    kept = sum(kept_models(config, footprint, d) for d in in_degrees)
    needed = (footprint.peak - footprint.next_node + sum(map(footprint.thread_node, in_degrees))
              + max(0, min(workers, len(in_degrees)) - 1) * footprint.transient + kept)
    parts = [f"{mib(footprint.shared)} shared", f"{mib(footprint.next_node)} per node",
             f"{mib(footprint.wire_per_neighbour)} of its messages"]
    if footprint.decoded_per_neighbour:  # only a robust rule decodes what it receives
        parts.append(f"{mib(footprint.decoded_per_neighbour)} per in-neighbour")
    if footprint.transient:
        parts.append(f"{mib(footprint.transient)} per node computing at once")
    if kept:  # the screens' decoded models, where they fit the intake's budget
        parts.append(f"{mib(kept // len(in_degrees))} of kept decoded models per node")
    return needed, "measured " + ", ".join(parts)


def mib(size: int) -> str:
    """A size in MiB with two significant digits below 10 ("0.047 MiB", "4.7 MiB")."""
    value = size / MiB
    if value >= 10 or value == 0:
        return f"{value:.0f} MiB"
    return f"{value:.2g} MiB"


def check_sim_memory(config: FederationConfig, footprint: NodeFootprint | None,
                     in_degrees: list[int], available: int, workers: int) -> str:
    """Refuse a sim run that would not fit in `available` bytes of this machine; else say
    in one line what it needs."""
    needed, source = sim_need(config, footprint, in_degrees, workers)
    if not config.deploy.memory:  # what the probe does not build, counted
        source += f"; {SIM_MARGIN:g} x the probe's {needed / GiB:.2f} GiB"
        needed = round(SIM_MARGIN * needed)
    return _fits(needed, available, f"{len(in_degrees):,} sim nodes", source, "this machine",
                 "use fewer nodes, a smaller model, or a larger host")


def _fits(needed: int, available: int, nodes: str, source: str, where: str,
          remedy: str) -> str:
    """Raise when `needed` bytes exceed HEADROOM of `available`; else the one-line note."""
    if available and needed > HEADROOM * available:
        raise DeployError(
            f"{nodes} would need about {needed / GiB:.1f} GiB ({source}) but {where} has "
            f"{available / GiB:.1f} GiB available: {remedy}")
    have = f"{available / GiB:.1f} GiB available" if available else "availability unknown"
    return f"memory: about {needed / GiB:.2f} GiB for {nodes} ({source}); {where}: {have}"


def probe(config: FederationConfig) -> NodeFootprint:
    """Measure one node of the launcher's resolved `config` in a fresh process (it gets
    the config on its standard input, never the user's files)."""
    command = [sys.executable, "-m", "deploy.backends.capacity"]
    package_root = str(Path(__file__).resolve().parents[2])  # found from any folder
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT, env=env,
                              input=json.dumps(config.to_dict()))
    except subprocess.TimeoutExpired:
        raise DeployError(f"measuring one node's memory took over {PROBE_TIMEOUT:.0f} s "
                          "(set deploy.memory to skip the measurement)") from None
    if done.returncode != 0:
        raise probe_failure(done.stderr[-2000:])
    return NodeFootprint(**json.loads(done.stdout.strip().splitlines()[-1]))


OUT_OF_MEMORY = ("MemoryError", "can't allocate memory", "Cannot allocate memory",
                 "out of memory")


def probe_failure(error: str) -> DeployError:
    """What to tell the user when measuring one node failed: a node that cannot even be
    built in memory needs a smaller model or dataset, not a skipped measurement."""
    if any(sign in error for sign in OUT_OF_MEMORY):
        last = error.strip().splitlines()[-1] if error.strip() else error
        return DeployError(f"one node does not fit in this machine's memory ({last[:300]}): "
                           "use smaller model widths (model.teacher_channels, "
                           "model.student_channels, model.embedding_dim) or a smaller "
                           "data.subset")
    return DeployError("measuring one node's memory failed (set deploy.memory to skip the "
                       f"measurement): {error}")


def measure_footprint(config: FederationConfig, forked: bool = False,
                      threads: bool = False) -> NodeFootprint:
    """Load, build and exercise node 0 of `config` in this process; its resident memory.

    In a fresh process the runtime and the dataset are loaded first and count as shared;
    in a process forked from the warm launcher (`forked`) all the launcher held is shared,
    and the private pages the node made (smaps) count as its own. With `threads`, further
    nodes are built and exercised on threads beside node 0, as the sim runs them: what each
    of the last THREAD_PROBE_NODES adds is `next_node`.
    """
    import gc
    import resource

    from node.net.guard import resident_bytes
    from node.runtime import prepare_process

    runtime = resident_bytes()
    if not forked:
        warm_torch()
    if threads:  # as the sim runs nodes: on the CPU, one torch thread each
        import torch

        _, device = prepare_process(config, 0, threads=1, device=torch.device("cpu"))
    else:
        _, device = prepare_process(config, 0)

    def own_bytes() -> int:
        gc.collect()  # a node collects sooner or later: count what that copies
        # file pages only this probe has touched (code, the dataset's cache) are in the
        # page cache once for every node: shared; the pages it wrote are its own
        return private_bytes()[1] if forked else resident_bytes()

    before = own_bytes()
    first = _exercise_node(config, 0, device)
    per_neighbour, decoded = first.pop("per_neighbour"), first.pop("decoded_per_neighbour")
    decoded_model = first.pop("decoded_model")
    gc.collect()
    now, highest = resident_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    transient = max(0, highest - now)  # what training or evaluation held for a moment
    if forked:
        clean, own = private_bytes()
        shared = runtime + clean
    else:
        shared = before + first["data"]
        own = max(0, own_bytes() - shared)
    next_node = thread_node_bytes(config, device, own_bytes) if threads else 0
    return NodeFootprint(runtime=runtime, shared=shared, peak=shared + own + transient,
                         per_neighbour=per_neighbour, next_node=next_node,
                         decoded_per_neighbour=decoded, decoded_model=decoded_model,
                         transient=transient)


def thread_node_bytes(config: FederationConfig, device: object,
                      own_bytes: Callable[[], int]) -> int:
    """What one more sim node adds: nodes each on a thread of its own that stays alive, as
    a sim node's does (a thread keeps what torch and the allocator hold for it). The first
    ones start the arenas the simulation's threads share; the last THREAD_PROBE_NODES are
    measured."""
    from node.sim.allocator import share_arenas

    if config.nodes < 2:
        return 0
    workers = config.deploy.usable_cores()
    share_arenas(workers)  # as the simulation does
    starters = range(1, min(config.nodes, 1 + workers))
    ids = range(1 + workers, min(config.nodes, 1 + workers + THREAD_PROBE_NODES))
    with _NodeThreads(config, device) as others:
        if not ids:  # no node beyond those that start the arenas (it once said 0 MiB per
            # node at 3 nodes): they are measured, their arenas' start counted in
            held = own_bytes()
            for node_id in starters:
                others.add(node_id)
            return max(0, own_bytes() - held) // len(starters)
        for node_id in starters:
            others.add(node_id)  # every arena in use
        held = own_bytes()
        for node_id in ids:
            others.add(node_id)
        return max(0, own_bytes() - held) // len(ids)


class _NodeThreads:
    """Probe nodes each exercised on a thread that then waits, alive, until the probe ends."""

    def __init__(self, config: FederationConfig, device: object) -> None:
        import threading

        self.config, self.device = config, device
        self.release, self.threads = threading.Event(), []

    def add(self, node_id: int) -> None:
        """Exercise `node_id` on a new thread; return once it is built and waiting."""
        import threading

        ready, failed = threading.Event(), []

        def work() -> None:
            try:
                held = _exercise_node(self.config, node_id, self.device)
            except BaseException as exc:  # noqa: BLE001 - raised in the probe's thread
                failed.append(exc)
                held = None
            ready.set()
            self.release.wait()
            del held

        thread = threading.Thread(target=work, name=f"probe-node-{node_id}", daemon=True)
        thread.start()
        self.threads.append(thread)
        ready.wait()
        if failed:
            raise failed[0]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.release.set()
        for thread in self.threads:
            thread.join()


def _exercise_node(config: FederationConfig, node_id: int, device: object) -> dict:
    """Build node `node_id`'s data and algorithm, train PROBE_BATCHES batches, evaluate one
    and code its messages; what it holds (kept alive in the answer) and per_neighbour."""
    from node.algorithms import create
    from node.net.guard import resident_bytes
    from node.net.message import decode_message, encode_message
    from node.runtime import evaluate, kind_codecs, load_node_data

    loaded = resident_bytes()
    data = load_node_data(config, node_id, device)
    data_bytes = resident_bytes() - loaded  # a fresh process counts the dataset as shared
    keep = PROBE_BATCHES * config.train.batch_size
    algorithm = create(config.algorithm, config, replace(
        data, train_x=data.train_x[:keep], train_y=data.train_y[:keep]), device, node_id)
    algorithm.train_round(1)
    batch = config.train.eval_batch_size
    evaluate(algorithm, data.global_x[:batch], data.global_y[:batch], data.num_classes, batch)
    per_neighbour = decoded = model = 0
    codecs = kind_codecs(config, algorithm.kinds)
    for kind, payload in algorithm.payload().items():
        frames = encode_message(node_id, 1, kind, payload.tensors, codecs[kind], payload.meta)
        message = decode_message(frames, max_bytes=1 << 40)
        if kind == "model":  # decoded to the model's own dtypes for the screens
            model = sum(t.numel() * t.element_size() for t in payload.tensors.values())
        # held in their wire form until aggregated; the mean then decodes one tensor of one
        # peer at a time, the robust rules stack every peer's values in float64 and sort them
        decoded += 0 if config.aggregation.rule == "mean" else ROBUST_COPIES * sum(
            8 * t.numel() for t in message.tensors.values())
        per_neighbour += ROUNDS_HELD * sum(len(f) for f in frames)
    return {"data": data_bytes, "per_neighbour": per_neighbour + decoded,
            "decoded_per_neighbour": decoded, "decoded_model": model,
            "held": (data, algorithm)}


def warm_torch() -> None:
    """Import torch and the node's whole tree (its optimizers are node.optimizers: nothing
    of torch's compiler stack, which torch.optim would import), the algorithm classes
    included: a node imports them on first use, so each forked node would again."""
    import torch  # noqa: F401

    import node.__main__  # noqa: F401 - the node's whole import tree
    from node.algorithms import CATALOGUE, algorithm_class

    for name in CATALOGUE:
        algorithm_class(name)


def private_bytes() -> tuple[int, int]:
    """This process's private pages, clean and dirty ((0, 0) when smaps cannot be read)."""
    found = {"Private_Clean:": 0, "Private_Dirty:": 0}
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith(tuple(found)):
                found[line.split()[0]] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0, 0
    return found["Private_Clean:"], found["Private_Dirty:"]


def available_memory() -> int:
    """MemAvailable of this machine in bytes (0 when /proc/meminfo cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.backends.capacity",
                                     description="Measure one node's memory for the resolved "
                                     "config (JSON, as federation.json holds it) on standard "
                                     "input; one JSON line on standard output.")
    parser.parse_args(argv)
    from node.config import from_dict

    footprint = measure_footprint(from_dict(json.load(sys.stdin), source="<launcher>"))
    print(json.dumps(asdict(footprint)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
