"""Classification metrics as pure numpy functions."""

from __future__ import annotations

import numpy as np


def accuracy(predicted: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of predictions equal to the labels (0.0 for no samples)."""
    if labels.size == 0:
        return 0.0
    return float(np.mean(predicted == labels))


def macro_f1(predicted: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    """Unweighted mean of per-class F1 over the classes present in labels or predictions."""
    f1s = []
    for cls in range(num_classes):
        true_pos = int(np.sum((predicted == cls) & (labels == cls)))
        pred_pos = int(np.sum(predicted == cls))
        real_pos = int(np.sum(labels == cls))
        if pred_pos == 0 and real_pos == 0:
            continue
        f1s.append(2.0 * true_pos / (pred_pos + real_pos))
    return float(np.mean(f1s)) if f1s else 0.0


def top_class_share(predicted: np.ndarray) -> float:
    """Share of predictions that go to the most predicted class (1.0: one class for all)."""
    if predicted.size == 0:
        return 0.0
    return float(np.bincount(predicted.astype(np.int64)).max() / predicted.size)


def prediction_metrics(predicted: np.ndarray, labels: np.ndarray,
                       num_classes: int) -> dict[str, float]:
    """Accuracy, macro-F1 and the top predicted class's share of one set of predictions."""
    return {"accuracy": accuracy(predicted, labels),
            "f1": macro_f1(predicted, labels, num_classes),
            "top_class_share": top_class_share(predicted)}
