"""protofed beside decentralizepy on decentralizepy's own kind of task, measured from outside.

    python -m experiments.versus_decentralizepy [--pairs 4]
        [--decentralizepy-python /work/dpy/venv/bin/python] [--report-only]

The task on both sides: 5 nodes on this machine, fully connected, 3 rounds, MNIST, the
784-256-128-10 MLP (235,146 parameters), one epoch of SGD per round on 2,880 images per
node (batch 64, lr 0.01, momentum 0.9), then every node averages its model with all the
others' (protofed: FedAvg, examples/custom/fedavg-mlp-mnist.toml; decentralizepy: D-PSGD,
whose Metropolis-Hastings weights are 1/5 each here, experiments/decentralizepy_mnist/).
Runs alternate, `--pairs` times: protofed, decentralizepy, then protofed again without its
end-of-run pictures (report.pictures = false; decentralizepy draws none), then protofed
bare: no pictures, no validation, no distance screen, no model sketch, no CurveZMQ (the
floor under the defaults: training, both test sets, messages and the record). Per run, from
outside:
- start-up to round 0: launch (Unix time before the command starts) to the moment the last
  node is ready to train. protofed: the latest rounds[0].recorded_at of the node records
  (the untrained model evaluated, the peers' handshake done); decentralizepy: the latest
  "Starting training iteration: 0" line of the node logs (dataset, model and connections
  to every neighbour done);
- seconds per round: (last node's end of round 3 - last node's round 0) / 3. protofed:
  rounds[3].recorded_at; decentralizepy: the "Disconnecting neighbors" log line that
  follows the last round's evaluation and results file;
- total CPU seconds: getrusage(RUSAGE_CHILDREN) around the run (every node process is a
  waited descendant on both sides); a lower bound from /proc samples is kept beside it;
- private memory per node: USS (Private_Clean + Private_Dirty of smaps_rollup), each
  node's peak over samples taken every second, averaged over the nodes; peak total PSS of
  the launcher and all its descendants;
- bytes sent per node: protofed's node records (bytes_sent); decentralizepy's own counter
  (total_bytes in <rank>_results.json: the pickled messages, hellos and models);
- final accuracy: on each side's test set after the last round, mean over nodes.
Writes experiments/reports/versus-decentralizepy/{results.json,table.md}; `--report-only`
rebuilds table.md from results.json.

decentralizepy is not on PyPI. Installed in a venv of its own (these steps were used):
    git clone https://github.com/sacs-epfl/decentralizepy /work/dpy/src
        # (here, without internet: mkdir -p /work/dpy/src && git --git-dir=MIRROR/repo
        #  archive HEAD | tar -x -C /work/dpy/src, from a snapshot whose HEAD is a5d46be)
    python3 -m venv /work/dpy/venv
    /work/dpy/venv/bin/pip install torch==2.13.0     # the CPU build, first
    /work/dpy/venv/bin/pip install torch==2.13.0 numpy matplotlib networkx pyzmq zmq \
        jsonlines pillow smallworld localconfig PyWavelets pandas crudini scikit-learn lz4 fpzip
    /work/dpy/venv/bin/pip install --no-deps -e /work/dpy/src
(its setup.cfg also asks for torchvision, which only its CIFAR-10 class imports; left out
so pip pulls no CUDA build.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from experiments.processes import children_cpu, process_tree, processor_model, uss_and_pss

OUT = Path(__file__).resolve().parent / "reports" / "versus-decentralizepy"
REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "examples" / "custom" / "fedavg-mlp-mnist.toml"
LAUNCH = REPO / "experiments" / "decentralizepy_mnist" / "launch.py"
DEFAULT_DPY_PYTHON = "/work/dpy/venv/bin/python"
NODES, ROUNDS = 5, 3
STEPS, BATCH = 45, 64  # each node's SGD steps a round, and images a step
# decentralizepy draws nothing; protofed's default draws the run's pictures at its end, so
# each pair also runs protofed without them (report.pictures = false)
NO_PICTURES = "protofed, no pictures"
# protofed with every piece of work beside training and the global test set turned off: the
# pictures, validation, the distance screen, the model sketch and CurveZMQ (the floor the
# defaults are measured against; its local test set stays, or each node would train on
# more images than decentralizepy's)
BARE = "protofed, bare"
SIDES = ("protofed", "decentralizepy", NO_PICTURES, BARE)
SIDE_SETTINGS = {"protofed": (), NO_PICTURES: ("report.pictures=false",),
                 BARE: ("report.pictures=false", "aggregation.validation=0",
                        "aggregation.distance=0", "report.consensus_sketch=0",
                        'deploy.security="none"')}
SAMPLE_EVERY = 0.2  # seconds between memory samples (a bare run lasts about 2 s)
RUN_LIMIT = 1800  # seconds before a run is stopped as hung
INSTALL = ("git clone https://github.com/sacs-epfl/decentralizepy /work/dpy/src; python3 -m "
           "venv /work/dpy/venv; /work/dpy/venv/bin/pip install torch==2.13.0; then its "
           "requirements and `pip install --no-deps -e /work/dpy/src` (the exact commands: "
           "the docstring of experiments/versus_decentralizepy.py)")
LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[[^\]]*\]\[[^\]]*\] (.*)$")
MIB = 1024 * 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one live process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def watch(proc: subprocess.Popen) -> dict:
    """Sample the process tree every SAMPLE_EVERY s until `proc` exits: peaks and CPU."""
    peak_uss: dict[int, int] = {}
    last_cpu: dict[int, float] = {}
    parents: dict[int, int] = {}
    peak_pss, started = 0, time.monotonic()
    while proc.poll() is None:
        pss_total = 0
        for pid, parent in process_tree(proc.pid).items():
            uss, pss = uss_and_pss(pid)
            peak_uss[pid] = max(peak_uss.get(pid, 0), uss)
            last_cpu[pid] = max(last_cpu.get(pid, 0.0), cpu_seconds(pid))
            parents[pid] = parent
            pss_total += pss
        peak_pss = max(peak_pss, pss_total)
        if time.monotonic() - started > RUN_LIMIT:
            proc.terminate()
            proc.wait(30)
            raise SystemExit(f"a run took over {RUN_LIMIT} s and was stopped")
        try:
            proc.wait(SAMPLE_EVERY)
        except subprocess.TimeoutExpired:
            pass
    return {"peak_uss": peak_uss, "parents": parents, "peak_pss": peak_pss,
            "cpu_sampled_s": round(sum(last_cpu.values()), 1)}


def measured(command: list[str], env: dict[str, str]) -> tuple[float, dict, float, str]:
    """Run a command to its end under watch: (launch Unix time, samples, CPU s, stderr)."""
    cpu_before = children_cpu()
    with tempfile.TemporaryFile("w+") as errors:
        launched = time.time()
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=errors, text=True)
        samples = watch(proc)
        errors.seek(0)
        stderr = errors.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({proc.returncode}):\n"
                         f"{stderr[-3000:]}")
    samples["root"] = proc.pid
    return launched, samples, children_cpu() - cpu_before, stderr


def memory_figures(samples: dict, nodes: list[int]) -> dict:
    """Mean and largest per-node peak USS, and the peak total PSS, in MiB."""
    unseen = [pid for pid in nodes if pid not in samples["peak_uss"]]
    if unseen:  # a node that lived between two samples would read as 0 MiB
        raise SystemExit(f"node processes {unseen} were never sampled: the run ended within "
                         f"{SAMPLE_EVERY} s of their start")
    uss = [samples["peak_uss"][pid] for pid in nodes]
    return {"uss_per_node_mib": round(statistics.mean(uss) / MIB, 1),
            "uss_max_mib": round(max(uss) / MIB, 1),
            "peak_total_pss_mib": round(samples["peak_pss"] / MIB, 1)}


def run_protofed(workdir: Path, pair: int, data_dir: str, side: str = "protofed") -> dict:
    """One `protofed up` of the FedAvg MLP config with `side`'s settings (SIDE_SETTINGS),
    measured."""
    run_id = "-".join(["versus", str(pair), *side.split(", ")[1:]]).replace(" ", "-")
    results = workdir / "protofed"
    command = [sys.executable, "-m", "deploy.cli", "up", "-c", str(CONFIG), "--run-id", run_id,
               "--set", f"data.dir={json.dumps(data_dir)}",
               "--set", f"deploy.results_dir={json.dumps(str(results))}"]
    for setting in SIDE_SETTINGS[side]:
        command += ["--set", setting]
    launched, samples, cpu, _ = measured(command, dict(os.environ))
    run_dir = results / run_id
    records = [json.loads((run_dir / f"node-{i}.json").read_text()) for i in range(NODES)]
    pids = [int(p) for p in json.loads((run_dir / "run.json").read_text())["pids"].values()]
    ready = max(r["rounds"][0]["recorded_at"] for r in records)
    last = max(r["rounds"][ROUNDS]["recorded_at"] for r in records)
    return {"side": side, "pair": pair, "startup_s": round(ready - launched, 2),
            "seconds_per_round": round((last - ready) / ROUNDS, 3),
            "cpu_s": round(cpu, 1), "cpu_sampled_s": samples["cpu_sampled_s"],
            **memory_figures(samples, pids),
            "bytes_sent_per_node": round(statistics.mean(r["bytes_sent"] for r in records)),
            "accuracy": round(statistics.mean(r["rounds"][ROUNDS]["global_test"]["accuracy"]
                                              for r in records), 4),
            "wall_s": round(last - launched, 1), "phase_cpu_s": phase_cpu(records)}


def phase_cpu(records: list[dict]) -> dict[str, float]:
    """CPU seconds of each phase of the node records' profile per node-round (rounds 1 to
    ROUNDS, the rounds the seconds per round span), the mean over nodes and rounds."""
    sums: dict[str, float] = {}
    for record in records:
        for round_ in record["rounds"][1:ROUNDS + 1]:
            for phase, (_, cpu) in round_["phases"].items():
                sums[phase] = sums.get(phase, 0.0) + cpu
    return {phase: round(total / (len(records) * ROUNDS), 5)
            for phase, total in sorted(sums.items())}


def log_times(path: Path) -> dict[str, float]:
    """Unix time of the first log line carrying each message, in a decentralizepy node log."""
    times: dict[str, float] = {}
    for line in path.read_text().splitlines():
        match = LOG_LINE.match(line)
        if match and match.group(2) not in times:
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
            times[match.group(2)] = stamp.timestamp()
    return times


def round_marks(times: dict[str, float]) -> list[float]:
    """When a node was ready for round k+1, k = 0..ROUNDS (the last: done with all)."""
    marks = [times[f"Starting training iteration: {k}"] for k in range(ROUNDS)]
    return marks + [times["Disconnecting neighbors"]]


def run_decentralizepy(python: str, workdir: Path, pair: int, data_dir: str) -> dict:
    """One decentralizepy federation through launch.py, measured."""
    log_dir = workdir / f"decentralizepy-{pair}"
    command = [python, str(LAUNCH), "--log-dir", str(log_dir), "--nodes", str(NODES),
               "--rounds", str(ROUNDS), "--data-dir", str(Path(data_dir) / "MNIST" / "raw")]
    launched, samples, cpu, _ = measured(command, dict(os.environ))
    marks = [round_marks(log_times(log_dir / f"{rank}.log")) for rank in range(NODES)]
    results = [json.loads((log_dir / f"{rank}_results.json").read_text())
               for rank in range(NODES)]
    nodes = [pid for pid, parent in samples["parents"].items() if parent == samples["root"]]
    ready = max(m[0] for m in marks)
    last = max(m[ROUNDS] for m in marks)
    return {"side": "decentralizepy", "pair": pair, "startup_s": round(ready - launched, 2),
            "seconds_per_round": round((last - ready) / ROUNDS, 3),
            "cpu_s": round(cpu, 1), "cpu_sampled_s": samples["cpu_sampled_s"],
            **memory_figures(samples, nodes),
            "bytes_sent_per_node": round(statistics.mean(r["total_bytes"][str(ROUNDS)]
                                                         for r in results)),
            "accuracy": round(statistics.mean(r["test_acc"][str(ROUNDS)] / 100
                                              for r in results), 4),
            "wall_s": round(last - launched, 1)}


def mlp_parameters() -> int:
    """Parameters of examples/custom/mlp.py's teacher on MNIST (235,146)."""
    sys.path.insert(0, str(CONFIG.parent))
    try:
        import mlp  # the example model, found in the config's folder
    finally:
        sys.path.pop(0)
    model = mlp.mlp(role="teacher", in_channels=1, image_size=28, num_classes=10,
                    embedding_dim=128)
    return sum(p.numel() for p in model.parameters())


