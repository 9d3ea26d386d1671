"""protofed as a library: run a federation from Python, read a finished run, sweep settings.

    import protofed
    run = protofed.run("examples/quick.toml", overrides=["rounds=2"])
    run.rounds          # a pandas DataFrame: one row per node and round
    run.table()         # the end table the command line prints
    again = protofed.load(run.folder)
    frame = protofed.sweep("examples/quick.toml", grid={"aggregation.rule": ["mean", "median"]},
                           seeds=[1, 2])

What it raises on purpose derives from protofed.ProtofedError: ConfigError (a config, key,
value or folder the user must fix), DataError (dataset files), DeployError (a federation
that cannot be started, watched or stopped).
"""

from node.errors import ConfigError, DataError, DeployError, ProtofedError
from protofed.api import Run, load, run, sweep

__all__ = ["ConfigError", "DataError", "DeployError", "ProtofedError", "Run", "load", "run",
           "sweep"]
