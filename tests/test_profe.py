"""ProFe's trainer: the logit views of its KD term, the alpha schedule, the order of teacher
and student, what travels, aggregation with the prototype refresh, and its presets."""

import math

import pytest
import torch

from node.algorithms import create, losses
from node.algorithms.profe import PRESETS, ProFe
from node.config import from_dict
from tests.helpers import CPU, as_received, snapshot, tiny_data


def profe(data, **profe_settings):
    """Node 0 of a two-node ProFe federation with tiny CNNs (teacher 4/8, student 2/4), on
    noise images: no peer's round teaches anything validation could see, so it is off."""
    config = from_dict({"nodes": 2, "seed": 1, "rounds": 4, "aggregation": {"validation": 0},
                        "model": {"teacher_channels": [4, 8], "student_channels": [2, 4],
                                  "embedding_dim": 4},
                        "train": {"batch_size": 8, "device": "cpu"},
                        "profe": profe_settings})
    return create("profe", config, data, CPU, 0)


def test_capped_logits_by_hand():
    # row 1: centred (-3, 3), spread 3 > 1 -> (-1, 1); row 2: centred (-0.5, 0.5), spread
    # 0.5 <= 1 -> only centred
    z = torch.tensor([[1.0, 7.0], [2.0, 3.0]])
    assert losses.capped(z).tolist() == [[-1.0, 1.0], [-0.5, 0.5]]
    assert torch.allclose(losses.standardized(z), torch.tensor([[-1.0, 1.0], [-1.0, 1.0]]),
                          atol=1e-5)


def test_capped_kd_ignores_the_teachers_scale_and_has_a_bounded_gradient():
    confident = torch.tensor([[30.0, 0.0, 0.0]])
    # a row whose spread is above 1 is capped to spread 1 whatever its scale
    small = float(losses.kd_loss(torch.zeros(1, 3), confident, 2.0, logits="capped"))
    large = float(losses.kd_loss(torch.zeros(1, 3), confident * 100, 2.0, logits="capped"))
    assert small == pytest.approx(large, rel=1e-6)
    student = torch.zeros(1, 3, requires_grad=True)
    losses.kd_loss(student, confident * 100, 2.0, logits="capped").backward()
    assert float(student.grad.abs().max()) <= 2.0  # T * |p_s - p_t| with the student uncapped
    # A student that already ranks the classes like the teacher, at a modest scale, is done
    # under the capped term; the raw term keeps pushing it towards the teacher's scale.
    ranked = torch.tensor([[3.0, 0.0, 0.0]], requires_grad=True)
    assert float(losses.kd_loss(ranked.detach(), confident * 100, 2.0, logits="capped")) < 1e-6
    losses.kd_loss(ranked, confident * 100, 2.0).backward()
    assert float(losses.kd_loss(ranked.detach(), confident * 100, 2.0)) > 0.5
    assert float(ranked.grad.abs().max()) > 0.3


def test_capped_kd_by_hand():
    # teacher (3, 0): centred (1.5, -1.5), spread 1.5 -> (1, -1); at T = 1, p_t =
    # softmax(1, -1) = (e/(e+1/e), ...); student (0, 0) -> p_s = (1/2, 1/2)
    a = math.e / (math.e + 1 / math.e)
    expected = a * math.log(a / 0.5) + (1 - a) * math.log((1 - a) / 0.5)
    value = losses.kd_loss(torch.zeros(1, 2), torch.tensor([[3.0, 0.0]]), 1.0, logits="capped")
    assert float(value) == pytest.approx(expected, rel=1e-6)


def test_unit_length_feature_term_by_hand():
    # (3, 4) -> (0.6, 0.8); (0, 2) -> (0, 1): MSE = (0.36 + 0.04) / 2
    value = losses.feature_mse(torch.tensor([[3.0, 4.0]]), torch.tensor([[0.0, 2.0]]), True)
    assert float(value) == pytest.approx(0.2)


@pytest.mark.parametrize("schedule, expected", [
    ("halve", [1.0, 0.5, 0.25, 0.125, 0.0]),
    ("linear", [1.0, 0.5, 0.0, 0.0, 0.0]),  # 2 * alpha_0 / rounds = 0.5 with 4 rounds
])
def test_alpha_schedule_and_the_teacher_retiring(schedule, expected):
    algorithm = profe(tiny_data(), alpha_schedule=schedule)
    seen, trained = [], []
    for round_ in range(1, 6):
        before = snapshot(algorithm.teacher.state_dict())
        stats = algorithm.train_round(round_)
        seen.append(stats["alpha_s"])
        changed = any(not torch.equal(before[k], v)
                      for k, v in algorithm.teacher.state_dict().items())
        trained.append(changed)
        assert stats["teacher_trained"] == float(stats["alpha_s"] > 0)
    assert seen == pytest.approx(expected)
    assert trained == [alpha > 0 for alpha in expected]  # a retired teacher never moves