def check_decentralizepy(python: str) -> None:
    """Exit with one line saying how to install decentralizepy when it is not usable."""
    usable = Path(python).exists() and subprocess.run(
        [python, "-c", "import decentralizepy, localconfig, torch"],
        check=False, capture_output=True).returncode == 0
    if not usable:
        raise SystemExit(f"decentralizepy cannot be imported by {python}; install it: {INSTALL}")


ROWS = (("start-up to round 0 (s)", "startup_s"), ("seconds per round", "seconds_per_round"),
        ("total CPU (s)", "cpu_s"), ("private memory per node, USS (MiB)", "uss_per_node_mib"),
        ("peak total PSS (MiB)", "peak_total_pss_mib"),
        ("bytes sent per node", "bytes_sent_per_node"), ("final accuracy", "accuracy"))


def median_of(runs: list[dict], side: str, key: str) -> float:
    """The median of one figure over one side's runs."""
    return statistics.median(r[key] for r in runs if r["side"] == side)


def pair_ratios(runs: list[dict], key: str, side: str = "protofed") -> list[float]:
    """`side` / decentralizepy of one figure, pair by pair."""
    by_pair: dict[int, dict[str, float]] = {}
    for run in runs:
        by_pair.setdefault(run["pair"], {})[run["side"]] = run[key]
    return [sides[side] / sides["decentralizepy"] for sides in by_pair.values()
            if side in sides and sides.get("decentralizepy")]


