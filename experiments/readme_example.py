"""The README's example output, from a run rather than typed: `make run`'s federation
(`protofed up -c examples/quick.toml`) run once, its summary and what it printed kept in
experiments/reports/readme-example/, and the example blocks of the README and of the docs'
front page (docs/index.md) written from them.

    python -m experiments.readme_example          # run quick.toml, keep it, rewrite both
    python -m experiments.readme_example --write  # rewrite both from the kept run alone

tests/test_docs.py checks that each page's block is the kept output, that the output's
table is the kept summary's, and (integration) that quick.toml still trains to the kept
bytes and F1, so a change of default cannot leave the README stale.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "experiments" / "reports" / "readme-example"
README = REPO / "README.md"
PAGES = (README, REPO / "docs" / "index.md")  # each holds the block between BEGIN and END
CONFIG = REPO / "examples" / "quick.toml"
RUN_ID = "quick-..."  # the README names no real run id
BEGIN = "<!-- readme-example: written by python -m experiments.readme_example -->"
END = "<!-- /readme-example -->"
KEPT_LINES = ("results:", "per-round CSV:", "pictures:")  # what `up` says after the table


def run_quick(results: Path) -> tuple[dict, str]:
    """`protofed up -c examples/quick.toml` into `results`: (its summary, its output as a
    reader of a pipe sees it, the run's folder shown as results/quick-...)."""
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "up", "-c", str(CONFIG),
                           "--run-id", "readme", "--set", f"deploy.results_dir={results}"],
                          cwd=REPO, capture_output=True, text=True, check=False,
                          env={**os.environ, "COLUMNS": ""})
    if done.returncode != 0:
        raise SystemExit(f"protofed up failed ({done.returncode}):\n{done.stderr[-3000:]}")
    folder = results / "readme"
    said = [line for line in done.stderr.splitlines() if line.startswith(KEPT_LINES)]
    output = done.stdout.rstrip("\n") + "\n\n" + "\n".join(said) + "\n"
    return json.loads((folder / "summary.json").read_text()), \
        output.replace(str(folder), f"results/{RUN_ID}")


def readme_block(output: str) -> str:
    return f"{BEGIN}\n```\n{output}```\n{END}"


def write_readme(output: str, readme: Path = README) -> None:
    """Replace the block between BEGIN and END of `readme` (a page) with `output`."""
    text = readme.read_text()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"{readme}: no block between {BEGIN!r} and {END!r}")
    readme.write_text(pattern.sub(lambda _: readme_block(output), text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.readme_example",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true",
                        help="rewrite the pages from the kept run, run nothing")
    args = parser.parse_args(argv)
    if not args.write:
        with tempfile.TemporaryDirectory() as results:
            summary, output = run_quick(Path(results))
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        (OUT / "output.txt").write_text(output)
    for page in PAGES:
        write_readme((OUT / "output.txt").read_text(), page)
        print(f"{page.relative_to(REPO)}: the example block written from "
              f"{OUT.relative_to(REPO) / 'output.txt'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
