"""Run one federation node: `python -m node --config FILE --node-id I --peers PEERS.json`."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path

from node.config import FederationConfig, build_graph, load
from node.errors import ConfigError, ProtofedError
from node.runtime import Node
from node.security import Keyring, load_keyring
from node.transport import ZmqTransport
from topology import in_neighbours, out_neighbours

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
    parser.add_argument("--listen-fd", type=int,
                        help="a bound, listening TCP socket inherited from the launcher, used "
                             "for this node's address instead of binding it")
    parser.add_argument("--keys", help="folder with this node's secret key and every node's "
                                       "public key (needed unless deploy.security = \"none\")")
    return parser.parse_args(argv)


def read_peers(path: str, nodes: int) -> tuple[dict[int, str], dict[int, str]]:
    """Bind and connect addresses per node id from the launcher's peers file."""
    try:
        raw = json.loads(Path(path).read_text())
        bind = {int(k): str(v) for k, v in raw["bind"].items()}
        connect = {int(k): str(v) for k, v in raw["connect"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: not a valid peers file: {exc}") from None
    missing = sorted(set(range(nodes)) - (set(connect) & set(bind)))
    if missing:
        raise ConfigError(f"{path}: no address for nodes {missing}")
    return bind, connect


def node_keyring(config: FederationConfig, args: argparse.Namespace) -> Keyring | None:
    """This node's CurveZMQ keys, or None (with a warning) when security is off."""
    if config.deploy.security == "none":
        log.warning("deploy.security = \"none\": peers are not authenticated and traffic is "
                    "plaintext; any process that reaches this node's port can pose as a peer")
        return None
    if not args.keys:
        raise ConfigError("deploy.security = \"curve\" needs --keys (the launcher writes them)")
    return load_keyring(Path(args.keys), args.node_id, config.nodes)


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
        graph = build_graph(config)
        outs = out_neighbours(graph, args.node_id)
        transport = ZmqTransport(args.node_id, bind[args.node_id],
                                 {peer: connect[peer] for peer in outs},
                                 config.exchange.max_message_bytes,
                                 keyring=node_keyring(config, args),
                                 in_neighbours=in_neighbours(graph, args.node_id),
                                 listen_fd=args.listen_fd).open()
        node = Node(config, args.node_id, transport,
                    Path(args.results) / f"node-{args.node_id}.json", args.local_nodes)
        node.run()
        return 0
    except ProtofedError as exc:
        log.error("%s", exc)
        code, error = (2 if isinstance(exc, ConfigError) else 1), f"{type(exc).__name__}: {exc}"
    except (SystemExit, KeyboardInterrupt) as exc:
        log.error("stopped by signal")
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 130
        error = "stopped by signal"
    except Exception as exc:  # any bug must still leave a result file behind
        log.exception("node failed")
        code, error = 1, f"{type(exc).__name__}: {exc}"
    if node is not None:
        node.fail(error)
    return code


if __name__ == "__main__":
    sys.exit(main())