def median_ratio(runs: list[dict], key: str, side: str) -> str:
    """The median over pairs of `side` / decentralizepy, as the table shows it."""
    ratios = pair_ratios(runs, key, side)
    return f"{statistics.median(ratios):.2f}x" if ratios else "-"


def figure(value: float) -> str:
    """A figure as the table shows it."""
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{round(value, 4 if abs(value) < 1 else 2):g}"


def render(results: dict) -> str:
    """table.md: the medians, the ratios, every run, and how the sides differ."""
    runs = results["runs"]
    variants = [side for side in SIDES[2:] if any(r["side"] == side for r in runs)]
    order = "; ".join(["protofed", "decentralizepy", *(
        f"{side} (" + ", ".join(s.replace("=", " = ", 1) for s in SIDE_SETTINGS[side]) + ")"
        for side in variants)])
    lines = ["# protofed beside decentralizepy", "",
             (f"Produced by `{results['command']}` on {results['cpus']} cores "
             f"({results['processor']}), {results['pairs']} interleaved pairs, in this order: "
             f"{order}. Task: {NODES} nodes, fully connected, {ROUNDS} rounds, MNIST, the "
             f"784-256-128-10 MLP ({results['parameters']:,} parameters), one epoch of SGD "
             f"per round on {STEPS * BATCH:,} images per node ({STEPS} steps of {BATCH}, lr "
             "0.01, momentum 0.9), "
             "then equal-weight averaging with every other node. See "
             "experiments/versus_decentralizepy.py for how each figure is measured."), "",
             ("| figure | protofed (median) | decentralizepy (median) | "
              "protofed / decentralizepy (median over pairs) |"
              + "".join(f" {side} (median) | the same / decentralizepy |"
                        for side in variants)),
             "|---|---|---|---|" + "---|---|" * len(variants)]
    for label, key in ROWS:
        row = (f"| {label} | {figure(median_of(runs, 'protofed', key))} | "
               f"{figure(median_of(runs, 'decentralizepy', key))} | "
               f"{median_ratio(runs, key, 'protofed')} |")
        for side in variants:
            row += (f" {figure(median_of(runs, side, key))} | "
                    f"{median_ratio(runs, key, side)} |")
        lines.append(row)
    lines += ["", "Every run:", "",
              ("| pair | side | start-up (s) | s/round | CPU (s) | CPU sampled (s) | "
               "USS/node (MiB) | USS max (MiB) | PSS (MiB) | bytes/node | accuracy | wall (s) |"),
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['pair']} | {r['side']} | {r['startup_s']} | {r['seconds_per_round']} | "
              f"{r['cpu_s']} | {r['cpu_sampled_s']} | {r['uss_per_node_mib']} | "
              f"{r['uss_max_mib']} | {r['peak_total_pss_mib']} | "
              f"{r['bytes_sent_per_node']:,} | {r['accuracy']} | {r['wall_s']} |" for r in runs]
    for text in (round_budget(results), bare_floor(results)):
        lines += ["", text] if text else []
    lines += ["", "Where the two sides differ:", ""] + [f"- {d}" for d in DIFFERENCES]
    return "\n".join(lines) + "\n"


