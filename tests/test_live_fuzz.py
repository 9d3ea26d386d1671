"""Integration: thousands of malformed messages at a running node over a real CurveZMQ socket.

The attacker holds an in-neighbour's key (the strongest position short of being that
neighbour), so every message reaches the decoder. The node must drop and count each one,
finish, and produce exactly the results of a clean run with the same seed.
"""

import contextlib
import json

import msgpack
import pytest
import torch
import zmq

from node.net.message import encode_message
from node.net.security import load_keyring
from tests.helpers import protofed_up, wait_until, write_config

pytestmark = pytest.mark.integration

COPIES = 500  # of each family: 24 families -> 12,000 messages
MEMORY_GROWTH_LIMIT = 50 * 1024**2


def header(**fields):
    base = {"v": 1, "sender": 1, "round": 1, "kind": "model", "meta": {}, "tensors": []}
    base.update(fields)
    return msgpack.packb(base, use_bin_type=True)


def spec(**fields):
    base = {"name": "w", "dtype": "float32", "shape": [2], "codec": "fp32", "scale": 0.0}
    base.update(fields)
    return base


def malformed_families():
    """Name -> frames; each is refused by a different check (or the same check reached
    through a different field)."""
    valid_model = encode_message(1, 1, "model", {"w": torch.ones(2)}, "fp32", {"samples": 5})
    nan_model = encode_message(1, 1, "model", {"w": torch.ones(2)}, "fp32", {"samples": 5})
    nan_model[1] = torch.tensor([float("nan"), 1.0]).numpy().tobytes()
    return {
        "empty frame": [b""],
        "random bytes": [bytes(range(256)) * 4],
        "msgpack list": [msgpack.packb([1, 2, 3])],
        "missing keys": [msgpack.packb({"v": 1, "sender": 1})],
        "extra key": [msgpack.packb({**msgpack.unpackb(header()), "x": 1})],
        "wrong version": [header(v=2)],
        "version as bool": [header(v=True)],
        "sender as text": [header(sender="01")],
        "sender as bool": [header(sender=True)],
        "negative sender": [header(sender=-1)],
        "claims another node": [header(sender=0)],
        "negative round": [header(round=-3)],
        "round past the end": [header(round=10**6)],
        "unknown kind": [header(kind="shell")],
        "meta of text": [header(meta={"samples": "many"})],
        "tensors not a list": [header(tensors={"w": 1})],
        "spec without frame": [header(tensors=[spec()])],
        "shape overflow": [header(tensors=[spec(shape=[0, 2**63 - 1])]), b""],
        "negative dimension": [header(tensors=[spec(shape=[-2])]), b"\0" * 8],
        "rank 9": [header(tensors=[spec(shape=[1] * 9)]), b"\0" * 4],
        "unknown dtype": [header(tensors=[spec(dtype="object")]), b"\0" * 8],
        "unknown codec": [header(tensors=[spec(codec="pickle")]), b"\0" * 8],
        "frame too short": [valid_model[0], valid_model[1][:3]],
        "non-finite values": nan_model,
    }


def flood(run_dir, families):
    """Connect to node 0 with node 1's key and send every family COPIES times; return count."""
    wait_until(lambda: (run_dir / "federation.json").exists(), "federation.json written", 120)
    address = json.loads((run_dir / "federation.json").read_text())["nodes"][0]["address"]
    ring = load_keyring(run_dir / "keys", 1, 2)
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, b"attacker")
    dealer.setsockopt(zmq.SNDHWM, 0)  # queue everything; it leaves once node 0 is up
    dealer.curve_secretkey, dealer.curve_publickey = ring.secret, ring.public
    dealer.curve_serverkey = ring.publics[0]
    dealer.connect(address)
    sent = 0
    for _ in range(COPIES):
        for frames in families.values():
            dealer.send_multipart(frames)
            sent += 1
    return context, dealer, sent


def test_malformed_flood_is_dropped_counted_and_changes_nothing(tmp_path, data_dir):
    families = malformed_families()
    assert len(families) >= 20
    with contextlib.ExitStack() as stack:
        runs = {}
        for name in ("fuzz-clean", "fuzz-flood"):
            # enough rounds that the victim is still running when the last malformed message
            # arrives (ZeroMQ makes the flooder wait while 16 are unread)
            config = write_config(tmp_path, data_dir, name, nodes=2, rounds=30)
            runs[name], _ = stack.enter_context(protofed_up(config, name))
        context, dealer, sent = flood(tmp_path / "results" / "fuzz-flood", families)
        stack.callback(context.term)
        stack.callback(dealer.close, 0)
        for name, process in runs.items():
            _, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, f"{name}: {stderr[-2000:]}"
    clean, flooded = ([json.loads((tmp_path / "results" / name / f"node-{i}.json").read_text())
                       for i in range(2)] for name in ("fuzz-clean", "fuzz-flood"))
    victim = flooded[0]
    assert victim["status"] == "finished"
    assert victim["dropped_count"] == sent >= 10_000
    assert victim["dropped_by_peer"] == {"1": sent}
    assert len(victim["dropped_by_reason"]) >= 20
    assert len(victim["dropped_messages"]) <= 50
    for a, b in zip(clean, flooded):
        assert [r["global_test"] for r in a["rounds"]] == [r["global_test"] for r in b["rounds"]]
        assert (a["bytes_sent"], a["bytes_received"]) == (b["bytes_sent"], b["bytes_received"])
    assert victim["peak_rss_bytes"] - clean[0]["peak_rss_bytes"] <= MEMORY_GROWTH_LIMIT
