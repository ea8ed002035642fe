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
    target: np.ndarray | tuple[np.ndarray, ...] | None
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


def ctc_case(rng: np.random.Generator, impossible: bool = True) -> tuple[dict[str, Any], np.ndarray,
                                                tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray | None]:
    """A seeded CTC case (issue 32), framework-neutral: ``(options, x, label, upstream)``.

    ``options``: ``blank`` (0, the last class or any), ``reduction`` (``"mean"``, ``"sum"``,
    ``"none"``), ``zero_infinity``. ``x``: ``(T, N, C)`` eighths in [-4, 0] (exact in every float
    dtype), T in 3..8, N in 1..4, C in 3..6. ``label``: ``(targets (N, S) padded, input_lengths,
    target_lengths)``: a target at times repeating a label (a blank must separate its copies), of
    length 0 to S, input lengths from the shortest alignment to T (frames beyond them padding),
    and, where the reduced loss stays finite (``zero_infinity`` or ``"none"``), at times one item
    one frame short of any alignment (its loss +inf). ``upstream``: one per item for ``"none"``.
    ``impossible=False``: neither ``zero_infinity`` nor an impossible alignment (a peer without them).
    """
    frames, batch, classes = int(rng.integers(3, 9)), int(rng.integers(1, 5)), int(rng.integers(3, 7))
    blank = int(rng.choice([0, classes - 1, int(rng.integers(0, classes))]))
    reduction = str(rng.choice(["mean", "sum", "none"]))
    options: dict[str, Any] = {"blank": blank, "reduction": reduction,
                               "zero_infinity": bool(rng.random() < 0.4) and impossible}
    width = int(rng.integers(1, frames // 2 + 2))
    targets = rng.choice([c for c in range(classes) if c != blank], (batch, width))
    inputs, lengths, needs = np.zeros(batch, dtype=np.int64), np.zeros(batch, dtype=np.int64), []
    for b in range(batch):
        if width > 1 and rng.random() < 0.5:
            targets[b, 1] = targets[b, 0]  # a repeated label
        n = int(rng.integers(0, width + 1))
        while n and _shortest(targets[b, :n]) > frames:
            n -= 1
        needs.append(_shortest(targets[b, :n]))
        lengths[b], inputs[b] = n, int(rng.integers(max(needs[b], 1), frames + 1))
    short = [b for b in range(batch) if needs[b] >= 2]
    if impossible and (options["zero_infinity"] or reduction == "none") and short and rng.random() < 0.5:
        b = short[int(rng.integers(0, len(short)))]
        inputs[b] = needs[b] - 1  # one frame short of the shortest alignment: impossible
    x = -np.round(rng.uniform(0, 4, (frames, batch, classes)) * 8) / 8
    return options, x, (targets.astype(np.int64), inputs, lengths), upstream_for(rng, reduction, (batch,))


def ctc_draw(rng: np.random.Generator, op: str, blank: str, possible_only: bool = False) -> LossConfig:
    """A framework's CTC op at a :func:`ctc_case`: its kwargs the blank under the framework's name
    ``blank``, ``reduction`` and (unless ``possible_only``) ``zero_infinity``."""
    options, x, label, upstream = ctc_case(rng, impossible=not possible_only)
    kwargs = {blank: options["blank"], "reduction": options["reduction"]}
    if not possible_only:
        kwargs["zero_infinity"] = options["zero_infinity"]
    return LossConfig(op, kwargs, x, label, upstream, f"{op} " + " ".join(f"{k}={v}" for k, v in kwargs.items()))


def _shortest(target: np.ndarray) -> int:
    """The fewest frames an alignment of ``target`` takes: its length plus a blank per adjacent repeat."""
    return len(target) + int(np.count_nonzero(target[1:] == target[:-1]))