DIFFERENCES = (
    ("data: protofed draws a stratified 20,000-image subset of MNIST's 70,000, keeps 2,000 "
     "as the global test set and gives each node 2,880 training (and 720 local test) images; "
     "decentralizepy's nodes take 2,880 training images each from the 60,000 training images "
     "(its DataPartitioner) and test on a seeded 2,000 of the 10,000 test images"),
    ("loading: each decentralizepy node decodes the whole training file itself; protofed's "
     "launcher maps a decoded cache once and forks the nodes from that warm process"),
    ("evaluation: protofed also evaluates the untrained model (round 0) and each node's local "
     "test set every round; decentralizepy tests on its test set after each round only"),
    ("mini-batches: protofed slices shuffled tensors; decentralizepy's DataLoader gathers "
     "and collates one sample at a time, as its own dataset classes do"),
    ("messages: protofed's default CurveZMQ encryption is on (decentralizepy sends plaintext "
     "pickles); both send fp32 weights"),
    ("initial weights: on each side every node starts from the same model (torch seeded "
     "with 42), though not the same model on both sides"),
    ("shuffling: protofed shuffles each node's batches by seed, node and round; decentralizepy "
     "seeds torch alike in every node, so the nodes draw the same order of positions"),
    "torch threads per node: cores / nodes, at least 1, on both sides",
)


