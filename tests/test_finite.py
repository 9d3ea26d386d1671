"""node.finite.all_finite against the elementwise answer, the overflow case included."""

import math

import torch

from node.finite import all_finite


def test_finite_tensors_pass_and_integers_are_not_looked_at():
    assert all_finite([torch.tensor([1.0, -2.0]), torch.zeros(0), torch.tensor([7])])
    assert all_finite([])


def test_a_nan_or_an_infinity_anywhere_fails():
    for bad in (math.nan, math.inf, -math.inf):
        tensor = torch.ones(1000)
        tensor[617] = bad
        assert not all_finite([torch.ones(3), tensor])


def test_opposite_infinities_whose_sum_is_nan_fail():
    assert not all_finite([torch.tensor([math.inf, -math.inf])])


def test_finite_values_whose_sum_overflows_pass():
    huge = torch.tensor([3e38, 3e38, -1.0])
    assert math.isinf(float(huge.sum()))
    assert all_finite([huge])


def test_half_and_double_tensors_are_judged_alike():
    assert all_finite([torch.tensor([60000.0, 60000.0], dtype=torch.float16),
                       torch.tensor([1e300, 1e300], dtype=torch.float64)])
    assert not all_finite([torch.tensor([1.0, math.nan], dtype=torch.float64)])
