"""The loss spec: which loss is meant (kind, reduction, loss scale S, options), validated.

See :mod:`symjac.loss._evaluate` for what is computed from it.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

from symjac._errors import SpecError, did_you_mean
from symjac.loss._fields import DPS, number as _number, weights as _weights
from symjac.loss._kind import REGISTRY, LossKind
from symjac.loss._kinds import softmax_ce

#: The registered kinds (symjac.loss._kinds), in their order.
KINDS = tuple(REGISTRY)
REDUCTIONS = ("mean", "batch_mean", "sum", "none")
#: Other libraries' names of our kinds (each kind's ``synonyms``) and reductions, for "did you mean".
SYNONYMS = {
    **{other: kind.name for kind in REGISTRY.values() for other in kind.synonyms},
    "batchmean": "batch_mean", "average": "mean", "avg": "mean", "total": "sum",
}
LABEL_FORMS = softmax_ce.LABEL_FORMS

_ALL_OPTIONS = ("delta", "pos_weight", "weight", "label_smoothing", "ignore_index", "labels", "log_input", "log_target")
__all__ = ["DPS", "KINDS", "LABEL_FORMS", "REDUCTIONS", "SYNONYMS", "Loss", "check_loss", "kind_of"]


@dataclasses.dataclass(frozen=True, slots=True)
class Loss:
    """A loss, its reduction and the loss scale S; validated on construction.

    Per-element losses, with ``z`` the prediction, ``y`` the label, ``d = z - y``:

    - ``mse``: ``ℓ = d²``.
    - ``mae``: ``ℓ = |d|``; at ``d = 0`` the Clarke set ``[-1, 1]`` is accepted and
      ``0`` (its minimal-norm element, PyTorch's ``sign(0)``) is reported.
    - ``smooth_l1`` (PyTorch ``smooth_l1_loss`` with ``beta = delta``; it *divides*
      by beta): ``ℓ = d²/(2δ)`` if ``|d| < δ`` else ``|d| - δ/2``.
    - ``huber`` (PyTorch ``huber_loss`` with ``delta``; ``huber = δ·smooth_l1``):
      ``ℓ = d²/2`` if ``|d| < δ`` else ``δ(|d| - δ/2)``.
    - ``sigmoid_ce`` (from logits, PyTorch ``binary_cross_entropy_with_logits``):
      ``ℓ = -w[p·y·log σ(z) + (1-y)·log(1-σ(z))]``, ``p`` = ``pos_weight``, ``w`` = ``weight``.
    - ``bce`` (from probabilities ``z`` in (0, 1)): ``ℓ = -w[y·log z + (1-y)·log(1-z)]``.
    - ``softmax_ce`` (logits over the last axis; one element per row):
      ``ℓ = -Σ_c t̃_c·w_c·log softmax(z)_c`` with ``t̃ = (1-ε)·t + ε/C``, ``t`` the
      label row (``labels="probabilities"``) or the one-hot row of a class index
      (``labels="indices"``), ``ε`` = ``label_smoothing``, ``C`` classes (PyTorch
      ``cross_entropy``, both target forms).
    - ``kld``: KL(P‖Q) per element with P the label and Q the prediction:
      ``ℓ = P·(log P - log Q)``, ``dℓ/dQ = -P/Q`` (seed 003 / nntrainer form), with
      ``0·log 0 = 0``. ``log_input=True``: the prediction is ``log Q`` (PyTorch
      ``kl_div``), ``dℓ/d(log Q) = -P``. ``log_target=True``: the label is ``log P``.
    - ``constant_derivative``: ``ℓ = z`` (the label is ignored), so ``dℓ/dz = 1``.

    Reductions (``n`` = number of loss elements: every element of ``pred``, or every
    row of ``pred`` for ``softmax_ce``), with ``L`` the reduced loss:

    - ``"sum"``: ``L = Σ ℓ_i``.
    - ``"mean"``: ``L = Σ ℓ_i / D`` with ``D = n`` (``softmax_ce`` with probability
      labels too: the number of rows, weighted or not, as PyTorch); for
      ``softmax_ce`` with class indices (PyTorch's convention) ``D = Σ w_{y_i}`` over
      the rows not equal to ``ignore_index`` (their count without ``weight``).
    - ``"batch_mean"``: ``L = Σ ℓ_i / B`` with ``B`` the length of the first axis of
      the element array: ``pred.shape[0]`` for element-wise kinds (PyTorch
      ``kl_div(reduction="batchmean")``), ``pred.shape[:-1][0]`` for ``softmax_ce``
      (1 for a single 1-D row).
    - ``"none"``: ``L_i = ℓ_i``; the derivative is the VJP ``Σ_i u_i·dℓ_i/dz`` with a
      per-element upstream gradient ``u``.

    Rows equal to ``ignore_index`` contribute nothing (value and derivative), in
    every reduction.

    The loss scale ``S`` enters only the derivative: the emitted derivative is
    ``S·dL/dpred``.

    Args:
      kind: one of :data:`KINDS`.
      reduction: one of :data:`REDUCTIONS`.
      scale: the loss scale S, a number > 0 (kept exact).
      delta: ``huber``'s delta / ``smooth_l1``'s beta, > 0 (default 1).
      pos_weight: ``sigmoid_ce``: weight of the positive term, one number or one
        per class along the last axis, >= 0.
      weight: ``sigmoid_ce``/``bce``: per-class weight along the last axis;
        ``softmax_ce``: class weights (length C). Numbers >= 0.
      label_smoothing: ``softmax_ce``: ε in [0, 1] (default 0).
      ignore_index: ``softmax_ce`` with ``labels="indices"``: a class index whose
        rows are ignored.
      labels: ``softmax_ce``: ``"probabilities"`` (default; one-hot or soft rows of
        pred's shape) or ``"indices"`` (integer class per row, shape ``pred.shape[:-1]``).
      log_input: ``kld``: the prediction is ``log Q`` (default False).
      log_target: ``kld``: the label is ``log P`` (default False).

    Raises:
      SpecError: a field is invalid or does not apply to ``kind``; the message names
        the field, the value given and what would be valid.
    """

    kind: str
    reduction: str = dataclasses.field(default="mean", kw_only=True)
    scale: Fraction = dataclasses.field(default=Fraction(1), kw_only=True)
    delta: Fraction | None = dataclasses.field(default=None, kw_only=True)
    pos_weight: tuple[Fraction, ...] | None = dataclasses.field(default=None, kw_only=True)
    weight: tuple[Fraction, ...] | None = dataclasses.field(default=None, kw_only=True)
    label_smoothing: Fraction | None = dataclasses.field(default=None, kw_only=True)
    ignore_index: int | None = dataclasses.field(default=None, kw_only=True)
    labels: str | None = dataclasses.field(default=None, kw_only=True)
    log_input: bool | None = dataclasses.field(default=None, kw_only=True)
    log_target: bool | None = dataclasses.field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        put = object.__setattr__
        if self.kind not in KINDS:
            raise SpecError(f"kind={self.kind!r} is not valid{did_you_mean(self.kind, KINDS, SYNONYMS)}: "
                            f"give one of {', '.join(map(repr, KINDS))}")
        if self.reduction not in REDUCTIONS:
            raise SpecError(
                f"reduction={self.reduction!r} is not valid{did_you_mean(self.reduction, REDUCTIONS, SYNONYMS)}: "
                f"give one of {', '.join(map(repr, REDUCTIONS))}"
            )
        scale = _number("scale", self.scale, "a finite number > 0 (the loss scale S)")
        if scale <= 0:
            raise SpecError(f"scale={self.scale!r} is not valid: the loss scale S must be > 0")
        put(self, "scale", scale)
        kind = REGISTRY[self.kind]
        allowed = kind.options
        for name in _ALL_OPTIONS:
            if getattr(self, name) is not None and name not in allowed:
                takes = [k.name for k in REGISTRY.values() if name in k.options]
                raise SpecError(
                    f"{name}={getattr(self, name)!r} does not apply to kind={self.kind!r}: it is an option of "
                    f"{', '.join(map(repr, takes))}; leave it unset"
                )
        if self.pos_weight is not None:
            put(self, "pos_weight", _weights("pos_weight", self.pos_weight))
        if self.weight is not None:
            put(self, "weight", _weights("weight", self.weight))
        kind.validate(self, lambda name, value: put(self, name, value))

    def __repr__(self) -> str:
        parts = [repr(self.kind), f"reduction={self.reduction!r}", f"scale={_fmt(self.scale)}"]
        for name in REGISTRY[self.kind].options:
            value = getattr(self, name)
            if isinstance(value, Fraction):
                parts.append(f"{name}={_fmt(value)}")
            elif isinstance(value, tuple):
                parts.append(f"{name}=({', '.join(_fmt(v) for v in value)}{',' if len(value) == 1 else ''})")
            elif value is not None:
                parts.append(f"{name}={value!r}")
        return f"Loss({', '.join(parts)})"


def _fmt(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"'{value}'"


def check_loss(loss: Any) -> Loss:
    """Return ``loss`` if it is a :class:`Loss`, else raise :class:`SpecError`."""
    if not isinstance(loss, Loss):
        raise SpecError(f"loss={loss!r} is not a loss spec: give symjac.Loss(kind, ...)")
    return loss


def kind_of(loss: Loss) -> LossKind:
    """The definition of ``loss``'s kind (:mod:`symjac.loss._kinds`)."""
    return REGISTRY[loss.kind]