# node.profile's phases, in the groups the report names
PHASE_GROUPS = (("training", ("train", "teacher")), ("validation", ("validation",)),
                ("the other screens", ("distance", "influence", "prototype_validation",
                                       "held_influence")),
                ("the rest of aggregation", ("aggregation",)),
                ("the two test sets", ("evaluation_global", "evaluation_local")),
                ("messages (encode, wait, decode)", ("encode", "wait", "decode")),
                ("the record and the rest", ("record", "other")))
FASTER = 0.8  # the seconds per round asked of protofed, against decentralizepy's


def phase_groups(results: dict) -> dict[str, float] | None:
    """protofed's CPU seconds per node-round by PHASE_GROUPS, each the median over its runs
    (None for results measured before the runs kept their phases)."""
    runs = [r["phase_cpu_s"] for r in results["runs"]
            if r["side"] == "protofed" and "phase_cpu_s" in r]
    if not runs:
        return None
    return {label: statistics.median(sum(run.get(p, 0.0) for p in phases) for run in runs)
            for label, phases in PHASE_GROUPS}


def round_budget(results: dict) -> str:
    """Where a protofed node-round's CPU goes, and what FASTER x decentralizepy's seconds
    per round would leave a node: the sentence the report and the docs share."""
    groups = phase_groups(results)
    if groups is None:
        return ""
    total = sum(groups.values())
    parts = ", ".join(f"{label} {cpu:.3f} ({cpu / total:.0%})" for label, cpu in
                      groups.items())
    budget = FASTER * median_of(results["runs"], "decentralizepy", "seconds_per_round")
    cpu_share = budget * results["cpus"] / NODES
    return (f"A protofed node-round (rounds 1 to {ROUNDS}, the phase profile of its node "
            f"records, median over the runs) took {total:.3f} CPU s: {parts}. {NODES} nodes "
            f"share {results['cpus']} cores, so a round's wall time follows their CPU: at "
            f"{FASTER}x decentralizepy's seconds per round ({budget:.3f} s) a node would have "
            f"{cpu_share:.3f} CPU s a round, "
            + ("less than its training alone takes here." if cpu_share < groups["training"]
               else f"{cpu_share - groups['training']:.3f} beside its training."))


