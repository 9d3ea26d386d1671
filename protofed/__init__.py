"""protofed as a library: run a federation from Python, read a finished run, sweep settings.

    import protofed
    run = protofed.run("examples/quick.toml", overrides=["rounds=2"])
    run.rounds          # a pandas DataFrame: one row per node and round
    run.table()         # the end table the command line prints
    again = protofed.load(run.folder)
    frame = protofed.sweep("examples/quick.toml", grid={"aggregation.rule": ["mean", "median"]},
                           seeds=[1, 2])
"""

from protofed.api import Run, load, run, sweep

__all__ = ["Run", "load", "run", "sweep"]
