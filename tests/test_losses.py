"""Every ProFe loss term against a hand computation (paper 002, section III)."""

import math

import pytest
import torch

from node.algorithms import losses


def test_cross_entropy_uniform_logits_is_log_of_class_count():
    logits = torch.zeros(1, 4)
    assert float(losses.cross_entropy(logits, torch.tensor([2]))) == pytest.approx(math.log(4))


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_kd_loss_matches_kl_times_t_squared(temperature):
    student = torch.tensor([[0.0, 0.0]])
    teacher = torch.tensor([[math.log(3.0), 0.0]])
    # p_t = softmax(teacher / T); p_s = softmax(student / T) = (1/2, 1/2)
    a = 3.0 ** (1.0 / temperature)
    p_t = [a / (a + 1.0), 1.0 / (a + 1.0)]
    kl = sum(p * math.log(p / 0.5) for p in p_t)
    expected = kl * temperature**2
    assert float(losses.kd_loss(student, teacher, temperature)) == pytest.approx(expected, rel=1e-5)


def test_kd_loss_at_t1_by_hand():
    # p_t = (0.75, 0.25), p_s = (0.5, 0.5): 0.75 ln 1.5 + 0.25 ln 0.5
    value = losses.kd_loss(torch.zeros(1, 2), torch.tensor([[math.log(3.0), 0.0]]), 1.0)
    assert float(value) == pytest.approx(0.75 * math.log(1.5) + 0.25 * math.log(0.5), rel=1e-6)


def test_kd_loss_is_zero_for_equal_outputs_and_averages_over_batch():
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]])
    assert float(losses.kd_loss(logits, logits, 3.0)) == pytest.approx(0.0, abs=1e-7)
    teacher = torch.tensor([[math.log(3.0), 0.0], [0.0, 0.0]])
    both = losses.kd_loss(torch.zeros(2, 2), teacher, 1.0)
    first = losses.kd_loss(torch.zeros(1, 2), teacher[:1], 1.0)
    assert float(both) == pytest.approx(float(first) / 2)


EMB = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
LABELS = torch.tensor([0, 1])
PROTOS = torch.tensor([[0.0, 0.0], [1.0, 1.0]])


def test_prototype_mse_by_hand():
    # differences (1, 2) and (2, 3): squares 1 + 4 + 4 + 9 = 18 over 4 elements
    known = torch.tensor([True, True])
    assert float(losses.prototype_mse(EMB, LABELS, PROTOS, known)) == pytest.approx(4.5)


def test_prototype_mse_ignores_classes_without_a_global_prototype():
    known = torch.tensor([True, False])
    assert float(losses.prototype_mse(EMB, LABELS, PROTOS, known)) == pytest.approx(2.5)
    none = torch.tensor([False, False])
    assert float(losses.prototype_mse(EMB, LABELS, PROTOS, none)) == 0.0


def test_feature_mse_by_hand():
    student = torch.tensor([[1.0, 1.0]])
    teacher = torch.tensor([[0.0, 3.0]])
    assert float(losses.feature_mse(student, teacher)) == pytest.approx((1 + 4) / 2)


def test_teacher_loss_is_ce_plus_beta_t_prototype_term():
    logits = torch.zeros(2, 2)
    known = torch.tensor([True, True])
    value = losses.teacher_loss(logits, EMB, LABELS, PROTOS, known, beta_t=0.5)
    assert float(value) == pytest.approx(math.log(2) + 0.5 * 4.5)


def test_student_loss_combines_every_term_of_eq8():
    logits = torch.zeros(2, 2)
    teacher_logits = torch.tensor([[math.log(3.0), 0.0], [math.log(3.0), 0.0]])
    teacher_emb = torch.tensor([[1.0, 2.0], [3.0, 2.0]])  # feature MSE = (0+0+0+4)/4 = 1
    known = torch.tensor([True, True])
    kd = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    value = losses.student_loss(logits, EMB, LABELS, PROTOS, known, beta_s=2.0, alpha_s=0.5,
                                teacher_logits=teacher_logits, teacher_embeddings=teacher_emb,
                                temperature=1.0)
    assert float(value) == pytest.approx(math.log(2) + 2.0 * 4.5 + 0.5 * (kd + 1.0), rel=1e-6)


