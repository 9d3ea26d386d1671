"""Run one federation node: `python -m node --federation FILE --node-id I --results DIR`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from node.config import FederationConfig
from node.errors import ConfigError, ProtofedError
from node.federation import read as read_federation
from node.lifecycle import MISSED_EXIT, exit_now
from node.net.security import Keyring, load_keyring
from node.net.transport import ZmqTransport
from node.record import NodeRecord
from node.runtime import Recorder, build_node

log = logging.getLogger("node")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m node", description=__doc__)
    parser.add_argument("--federation", required=True,
                        help="the federation file the launcher resolved (config, addresses, "
                             "neighbours)")
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--results", required=True, help="directory for node-<id>.json")
    parser.add_argument("--listen-fd", type=int,
                        help="a bound, listening TCP socket inherited from the launcher, used "
                             "for this node's address instead of binding it")
    parser.add_argument("--keys", help="folder with this node's secret key and every node's "
                                       "public key (needed unless deploy.security = \"none\")")
    parser.add_argument("--record-stdout", action="store_true",
                        help="also write the record to standard output at each update, for "
                             "a launcher that reads the node's output but not its files")
    return parser.parse_args(argv)


def node_keyring(config: FederationConfig, args: argparse.Namespace) -> Keyring | None:
    """This node's CurveZMQ keys, or None (with a warning) when security is off."""
    if config.deploy.security == "none":
        log.warning("deploy.security = \"none\": peers are not authenticated and traffic is "
                    "plaintext; any process that reaches this node's port can pose as a peer")
        return None
    if not args.keys:
        raise ConfigError("deploy.security = \"curve\" needs --keys (the launcher writes them)")
    return load_keyring(Path(args.keys), args.node_id, config.nodes)


STOPPED = "stopped by signal"


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s node-{args.node_id} %(levelname)s %(name)s: "
                               "%(message)s")
    signal.signal(signal.SIGTERM, _terminate)
    recorder = transport = None
    try:
        federation = read_federation(args.federation)
        config, member = federation.config, federation.member(args.node_id)
        recorder = Recorder(Path(args.results) / f"node-{args.node_id}.json",
                            NodeRecord(node=args.node_id), stream=args.record_stdout)
        keyring = node_keyring(config, args)

        def connect(max_message_bytes: int) -> ZmqTransport:
            nonlocal transport
            transport = ZmqTransport(args.node_id, member.bind,
                                     federation.addresses(member.out_neighbours),
                                     max_message_bytes, keyring=keyring,
                                     in_neighbours=member.in_neighbours,
                                     listen_fd=args.listen_fd, source=member.source).open()
            return transport

        result = build_node(federation, args.node_id, connect, recorder).run()
        return 0 if result.status in ("finished", "left") else MISSED_EXIT
    except ProtofedError as exc:
        log.error("%s", exc)
        code, error = (2 if isinstance(exc, ConfigError) else 1), f"{type(exc).__name__}: {exc}"
    except (SystemExit, KeyboardInterrupt) as exc:
        log.warning("stopped by signal")  # asked to stop: not an error of this node
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 130
        error = STOPPED
    except Exception as exc:  # any bug must still leave a result file behind
        log.exception("node failed")
        code, error = 1, f"{type(exc).__name__}: {exc}"
    if recorder is not None:
        recorder.fail(error, status="stopped" if error == STOPPED else "failed")
    if transport is not None:
        transport.close(0)  # release the network at once
    return code


if __name__ == "__main__":
    exit_now(main())
