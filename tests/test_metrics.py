"""Accuracy and macro-F1 against hand computations."""

import numpy as np
import pytest

from node.metrics import accuracy, macro_f1


def test_macro_f1_by_hand():
    predicted = np.array([0, 0, 1, 1])
    labels = np.array([0, 1, 1, 1])
    # class 0: 2*1/(2+1) = 2/3; class 1: 2*2/(2+3) = 4/5
    assert macro_f1(predicted, labels, 3) == pytest.approx((2 / 3 + 4 / 5) / 2)
    assert accuracy(predicted, labels) == pytest.approx(0.75)


def test_perfect_and_empty():
    labels = np.array([2, 0, 1])
    assert macro_f1(labels, labels, 3) == 1.0
    assert accuracy(np.array([]), np.array([])) == 0.0
    assert macro_f1(np.array([]), np.array([]), 3) == 0.0
