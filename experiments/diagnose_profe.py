"""Why a ProFe federation collapses: per round, on node 0, how far local training moved the
student, how large the teacher's logits and embeddings grew, and what the average answers.

    python -m experiments.diagnose_profe CONFIG [--set KEY=VALUE ...]

Runs the federation in one process (node.inprocess) and prints one line per round:
  drift       L2 norm of the student's weight change during local training
  t-range     the teacher's mean logit range (max - min) on the node's training images
  t-norm      the teacher's mean embedding norm on them
  avg-spread  the averaged student's mean standard deviation of the logits over the classes,
              on the global test set (small: the bias alone decides the class)
  top         the averaged student's top-class share on the global test set
  t-local     the teacher's argmax accuracy on the node's local test split, after its epoch
  t-global    the same on the federation's global test set
  avg-local   the averaged student's argmax accuracy on the local test split
  avg-global  the same on the global test set (what distillation should raise: a teacher
              below the averaged student where the student is evaluated has little to give)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

from node.algorithms.profe import ProFe
from node.config import load
from node.errors import ConfigError
from node.inprocess import memory_federation, run_in_memory

PROBE = 512  # images of the node's training set the teacher is probed on


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Argmax accuracy of a (logits, embedding) model on a set, without gradients."""
    if len(y) == 0:
        return float("nan")
    with torch.no_grad():
        logits, _ = model(x)
    return float((logits.argmax(1) == y).float().mean())


def instrument(rows: list[dict]) -> None:
    """Wrap node 0's ProFe.train_round and aggregate to append one row per round."""
    train_round, aggregate = ProFe.train_round, ProFe.aggregate

    def probed_train_round(self: ProFe, round_: int) -> dict[str, float]:
        if self.node_id != 0:
            return train_round(self, round_)
        before = {k: v.clone() for k, v in self.student.state_dict().items()}
        stats = train_round(self, round_)
        drift = sum(float((v - before[k]).pow(2).sum())
                    for k, v in self.student.state_dict().items()) ** 0.5
        with torch.no_grad():
            logits, embeddings = self.teacher(self.data.train_x[:PROBE])
        rows.append({"round": round_, "alpha_s": stats["alpha_s"], "drift": drift,
                     "t-range": float((logits.max(1).values - logits.min(1).values).mean()),
                     "t-norm": float(embeddings.norm(dim=1).mean()),
                     "t-local": accuracy(self.teacher, self.data.test_x, self.data.test_y),
                     "t-global": accuracy(self.teacher, self.data.global_x,
                                          self.data.global_y)})
        return stats

    def probed_aggregate(self: ProFe, own, received):
        rejected = aggregate(self, own, received)
        if self.node_id == 0 and "model" in own and rows:
            with torch.no_grad():
                self.student.eval()
                logits, _ = self.student(self.data.global_x)
            counts = torch.bincount(logits.argmax(1), minlength=logits.shape[1])
            rows[-1]["avg-spread"] = float(logits.std(dim=1).mean())
            rows[-1]["top"] = float(counts.max()) / max(len(logits), 1)
            rows[-1]["avg-global"] = float((logits.argmax(1) == self.data.global_y)
                                           .float().mean())
            rows[-1]["avg-local"] = accuracy(self.student, self.data.test_x, self.data.test_y)
        return rejected

    ProFe.train_round, ProFe.aggregate = probed_train_round, probed_aggregate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.diagnose_profe",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    try:
        config = load(args.config, args.overrides)
    except ConfigError as exc:
        print(f"diagnose_profe: {exc}", file=sys.stderr)
        return 2
    if config.algorithm != "profe":
        print(f"diagnose_profe: {args.config}: algorithm must be profe", file=sys.stderr)
        return 2
    rows: list[dict] = []
    instrument(rows)
    with tempfile.TemporaryDirectory() as results:
        run_in_memory(memory_federation(config), Path(results))
    columns = ("round", "alpha_s", "drift", "t-range", "t-norm", "avg-spread", "top", "t-local",
               "t-global", "avg-local", "avg-global")
    print("  ".join(f"{c:>10}" for c in columns))
    for row in rows:
        print("  ".join(f"{row.get(c, float('nan')):>10.3f}" if c != "round"
                        else f"{row[c]:>10d}" for c in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
