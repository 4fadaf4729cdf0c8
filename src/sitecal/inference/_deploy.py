"""The deployable wrapper: a model whose logits are divided by the temperature of each study's group."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from torch import nn

from sitecal._validation import check_groups, check_logits
from sitecal.calibration import GroupTemperatures
from sitecal.errors import DataError

__all__ = ["GroupTemperatureScaler"]


class GroupTemperatureScaler(nn.Module):
    """Wrap a model so its logits are divided by the fitted temperature of each row's group.

    The per-group generalisation of the seed's ``ModelWithTemperature`` (gpleiss/temperature_scaling):
    the temperatures are fixed (fitted beforehand by :func:`fit_group_temperatures`), not learned here.
    Groups unseen at fitting time get the global temperature.

    Parameters
    ----------
    model : torch.nn.Module
        Returns logits of shape (B, C), (B,) or (B, 1) for an input batch.
    temperatures : GroupTemperatures
        E.g. ``GroupTemperatures.from_dict(json.load(open("calibration.json")))``.

    Notes
    -----
    Device-agnostic: the temperatures live in a non-persistent float64 buffer that follows
    ``.to(device)``, and are cast to the logits' dtype and device at each call. ``forward`` leaves the
    model's train/eval mode alone; :meth:`predict_proba` switches to eval mode under
    ``torch.no_grad()`` and restores ``model.train(was_training)`` afterwards.

    Examples
    --------
    >>> import torch
    >>> from sitecal.calibration import fit_group_temperatures
    >>> temps = fit_group_temperatures(
    ...     np.array([2.0, -2.0, 2.0, -1.0]), [1, 0, 0, 0], ["A", "A", "A", "A"], min_group_size=1
    ... )
    >>> scaler = GroupTemperatureScaler(torch.nn.Identity(), temps)
    >>> scaler.calibrate_logits(np.array([2.0, 2.0]), ["A", "unseen"]).round(3).tolist()
    [0.993, 0.993]
    """

    group_temperature: torch.Tensor

    def __init__(self, model: nn.Module, temperatures: GroupTemperatures) -> None:
        super().__init__()
        if not isinstance(temperatures, GroupTemperatures):
            raise DataError(
                "The 'temperatures' parameter of GroupTemperatureScaler must be a GroupTemperatures "
                "(from fit_group_temperatures or GroupTemperatures.from_dict). "
                f"Got {type(temperatures).__name__}."
            )
        self.model = model
        self.temperatures = temperatures
        self._names = sorted(temperatures.groups)
        table = [temperatures.groups[name].temperature for name in self._names]
        table.append(temperatures.global_fit.temperature)  # last slot: unseen groups
        self.register_buffer("group_temperature", torch.tensor(table, dtype=torch.float64), persistent=False)

    def _slots(self, groups: Sequence[str] | ArrayLike, n: int, func: str) -> NDArray[np.int64]:
        """Index into the temperature table per row (unseen groups -> the global slot)."""
        names = check_groups(groups, n=n, func=func)
        known = np.array(self._names, dtype=str) if self._names else np.empty(0, dtype=str)
        slot = np.searchsorted(known, names)  # known is sorted
        found = slot < known.shape[0]
        found[found] = known[slot[found]] == names[found]
        out: NDArray[np.int64] = np.where(found, slot, known.shape[0]).astype(np.int64)
        return out

    def temperatures_for(self, groups: Sequence[str] | ArrayLike) -> NDArray[np.float64]:
        """T per row, shape (N,) (same as ``temperatures.temperatures_for``)."""
        return self.temperatures.temperatures_for(groups)

    def calibrate_logits(self, logits: ArrayLike, groups: Sequence[str] | ArrayLike) -> NDArray[np.float64]:
        """Divide cached logits by each row's temperature, in float64 numpy; shape preserved.

        Parameters
        ----------
        logits : array_like, shape (N, C), (N,) or (N, 1)
        groups : sequence of str, length N

        Returns
        -------
        numpy.ndarray, float64, same shape as ``logits``
        """
        check_logits(logits, func="calibrate_logits")  # shape and finiteness
        z = np.asarray(logits, dtype=np.float64)
        t = self.temperatures.temperatures_for(np.asarray(groups)) if z.shape[0] else np.empty(0)
        if t.shape[0] != z.shape[0]:
            raise DataError(
                f"The 'groups' parameter of calibrate_logits must have one entry per row of 'logits' "
                f"({z.shape[0]}). Got {t.shape[0]}."
            )
        out: NDArray[np.float64] = z / (t if z.ndim == 1 else t[:, None])
        return out

    def forward(self, x: torch.Tensor, groups: Sequence[str]) -> torch.Tensor:
        """Calibrated logits ``model(x) / T[group]``, same shape, dtype and device as ``model(x)``."""
        logits = self.model(x)
        slots = self._slots(groups, int(logits.shape[0]), "GroupTemperatureScaler.forward")
        index = torch.as_tensor(slots, device=self.group_temperature.device)
        t = self.group_temperature[index].to(device=logits.device, dtype=logits.dtype)
        calibrated: torch.Tensor = logits / (t if logits.dim() == 1 else t.unsqueeze(1))
        return calibrated

    def predict_proba(self, x: torch.Tensor, groups: Sequence[str]) -> torch.Tensor:
        """Calibrated probabilities in eval mode without gradients; restores the model's mode.

        Returns shape (B, C); a single-logit model gives ``[1 - sigmoid(z / T), sigmoid(z / T)]``.
        """
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                logits = self.forward(x, groups)
        finally:
            self.model.train(was_training)
        if logits.dim() == 1 or logits.shape[1] == 1:
            p1 = torch.sigmoid(logits.reshape(-1))
            return torch.stack([1.0 - p1, p1], dim=1)
        probs: torch.Tensor = torch.softmax(logits, dim=1)
        return probs
