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
