"""Run one federation node: `python -m node --config FILE --node-id I --peers PEERS.json`."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path

from node.config import load
from node.errors import ConfigError, ProtofedError
from node.runtime import Node
from node.transport import ZmqTransport
from topology import out_neighbours

log = logging.getLogger("node")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m node", description=__doc__)
    parser.add_argument("--config", required=True, help="federation TOML file")
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--peers", required=True,
                        help="JSON file: {'bind': {id: address}, 'connect': {id: address}}")
    parser.add_argument("--results", required=True, help="directory for node-<id>.json")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key for this run")
    parser.add_argument("--local-nodes", type=int, default=1,
                        help="nodes sharing this machine's cores (sets torch threads)")
    return parser.parse_args(argv)


def read_peers(path: str, nodes: int) -> tuple[dict[int, str], dict[int, str]]:
    """Bind and connect addresses per node id from the launcher's peers file."""
    try:
        raw = json.loads(Path(path).read_text())
        bind = {int(k): str(v) for k, v in raw["bind"].items()}
        connect = {int(k): str(v) for k, v in raw["connect"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: not a valid peers file: {exc}") from None
    missing = sorted(set(range(nodes)) - set(connect))
    if missing or set(range(nodes)) - set(bind):
        raise ConfigError(f"{path}: no address for nodes {missing or sorted(set(range(nodes)) - set(bind))}")
    return bind, connect


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s node-{args.node_id} %(levelname)s %(name)s: "
                               "%(message)s")
    signal.signal(signal.SIGTERM, _terminate)
    node = None
    try:
        config = load(args.config, args.set)
        if not 0 <= args.node_id < config.nodes:
            raise ConfigError(f"--node-id {args.node_id} is outside 0..{config.nodes - 1}")
        bind, connect = read_peers(args.peers, config.nodes)
        from node.config import build_graph
        outs = out_neighbours(build_graph(config), args.node_id)
        transport = ZmqTransport(args.node_id, bind[args.node_id],
                                 {peer: connect[peer] for peer in outs},
                                 config.exchange.max_message_bytes).open()
        node = Node(config, args.node_id, transport,
                    Path(args.results) / f"node-{args.node_id}.json", args.local_nodes)
        node.run()
        return 0
    except (ProtofedError, SystemExit, KeyboardInterrupt, Exception) as exc:
        if isinstance(exc, ProtofedError):
            log.error("%s", exc)
        elif isinstance(exc, (SystemExit, KeyboardInterrupt)):
            log.error("stopped by signal")
        else:
            log.exception("node failed")
        if node is not None:
            node.recorder.result.update({"status": "failed", "error": f"{type(exc).__name__}: {exc}"})
            node.recorder.write()
            node.transport.close(0)
        if isinstance(exc, SystemExit) and isinstance(exc.code, int):
            return exc.code
        return 2 if isinstance(exc, ConfigError) else 1


if __name__ == "__main__":
    sys.exit(main())