def without_pictures(results: dict) -> str:
    """The sentence on protofed without its end-of-run pictures ("" where not measured)."""
    runs = results["runs"]
    if not any(r["side"] == NO_PICTURES for r in runs):
        return ""
    cpu, per_round = (median_of(runs, NO_PICTURES, key)
                      for key in ("cpu_s", "seconds_per_round"))
    return (f"Without the run's pictures, which protofed draws when its nodes are done "
            f"(`report.pictures = false`; decentralizepy draws none), protofed's total CPU is "
            f"{cpu:.2f} s ({median_ratio(runs, 'cpu_s', NO_PICTURES)}) and a round "
            f"{per_round:.3f} s ({median_ratio(runs, 'seconds_per_round', NO_PICTURES)}).")


def bare_floor(results: dict) -> str:
    """The sentence on protofed bare, the floor under its defaults ("" where not measured)."""
    runs = results["runs"]
    if not any(r["side"] == BARE for r in runs):
        return ""
    per_round = median_of(runs, BARE, "seconds_per_round")
    groups = phase_groups(results)
    # a training step costs about 6 flops per parameter and image (forward and backward)
    rate = ("" if groups is None else
            f"; training alone, {STEPS} steps of {BATCH} images, runs at "
            f"{6 * results['parameters'] * STEPS * BATCH / groups['training'] / 1e9:.0f} "
            "GFLOP/s a node")
    return (f"Bare (no pictures, validation, distance screen, model sketch nor CurveZMQ: "
            f"training, both test sets, messages and the record), a protofed round takes "
            f"{per_round:.3f} s ({median_ratio(runs, 'seconds_per_round', BARE)} "
            f"decentralizepy's) and its total CPU is "
            f"{median_of(runs, BARE, 'cpu_s'):.2f} s "
            f"({median_ratio(runs, 'cpu_s', BARE)}){rate}.")


DOCS_ROWS = (("startup_s", "{:.2f}", " s"), ("seconds_per_round", "{:.3f}", " s"),
             ("cpu_s", "{:.2f}", " s"), ("uss_per_node_mib", "{:.0f}", " MiB"),
             ("peak_total_pss_mib", "{:.0f}", " MiB"),
             ("bytes_sent_per_node", "{:.2f}", " MB"), ("accuracy", "{:.3f}", ""))


def docs_table(results: dict) -> str:
    """docs/experiments.md's table: protofed / decentralizepy medians and the median ratio
    over pairs, one column per figure of the report."""
    cells = []
    for key, form, unit in DOCS_ROWS:
        scale = 1e6 if key == "bytes_sent_per_node" else 1
        ours, theirs = (form.format(median_of(results["runs"], side, key) / scale)
                        for side in ("protofed", "decentralizepy"))
        ratio = ("" if key == "accuracy"
                 else f" ({median_ratio(results['runs'], key, 'protofed')})")
        cells.append(f"{ours} / {theirs}{unit}{ratio}")
    return ("| start-up to round 0 | seconds per round | total CPU | private memory per node "
            "| peak total PSS | bytes sent | final accuracy |\n|---|---|---|---|---|---|---|\n"
            f"| {' | '.join(cells)} |")


def write_report(results: dict, out: Path = OUT) -> str:
    """Write table.md from results into `out` and return it."""
    text = render(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--decentralizepy-python", default=DEFAULT_DPY_PYTHON)
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild table.md from results.json")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the archive")
    args = parser.parse_args(argv)
    if args.report_only:
        print(write_report(json.loads((args.out / "results.json").read_text()), args.out),
              end="")
        return 0
    check_decentralizepy(args.decentralizepy_python)
    data_dir = os.environ.get("PROTOFED_DATA_DIR", str(REPO.parent / "shared" / "datasets"))
    results = {"command": "python -m experiments.versus_decentralizepy --pairs "
                          f"{args.pairs}", "cpus": os.cpu_count(),
               "processor": processor_model(), "pairs": args.pairs,
               "parameters": mlp_parameters(), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            for side in SIDES:
                run = (run_decentralizepy(args.decentralizepy_python, Path(tmp), pair,
                                          data_dir) if side == "decentralizepy" else
                       run_protofed(Path(tmp), pair, data_dir, side))
                print(json.dumps(run), flush=True)
                results["runs"].append(run)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(write_report(results, args.out), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
