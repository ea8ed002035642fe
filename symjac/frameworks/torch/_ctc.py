"""PyTorch's ``ctc_loss`` as a :class:`symjac.LossImpl` with its spec, its conform draw and reproducer
(:mod:`symjac.frameworks.torch._losses` lists it in its table and grid; issue 32)."""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac.frameworks._adapter import LossImpl, require
from symjac.frameworks._loss_grid import LossConfig, ctc_draw as draw
from symjac.frameworks.torch._arrays import to_numpy, to_torch
from symjac.loss._spec import Loss


def ctc_loss(blank: int = 0, reduction: str = "mean", zero_infinity: bool = False, *, scale: Any = 1,
             assume_log_softmax: bool = True) -> tuple[Loss, LossImpl]:
    """``F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)``
    and its spec ``Loss("ctc", blank, zero_infinity, assume_log_softmax=True)``.

    The impl's calls take PyTorch's arguments (``verify_loss``'s sequence route):
    ``derivative(log_probs, targets, input_lengths, target_lengths[, upstream])`` is ``S·`` autograd's
    gradient (the VJP with one upstream per item for ``"none"``), ``forward(...)`` the loss; no hvp
    (PyTorch has no double backward of ``ctc_loss``). PyTorch documents ``log_probs`` as a
    ``log_softmax``'s output and its backward returns ``r_b·(e^x - γ_b)``, the gradient through that
    ``log_softmax`` (docs/case-ctc-log-softmax.md): the spec declares that convention
    (``assume_log_softmax=True``). ``assume_log_softmax=False`` (symjac's, not a PyTorch argument)
    asks for the derivative with respect to ``log_probs`` as free inputs, which PyTorch's backward is
    not: ``verify_loss`` then names ``assumes_log_softmax``."""
    spec = Loss("ctc", reduction=reduction, blank=blank, zero_infinity=zero_infinity,
                assume_log_softmax=assume_log_softmax, scale=scale)
    torch = require("torch")
    factor = float(spec.scale)

    def run(lp: Any, tg: Any, il: Any, tl: Any) -> Any:
        return torch.nn.functional.ctc_loss(lp, to_torch(np.asarray(tg)).long(), to_torch(np.asarray(il)).long(),
                             to_torch(np.asarray(tl)).long(), blank=blank, reduction=reduction,
                             zero_infinity=zero_infinity)

    def forward(lp: np.ndarray, tg: Any, il: Any, tl: Any) -> np.ndarray:
        with torch.no_grad():
            return to_numpy(run(to_torch(lp), tg, il, tl))

    def derivative(lp: np.ndarray, tg: Any, il: Any, tl: Any, upstream: Any = None) -> np.ndarray:
        p = to_torch(lp).requires_grad_(True)
        with torch.enable_grad():
            value = run(p, tg, il, tl)
            u = torch.ones_like(value) if upstream is None else to_torch(upstream)
            (g,) = torch.autograd.grad(value, p, u)
        return to_numpy(g * factor)

    return spec, LossImpl(loss=spec, derivative=derivative, forward=forward)


#: ``ctc_loss``'s reproducer: ``label`` is ``(targets, input_lengths, target_lengths)``; no hvp.
_CTC_REPRODUCER = (
    "import torch\n\n"
    "p = torch.tensor(pred, requires_grad=True)\n"
    "value = torch.nn.functional.ctc_loss(p, *(torch.tensor(a).long() for a in label), {args})\n"
    "u = torch.ones_like(value) if upstream is None else torch.tensor(upstream)\n"
    "(g,) = torch.autograd.grad(value, p, u)\n"
    "derivative = g.numpy()\n"
    "hvp = None\n")


def ctc_reproducer(kwargs: Any) -> str:
    """The reproducer snippet of ``ctc_loss(**kwargs)``."""
    return _CTC_REPRODUCER.format(args=", ".join(f"{k}={v!r}" for k, v in kwargs.items() if k != "assume_log_softmax"))


def ctc_draw(rng: np.random.Generator) -> LossConfig:
    """``ctc_loss`` at a seeded :func:`~symjac.frameworks._loss_grid.ctc_case` (issue 32)."""
    return draw(rng, "ctc_loss", "blank")
