"""The bytes a federation moves follow its graph and its codec: ProFe federations in one
process on real MNIST (the metering is the round loop's; the real sockets' part is in
test_federation.py)."""

import pytest

from tests.helpers import mnist_config, run_in_process


@pytest.fixture(scope="module")
def federations(data_dir, tmp_path_factory):
    """Four ProFe nodes for one round: fully connected with int16, on a ring with int16,
    fully connected with fp32."""
    runs = {}
    for topology, codec in (("fully_connected", "int16"), ("ring", "int16"),
                            ("fully_connected", "fp32")):
        config = mnist_config(data_dir, 1500, name="bytes", nodes=4, rounds=1, seed=7,
                              topology={"kind": topology}, exchange={"codec": codec})
        runs[topology, codec] = run_in_process(config, tmp_path_factory.mktemp(codec))
    return runs


def test_ring_and_fully_connected_move_the_bytes_their_graphs_imply(federations):
    fc, ring = federations["fully_connected", "int16"], federations["ring", "int16"]
    assert all(len(n["out_neighbours"]) == 3 and len(n["in_neighbours"]) == 3 for n in fc)
    assert all(len(n["out_neighbours"]) == 2 and len(n["in_neighbours"]) == 2 for n in ring)
    for a, b in zip(fc, ring, strict=True):
        for kind in ("model", "prototypes"):
            assert a["bytes_sent_by_kind"][kind] > 0
            ratio = b["bytes_sent_by_kind"][kind] / a["bytes_sent_by_kind"][kind]
            assert ratio == pytest.approx(2 / 3, rel=0.01), (kind, a["node"])


def test_int16_sends_about_half_the_model_bytes_of_fp32(federations):
    int16, fp32 = federations["fully_connected", "int16"], federations["fully_connected", "fp32"]
    for a, b in zip(int16, fp32, strict=True):
        ratio = a["bytes_sent_by_kind"]["model"] / b["bytes_sent_by_kind"]["model"]
        assert ratio == pytest.approx(0.5, abs=0.01)


def test_a_hub_star_at_a_tenth_participation_moves_the_bytes_a_hand_count_predicts(
        data_dir, tmp_path):
    """A hub (node 0, no data) and 10 FedAvg clients, one drawn per round for 3 rounds: each
    round the drawn client sends the hub one model, and the hub sends its average to the
    client drawn for the next round (it starts from it) or, in the last round, to all 10.
    So the hub sends (3 - 1 + 10) x its message and receives 3 client messages; a client
    sends one model per round it is drawn and receives one per round it is drawn after the
    first, plus the last round's; int16 models are 2 bytes a parameter."""
    from topology.participation import chosen

    rounds, clients = 3, 10
    config = mnist_config(data_dir, 1500, name="hub", nodes=1 + clients, rounds=rounds,
                          seed=7, algorithm="fedavg", participation=0.1,
                          topology={"kind": "star", "hub": 0})
    nodes = run_in_process(config, tmp_path)
    assert [n["status"] for n in nodes] == ["finished"] * (1 + clients)
    hub = nodes[0]
    assert hub["train_samples"] == 0 and all(n["train_samples"] > 0 for n in nodes[1:])
    drawn = [next(iter(chosen(range(1, 1 + clients), 0.1, 7, r))) for r in range(1, 1 + rounds)]
    assert [hub["rounds"][r]["participants"] for r in range(1, 1 + rounds)] == [[c] for c in drawn]

    def model_bytes(record, key):
        return {int(p): kinds["model"] for p, kinds in record[key].items() if "model" in kinds}

    hub_message = model_bytes(hub["rounds"][1], "bytes_sent_by_peer")[drawn[1]]
    parameters = nodes[0]["model_parameters"]
    assert 0 <= hub_message - 2 * parameters < 1024  # int16 tensors plus headers
    for r, client in enumerate(drawn, start=1):
        record = hub["rounds"][r]
        down = range(1, 1 + clients) if r == rounds else [drawn[r]]
        assert model_bytes(record, "bytes_sent_by_peer") == dict.fromkeys(down, hub_message)
        assert set(model_bytes(record, "bytes_received_by_peer")) == {client}
        assert record["missing_peers"] == []
    assert hub["bytes_sent_by_kind"]["model"] == (rounds - 1 + clients) * hub_message
    client_messages = {}
    for node in nodes[1:]:
        me, times = node["node"], drawn.count(node["node"])
        sent = [model_bytes(r, "bytes_sent_by_peer") for r in node["rounds"][1:]]
        assert [s for s in sent if s] == [{0: s[0]} for s in sent if s] and len(
            [s for s in sent if s]) == times
        client_messages |= {r: s[0] for r, s in enumerate(sent, start=1) if s}
        assert all(0 <= s[0] - 2 * parameters < 1024 for s in sent if s)
        assert node["bytes_received_by_kind"]["model"] == (
            drawn[1:].count(me) + 1) * hub_message, me
        heard = [r for r, record in enumerate(node["rounds"][1:], start=1)
                 if model_bytes(record, "bytes_received_by_peer")]
        assert heard == sorted({r - 1 for r in range(2, 1 + rounds) if drawn[r - 1] == me}
                               | {rounds}), me
    assert hub["bytes_received_by_kind"]["model"] == sum(client_messages.values())
    # every client ends on the model the hub sent them all in the last round
    assert len({n["rounds"][-1]["model_sketch"] for n in nodes[1:]}) == 1
