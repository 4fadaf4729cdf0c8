"""Discrimination: the area under the ROC curve from rank statistics."""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from sitecal._validation import check_labels, check_option, check_probs
from sitecal.errors import DataError

__all__ = ["auroc"]

Average = Literal["macro", "weighted"]
AVERAGES = ("macro", "weighted")


def auroc(probs: ArrayLike, labels: ArrayLike, *, average: Average = "macro") -> float:
    r"""Area under the ROC curve: binary, or one-vs-rest averaged over classes.

    Parameters
    ----------
    probs : array_like, shape (N, C), C >= 2
        Predicted class probabilities; rows sum to 1 within 1e-6.
    labels : array_like, shape (N,)
        True class indices in ``[0, C)``.
    average : {"macro", "weighted"}, default "macro"
        For C > 2: the unweighted mean of the C one-vs-rest AUROCs (``"macro"``), or their mean
        weighted by class prevalence (``"weighted"``). Ignored for C = 2.

    Returns
    -------
    float
        In [0, 1]; 0.5 is chance.

    Raises
    ------
    DataError
        When a class scored has no positives or no negatives (the AUROC is undefined there).

    Notes
    -----
    Two classes: the score is ``probs[:, 1]`` and the positives are ``labels == 1``. With the
    :math:`n_1` positives' mid-ranks :math:`R_i` among all N scores (ties get the average of the ranks
    they span), the Mann–Whitney form is

    .. math:: \mathrm{AUROC} = \frac{\sum_{i:\, y_i = 1} R_i - n_1 (n_1 + 1) / 2}{n_1\, n_0}
              = P(s^+ > s^-) + \tfrac12 P(s^+ = s^-),

    which equals the trapezoidal area under the empirical ROC curve (ties count one half).
    For C > 2 class ``k`` is scored by ``probs[:, k]`` against ``labels == k`` (one-vs-rest), as
    ``sklearn.metrics.roc_auc_score(..., multi_class="ovr")`` and torchmetrics' ``multiclass_auroc``.

    References
    ----------
    H. B. Mann, D. R. Whitney. "On a test of whether one of two random variables is stochastically
    larger than the other." Ann Math Stat 18, 1947. J. A. Hanley, B. J. McNeil. "The meaning and use
    of the area under a receiver operating characteristic (ROC) curve." Radiology 143, 1982.
    D. J. Hand, R. J. Till. "A simple generalisation of the area under the ROC curve for multiple
    class classification problems." Machine Learning 45, 2001.

    Examples
    --------
    >>> probs = [[0.9, 0.1], [0.6, 0.4], [0.6, 0.4], [0.2, 0.8]]
    >>> auroc(probs, [0, 0, 1, 1])  # pairs (+, -): (.4,.1) win, (.4,.4) tie, (.8,.1), (.8,.4) win
    0.875
    """
    func = "auroc"
    p = check_probs(probs, func=func)
    y = check_labels(labels, n=p.shape[0], n_classes=p.shape[1], func=func)
    how = check_option(average, name="average", func=func, options=AVERAGES)
    n, n_classes = p.shape
    columns = [1] if n_classes == 2 else list(range(n_classes))
    scores = p[:, columns]
    positive = y[:, None] == np.asarray(columns)[None, :]
    n_pos = positive.sum(axis=0)
    n_neg = n - n_pos
    missing = np.flatnonzero((n_pos == 0) | (n_neg == 0))
    if missing.size:
        k = columns[int(missing[0])]
        which = "positives" if n_pos[missing[0]] == 0 else "negatives"
        raise DataError(
            f"The 'labels' parameter of {func} must hold both positives and negatives for every class "
            f"scored. Class {k} has no {which} among the {n} rows, so its AUROC is undefined; evaluate "
            "a group that contains every class, or merge rare classes first."
        )
    # imported here: scipy.stats takes over a second to import, and every reader of the metric registry
    # (the protocol, the report) imports this module without needing a rank
    from scipy.stats import rankdata

    ranks = rankdata(scores, method="average", axis=0)
    rank_sum = np.where(positive, ranks, 0.0).sum(axis=0)
    per_class = (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)
    if n_classes == 2 or how == "macro":
        return float(per_class.mean())
    return float(np.sum(per_class * n_pos) / n)
