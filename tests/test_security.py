"""CurveZMQ: keys per run, only in-neighbours' keys admitted, the key decides the sender."""

import json
import stat
import time
from pathlib import Path

import pytest
import zmq

from deploy.backends.compose import compose_document
from deploy.backends.docker_backend import container_command, container_mounts, node_folder
from deploy.backends.plan import keys_dir
from node.config import from_dict
from node.errors import ConfigError
from node.net.message import encode_message
from node.net.peers import Peers
from node.net.security import PUBLIC_FILE, generate_keys, load_keyring, secret_file, write_keys
from node.net.transport import ZmqTransport
from tests.helpers import drain, free_address, written_docker_plan, written_plan


@pytest.fixture
def keys(tmp_path):
    folder = tmp_path / "keys"
    write_keys(folder, generate_keys(3))
    return folder


def test_keys_are_owner_only_and_load_back(keys):
    assert stat.S_IMODE((keys / secret_file(1)).stat().st_mode) == 0o600
    ring = load_keyring(keys, 1, 3)
    assert ring.node_of(ring.public) == 1 and zmq.curve_public(ring.secret) == ring.public
    assert sorted(ring.publics) == [0, 1, 2]


@pytest.mark.parametrize("damage, message", [
    (lambda k: (k / secret_file(1)).unlink(), "cannot read"),
    (lambda k: (k / PUBLIC_FILE).write_text(json.dumps({"0": "x"})), "Z85"),
    (lambda k: (k / secret_file(1)).write_text((k / secret_file(2)).read_text()),
     "not node 1's"),
])
def test_damaged_key_files_are_refused_naming_the_file(keys, damage, message):
    damage(keys)
    with pytest.raises(ConfigError, match=message):
        load_keyring(keys, 1, 3)


def test_a_secret_that_does_not_match_its_public_key_is_refused(keys):
    own = json.loads((keys / secret_file(1)).read_text())
    own["secret"] = zmq.curve_keypair()[1].decode()
    (keys / secret_file(1)).write_text(json.dumps(own))
    with pytest.raises(ConfigError, match="does not belong"):
        load_keyring(keys, 1, 3)


def test_only_in_neighbours_keys_get_through_and_the_key_names_the_sender(keys):
    address = free_address()
    ring = [load_keyring(keys, i, 3) for i in range(3)]
    receiver = ZmqTransport(0, address, {}, 1 << 20, ring[0], in_neighbours=[1]).open()
    friend = ZmqTransport(1, free_address(), {0: address}, 1 << 20,
                          ring[1]).open()
    # node 2 has a valid key of the federation, but is not node 0's in-neighbour
    outsider = ZmqTransport(2, free_address(), {0: address}, 1 << 20,
                            ring[2]).open()
    stranger_keys = generate_keys(3)  # a key of no node
    stranger_ring = load_keyring(_folder_with(keys.parent / "other", stranger_keys), 1, 3)
    stranger = ZmqTransport(1, free_address(), {0: address}, 1 << 20,
                            stranger_ring).open()
    context = zmq.Context()
    plaintext = context.socket(zmq.DEALER)  # no CurveZMQ at all, claiming to be node 1
    plaintext.setsockopt(zmq.IDENTITY, b"1")
    plaintext.setsockopt(zmq.LINGER, 0)
    plaintext.connect(address)
    try:
        for i in range(100):
            outsider.send(0, [b"outsider", str(i).encode()])
            stranger.send(0, [b"stranger", str(i).encode()])
            try:  # the connection never completes, so there is usually nowhere to queue
                plaintext.send_multipart([b"plaintext", str(i).encode()], flags=zmq.NOBLOCK)
            except zmq.Again:
                pass
        friend.send(0, [b"friend"])
        got = drain(receiver, 2.0)
        assert got == [(1, [b"friend"])]  # 300 others: none delivered
        # the outsider is refused by the ZAP handler; the stranger, holding no node's key,
        # does not even know node 0's real server key, so its handshake fails before ZAP
        assert receiver.refused_keys >= 1
        # the refusal and the stranger's and the plaintext socket's failed handshakes are
        # counted for the node's record
        assert receiver.failed_handshakes >= 3, receiver.security_counts()
        assert receiver.security_counts()["refused_keys"] == receiver.refused_keys
        assert receiver.reply(1, [b"ack"])
        assert drain(friend, 1.0) == [(0, [b"ack"])]
    finally:
        plaintext.close()
        context.term()
        for transport in (receiver, friend, outsider, stranger):
            transport.close(0)


