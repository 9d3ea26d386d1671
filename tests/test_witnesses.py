"""Integration: the peers a node refused travel in its next model message, and its
in-neighbours count them as witnesses (aggregation.witnesses), over the nodes' real message
encoding. The attacker names everyone every round (experiments.attacks' "accuser")."""

import pytest

import node.algorithms
from experiments.attacks import attacker_class
from node.algorithms.profe import ProFe
from tests.helpers import PerNode, mnist_config, run_in_process

pytestmark = pytest.mark.integration


def witnessed_refusals(results):
    """(node, round, peer, reason) of every model refused on the word of others (its
    prototypes follow it out in the round's next step)."""
    return [(r["node"], record["round"], refusal["peer"], refusal["reason"])
            for r in results for record in r["rounds"] for refusal in record["refusals"]
            if refusal["rule"] == "witnessed" and refusal["what"] != "prototypes"]


@pytest.mark.parametrize("quorum", [1, 2])
def test_a_lone_accusers_word_refuses_only_under_a_quorum_of_one(data_dir, tmp_path,
                                                                 monkeypatch, quorum):
    config = mnist_config(data_dir, 2000, name="witnesses", nodes=3, rounds=3, seed=3,
                          algorithm="profe", aggregation={"witnesses": quorum},
                          model={"teacher_channels": [8, 16], "student_channels": [4, 8]})
    monkeypatch.setattr(node.algorithms, "ALGORITHMS", PerNode(
        node.algorithms.ALGORITHMS, {0: attacker_class(ProFe, "accuser")}))
    results = run_in_process(config, tmp_path)
    assert all(r["status"] == "finished" for r in results)
    found = witnessed_refusals(results)
    if quorum == 2:
        assert found == []  # one word is not two, whoever it names
        return
    # each honest node refuses the other in every round on node 0's word alone
    honest = [(me, round_, peer) for me, round_, peer, _ in found if me != 0]
    assert sorted(honest) == [(1, 1, 2), (1, 2, 2), (1, 3, 2), (2, 1, 1), (2, 2, 1),
                              (2, 3, 1)]
    assert all("1 of this node's in-neighbours (nodes 0)" in reason
               for me, _, _, reason in found if me != 0)
    # ... and never passes that on: refused on others' word in rounds 1 and 2, neither would
    # name the other in round 3 (a name needs two rounds' own refusals), and node 0, which
    # takes one word as enough, refuses nobody on theirs
    assert [f for f in found if f[0] == 0] == []
