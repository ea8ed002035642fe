"""A user adapter for the ``conform`` tests of loss rows and known defects (no framework needed):
symjac's NumPy lowering as the pools, NumPy mean squared errors as the losses.

- ``max_ok``: right; ``max_known``: a doubled gradient the adapter documents as a known defect;
  ``avg_fixed``: a documented defect that does not reproduce (the op is right).
- losses: ``mse`` right; ``mse_half_hvp``: its HVP is v/n, half the exact 2v/n (∂²/∂p² of
  Σ(p - y)²/n is 2/n on the diagonal); ``mse_known``: the same bug, documented.
"""

from __future__ import annotations

import numpy as np

import symjac
from symjac.frameworks import Config, Impl, LossConfig


def make(config):
    spec = symjac.Pool("avg" if config.op.startswith("avg") else "max", 2)
    lowered = symjac.lower(spec, config.input_shape)
    scale = 2.0 if config.op == "max_known" else 1.0
    return spec, Impl(lowered.forward, lambda x, dy: (lowered.vjp(x, dy) * scale).astype(x.dtype), "numpy",
                      config.op, {}, "dx = backward(x, dy)\n")


def configurations(grid="small"):
    for op in ("max_ok", "max_known", "avg_fixed"):
        yield Config(op, {}, (1, 1, 4, 4), op)


def known_defect(config, transform="vjp"):
    if config.op in ("max_known", "avg_fixed") and transform == "vjp":
        return f"{config.op}: its gradient is doubled"
    return None


PRED = np.array([[0.5, -1.0, 2.0], [0.25, 0.75, -0.5]])
LABEL = np.array([[0.25, 0.0, 1.5], [0.5, 0.5, 0.0]])


def loss_configurations(grid="small"):
    for op in ("mse", "mse_half_hvp", "mse_known"):
        yield LossConfig(op, {}, PRED, LABEL, None, op)


def make_loss(config):
    n = PRED.size
    half = config.op != "mse"
    snippet = (f"derivative = 2 * (pred - label) / {n}\n"
               f"hvp = {'1' if half else '2'} * v / {n}  # the planted bug: {'half' if half else 'none'}\n")
    return symjac.Loss("mse"), symjac.LossImpl(
        loss=symjac.Loss("mse"), derivative=lambda p, y: (2 * (p - y) / n).astype(p.dtype),
        forward=lambda p, y: np.asarray(((p - y) ** 2).mean(), dtype=p.dtype),
        hvp=lambda p, y, v: ((1 if half else 2) * v / n).astype(p.dtype), reproducer=snippet)


def known_loss_defect(config, dtype, transform):
    return "mse_known: its hvp is halved" if config.op == "mse_known" and transform == "hvp" else None