def test_student_loss_without_distillation_needs_no_teacher():
    known = torch.tensor([True, True])
    value = losses.student_loss(torch.zeros(2, 2), EMB, LABELS, PROTOS, known, beta_s=1.0,
                                alpha_s=0.0, teacher_logits=None, teacher_embeddings=None,
                                temperature=2.0)
    assert float(value) == pytest.approx(math.log(2) + 4.5)
    with pytest.raises(ValueError):
        losses.student_loss(torch.zeros(2, 2), EMB, LABELS, PROTOS, known, 1.0, 0.5, None, None,
                            2.0)


@pytest.mark.parametrize("weight, limit, expected", [
    (1.0, 0.1, 0.5), (0.5, 0.1, 0.25), (0.2, 0.1, 0.1), (0.15, 0.1, 0.0), (0.0, 0.1, 0.0),
    (1.0, 0.0, 0.5)])
def test_distillation_weight_halves_then_stops_below_limit(weight, limit, expected):
    assert losses.decayed_weight(weight, limit) == pytest.approx(expected)


@pytest.mark.parametrize("weight, initial, rounds, limit, expected", [
    (1.0, 1.0, 10, 0.01, 0.8), (0.2, 1.0, 10, 0.01, 0.0), (0.5, 0.5, 4, 0.01, 0.25),
    (0.25, 0.5, 4, 0.01, 0.0), (1.0, 1.0, 10, 0.9, 0.0)])
def test_linear_schedule_lowers_by_twice_the_initial_weight_over_the_rounds(
        weight, initial, rounds, limit, expected):
    assert losses.decayed_weight(weight, limit, "linear", initial, rounds) == pytest.approx(
        expected, abs=1e-12)


def test_kd_over_local_classes_renormalises_both_distributions_over_those_classes():
    # Over classes 0 and 1 only: p_t = (0.75, 0.25), p_s = (0.5, 0.5); class 2 is ignored
    # however far apart the two models put it.
    student = torch.tensor([[0.0, 0.0, 5.0]])
    teacher = torch.tensor([[math.log(3.0), 0.0, -20.0]])
    mask = torch.tensor([True, True, False])
    value = losses.kd_loss(student, teacher, 1.0, mask)
    assert float(value) == pytest.approx(0.75 * math.log(1.5) + 0.25 * math.log(0.5), rel=1e-6)


def test_prototype_softmax_ce_by_hand_sums_over_samples_with_a_prototype():
    # sample 0: target softmax(0, 0) = (1/2, 1/2), log softmax(1, 2) = (-1 - c, -c) with
    # c = ln(1 + e^-1): CE = 1/2 (1 + c) + 1/2 c. Sample 1's class has no prototype.
    known = torch.tensor([True, False])
    c = math.log(1.0 + math.exp(-1.0))
    value = losses.prototype_softmax_ce(EMB, LABELS, PROTOS, known, 1.0)
    assert float(value) == pytest.approx(0.5 * (1.0 + c) + 0.5 * c, rel=1e-6)
    both = losses.prototype_softmax_ce(EMB, LABELS, PROTOS, torch.tensor([True, True]), 1.0)
    # sample 1: target softmax(1, 1) = (1/2, 1/2) and log softmax(3, 4): the same CE again
    assert float(both) == pytest.approx(2 * float(value), rel=1e-6)


def test_student_loss_weights_kd_and_feature_terms_separately():
    logits = torch.zeros(2, 2)
    teacher_logits = torch.tensor([[math.log(3.0), 0.0], [math.log(3.0), 0.0]])
    teacher_emb = torch.tensor([[1.0, 2.0], [3.0, 2.0]])  # feature MSE 1
    known = torch.tensor([False, False])  # no prototype term
    kd = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    value = losses.student_loss(logits, EMB, LABELS, PROTOS, known, beta_s=1.0, alpha_s=0.5,
                                teacher_logits=teacher_logits, teacher_embeddings=teacher_emb,
                                temperature=1.0, kd_weight=2.0, feature_weight=0.0)
    assert float(value) == pytest.approx(math.log(2) + 0.5 * 2.0 * kd, rel=1e-6)
