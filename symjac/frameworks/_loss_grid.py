"""The framework loss adapters' shared parts: a loss op as a :class:`LossConfig`, its seeded
inputs, and the configuration grid the adapters' ``loss_configurations(grid)`` draw from.

Each framework module maps its documented loss arguments onto a :class:`symjac.Loss`
(``symjac.frameworks.torch.cross_entropy(weight=..., label_smoothing=...)`` returns the spec
and a :class:`symjac.LossImpl` whose ``derivative`` and ``hvp`` are the framework's autodiff);
the grid here draws framework-neutral choices (kind, reduction, options, shapes) and dyadic
inputs in each kind's domain, exact in float32 and float64, so the framework and the exact
engine see the same numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from symjac.frameworks._adapter import grid_size


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """One loss op of a framework at one input.

    Attributes:
      op: the framework module's ready-made loss (``"cross_entropy"``).
      kwargs: its arguments.
      pred, label, upstream: the inputs (``upstream`` for ``reduction="none"`` only; ``label``
        None for a loss without one).
      label: a short human label.
    """

    op: str
    kwargs: Mapping[str, Any]
    pred: np.ndarray
    target: np.ndarray | None
    upstream: np.ndarray | None = None
    label: str = ""


def dyadic(rng: np.random.Generator, lo: float, hi: float, shape: tuple[int, ...], bits: int = 6) -> np.ndarray:
    """Values on a 2^-bits grid in [lo, hi]: exact in float32 and float64."""
    return np.asarray(np.clip(np.round(rng.uniform(lo, hi, shape) * 2**bits) / 2**bits, lo, hi))


def probabilities(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Rows of dyadic probabilities (multiples of 1/64) summing to 1."""
    raw = rng.integers(0, 16, shape).astype(np.float64) + (rng.random(shape) < 0.2)
    raw[..., 0] += 1  # no all-zero row
    counts = np.floor(raw / raw.sum(-1, keepdims=True) * 64)
    counts[..., -1] += 64 - counts.sum(-1)
    return np.asarray(counts / 64)


#: Draws of the framework-neutral choices: (kind, reduction, options, pred, label).
Draw = Callable[[np.random.Generator], "LossConfig | None"]


def generate_losses(grid: str, draws: list[Draw], seed: int = 23) -> Iterator[LossConfig]:
    """Seeded configurations: cycle through ``draws`` (a draw returning None is drawn again)."""
    rng = np.random.default_rng(seed)
    for i in range(grid_size(grid)):
        draw = draws[i % len(draws)]
        for _ in range(100):
            config = draw(rng)
            if config is not None:
                yield config
                break


def upstream_for(rng: np.random.Generator, reduction: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """A dyadic per-element upstream gradient for ``reduction="none"``, else None."""
    return dyadic(rng, -2, 2, shape, 3) if reduction == "none" else None