def _folder_with(folder, generated):
    write_keys(folder, generated)
    return folder


def test_a_peer_claiming_another_nodes_id_is_dropped(keys):
    """Node 2 (an admitted in-neighbour) writes sender 1 into its header: dropped, counted."""
    address = free_address()
    ring = [load_keyring(keys, i, 3) for i in range(3)]
    receiver = ZmqTransport(0, address, {}, 1 << 20, ring[0], in_neighbours=[1, 2]).open()
    liar = ZmqTransport(2, free_address(), {0: address}, 1 << 20,
                        ring[2]).open()
    peers = Peers(0, receiver, in_neighbours=[1, 2], out_neighbours=[], rounds=3,
                  max_message_bytes=1 << 20, codecs={"model": "fp32", "prototypes": "fp32"})
    try:
        for _ in range(20):
            liar.send(0, encode_message(1, 1, "prototypes"))
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and peers.meter.dropped_count < 20:
            peers.poll(0.1)
        assert peers.meter.dropped_count == 20
        assert all("does not match" in r for r in peers.meter.dropped_by_reason)
        assert not peers.inbox.has(1, 1, ["prototypes"])
    finally:
        receiver.close(0)
        liar.close(0)


def test_each_container_mounts_only_its_own_secret_and_its_own_results_folder(tmp_path):
    config, plan = written_docker_plan(tmp_path)
    assert sorted(p.name for p in keys_dir(plan).iterdir()) == sorted([
        PUBLIC_FILE, secret_file(0), secret_file(1), secret_file(2)])
    mounts = container_mounts(plan, 1, tmp_path)
    key_mounts = [Path(source).name for source, target, _ in mounts if target.startswith("/keys")]
    assert key_mounts == [PUBLIC_FILE, secret_file(1)]
    assert all(read_only for _, target, read_only in mounts if target.startswith("/keys"))
    # the only writable mount: its own folder of the run, which holds no key and no other
    # node's results
    writable = [(source, target) for source, target, read_only in mounts if not read_only]
    assert writable == [(str(node_folder(plan, 1).resolve()), "/results")]
    assert not node_folder(plan, 1).resolve().is_relative_to(keys_dir(plan).resolve())
    assert container_command(plan, 1)[-2:] == ["--keys", "/keys"]
    services = compose_document(config, plan, "img:1", tmp_path)["services"]
    tmpfs = [v["target"] for s in services.values() for v in s["volumes"] if v["type"] == "tmpfs"]
    assert sorted(tmpfs) == ["/tmp"] * 3
    node_2_secrets = [s for s in services.values()
                      for v in s["volumes"] if v.get("source", "").endswith(secret_file(2))]
    assert len(node_2_secrets) == 1  # only node 2's own service mounts it


def test_with_security_off_there_are_no_keys(tmp_path):
    _, plan = written_plan(tmp_path, security="none")
    assert not keys_dir(plan).exists()
    assert "--keys" not in container_command(plan, 0)


def test_security_must_be_curve_or_none():
    with pytest.raises(ConfigError, match="deploy.security"):
        from_dict({"deploy": {"security": "tls"}})


def test_security_off_on_docker_needs_a_second_flag():
    with pytest.raises(ConfigError, match="deploy.allow_insecure = true"):
        from_dict({"deploy": {"security": "none", "backend": "docker"}})
    from_dict({"deploy": {"security": "none", "backend": "docker", "allow_insecure": True}})
    from_dict({"deploy": {"security": "none"}})  # local: loopback only


def test_compose_refuses_security_off_without_the_second_flag(tmp_path, capsys):
    from deploy import cli

    config = tmp_path / "c.toml"
    config.write_text('nodes = 2\n[deploy]\nsecurity = "none"\n'
                      f'results_dir = "{tmp_path}"\n')
    assert cli.main(["compose", "-c", str(config), "--image", "img:1"]) == 2
    assert "deploy.allow_insecure = true" in capsys.readouterr().err
    assert not any(tmp_path.glob("*/compose.yaml"))