@pytest.mark.parametrize("order, teacher_passes", [("teacher_first", 2), ("same_batch", 1)])
def test_teacher_first_trains_the_teacher_before_the_student_distils(order, teacher_passes):
    data = tiny_data(samples=16)
    algorithm = profe(data, order=order)
    calls = []
    algorithm.teacher.register_forward_hook(
        lambda module, args, out: calls.append(torch.is_grad_enabled()))
    algorithm.train_round(1)
    batches = 2  # 16 samples, batch 8
    if order == "teacher_first":
        # its own epoch with gradients, then one forward per student batch without
        assert calls == [True] * batches + [False] * batches
    else:
        assert calls == [True] * batches  # one forward per batch, shared with the student
    assert len(calls) == teacher_passes * batches


def test_what_travels_is_the_student_and_its_prototypes_of_local_classes():
    data = tiny_data(classes=5, labelled=3)  # classes 3 and 4 are held by nobody here
    algorithm = profe(data)
    algorithm.train_round(1)
    payload = algorithm.payload()
    assert ProFe.kinds == ("model", "prototypes") and set(payload) == {"model", "prototypes"}
    assert set(payload["model"].tensors) == set(algorithm.student.state_dict())
    counts = data.train_y.bincount(minlength=data.num_classes).tolist()
    assert payload["model"].meta == {"samples": 20, "classes": counts}
    protos = payload["prototypes"].tensors
    assert protos["classes"].tolist() == [0, 1, 2]
    assert protos["counts"].tolist() == [7, 7, 6]
    assert protos["prototypes"].shape == (3, 4)
    assert algorithm.local_classes.tolist() == [True, True, True, False, False]


def test_aggregation_averages_students_then_refreshes_prototypes_on_the_average():
    data = tiny_data()
    own, peer = profe(data), profe(tiny_data(seed=5))
    own.train_round(1)
    peer.train_round(1)
    own_payload, peer_payload = as_received(own.payload()), as_received(peer.payload())
    rejected = own.aggregate({"model": own_payload["model"]}, {1: {"model": peer_payload["model"]}})
    assert rejected == []
    for name, value in own.student.state_dict().items():
        mean = (own_payload["model"].tensors[name] + peer_payload["model"].tensors[name]) / 2
        assert torch.allclose(value, mean, atol=1e-6)
    # the prototypes it sends next are class means of the averaged student's embeddings
    with torch.no_grad():
        own.student.eval()
        _, embeddings = own.student(data.train_x)
    expected = torch.stack([embeddings[data.train_y == c].mean(0) for c in range(3)])
    assert torch.allclose(own.payload()["prototypes"].tensors["prototypes"], expected,
                          atol=1e-5)
    own.aggregate({"prototypes": own.payload()["prototypes"]},
                  {1: {"prototypes": peer_payload["prototypes"]}})
    assert own.known.tolist() == [True, True, True]


def test_the_model_step_costs_no_pass_over_the_train_set(monkeypatch):
    # "aggregated": the trained student's prototypes would be replaced by the aggregate's
    # before anything reads them, so only the aggregate's are computed; "local" sends the
    # trained student's with it, computed once
    import node.algorithms.prototype_base as base

    passes = []
    real = base.train_prototypes
    monkeypatch.setattr(base, "train_prototypes",
                        lambda model, *rest: passes.append(model) or real(model, *rest))
    data = tiny_data()
    for source, steps in (("aggregated", (("model",), ("prototypes",))),
                          ("local", (("model", "prototypes"),))):
        config = profe(data).config.to_dict()
        node = create("profe", from_dict({**config, "exchange": {"prototypes_from": source}}),
                      data, CPU, 0)
        assert node.exchange_steps() == steps
        passes.clear()
        node.train_round(1)
        assert not node.student.training  # in eval mode, as the pass leaves it
        own = node.payloads_of(steps[0])
        assert set(own) == set(steps[0]) and len(passes) == (source == "local")
        node.aggregate(own, {})
        sent = node.payloads_of(steps[-1])["prototypes"]
        assert len(passes) == 1
        with torch.no_grad():
            embeddings = node.student.eval()(data.train_x)[1]
        expected = torch.stack([embeddings[data.train_y == c].mean(0) for c in range(3)])
        assert torch.allclose(sent.tensors["prototypes"], expected, atol=1e-5)
        assert node.payloads_of(steps[-1]).keys() == {*steps[-1]} and len(passes) == 1


def test_presets_name_only_keys_that_exist():
    config = from_dict({})
    for preset in PRESETS.values():
        for table, values in preset.items():
            target = config.methods["profe"] if table == "profe" else getattr(config, table)
            assert set(values) <= set(vars(target)), (table, set(values) - set(vars(target)))


def test_the_paper_preset_is_the_earlier_reading():
    paper = from_dict({"profe": {"preset": "paper"}}).methods["profe"]
    assert (paper.order, paper.kd_logits, paper.features) == ("same_batch", "raw", "raw")
    default = from_dict({}).methods["profe"]
    assert (default.order, default.kd_logits, default.features) == (
        "teacher_first", "capped", "normalized")
