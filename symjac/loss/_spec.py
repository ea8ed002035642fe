"""The loss spec: which loss is meant (kind, reduction, loss scale S, options), validated.

See :mod:`symjac.loss._evaluate` for what is computed from it.
"""

from __future__ import annotations

import dataclasses
import functools
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

_ALL_OPTIONS = ("delta", "pos_weight", "weight", "label_smoothing", "ignore_index", "labels", "log_input", "log_target",
                "full", "eps", "margin", "p", "blank", "zero_infinity", "assume_log_softmax",
                "swap")
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
    - ``nll`` (PyTorch ``nll_loss``, ONNX ``NegativeLogLikelihoodLoss``; one element per
      row): pred holds log-probabilities along its last axis, the label one class index
      per row, ``ℓ = -w_y·z_y``; ``weight`` and ``ignore_index`` as ``softmax_ce`` with
      class indices, and so is ``"mean"``'s ``D = Σ w_{y_i}``.
    - ``poisson_nll`` (PyTorch ``poisson_nll_loss``): ``ℓ = e^z - y·z`` (``log_input``,
      the default) or ``z - y·log(z + ε)`` (``log_input=False``, z > -ε), ε = ``eps``
      (default 1e-8); ``full=True`` adds the Stirling term ``y·log y - y + ½·log(2πy)``
      where ``y > 1`` (0 elsewhere), which does not depend on z.
    - ``gaussian_nll`` (PyTorch ``gaussian_nll_loss``; one element per pair): pred's last
      axis holds 2 entries, the mean ``μ`` and the variance ``v >= 0``, so the derivative
      is taken with respect to both; the label has pred's shape, the target ``y`` first and
      0 second. ``ℓ = ½·(log max(v, ε) + (μ - y)²/max(v, ε))`` (+ ``½·log 2π`` with
      ``full=True``), ε = ``eps`` (default 1e-6): below ε the loss does not depend on v
      (its derivative there is 0; at ``v = ε`` the Clarke set). A variance shared across
      entries (PyTorch's ``var`` of shape ``(N, 1)``) is the same v in each pair; its
      derivative is the sum of the pairs'.
    - The margin family (PyTorch's definitions; ``[a]₊ = max(0, a)``, whose Clarke set at
      ``a = 0`` is the hull of both sides, ``[0, 1]·da``, and is accepted there):
      ``hinge_embedding`` (labels ±1, ``margin`` m): ``ℓ = z`` at ``y = 1``,
      ``[m - z]₊`` at ``y = -1``; ``soft_margin`` (labels ±1): ``ℓ = log(1 + e^{-y·z})``;
      ``multilabel_soft_margin`` (one element per row, labels in [0, 1], ``weight`` w):
      ``ℓ = (1/C)·Σ_c w_c·(y_c·log(1 + e^{-z_c}) + (1 - y_c)·log(1 + e^{z_c}))``;
      ``multi_margin`` (one class index y per row, ``p`` in {1, 2}, ``margin`` m,
      ``weight`` w): ``ℓ = (w_y/C)·Σ_{i≠y} [m - z_y + z_i]₊^p``; ``multilabel_margin``
      (per row the target classes J, PyTorch's integer rows ended by the first -1):
      ``ℓ = (1/C)·Σ_{j∈J} Σ_{i∉J} [1 - z_j + z_i]₊``; ``margin_ranking`` (one element per
      pair: pred's last axis holds 2 entries, x1 and x2, so both derivatives are pred's; the
      label has pred's shape, y in {-1, 1} first and 0 second; ``margin`` m, default 0):
      ``ℓ = [-y·(x1 - x2) + m]₊``; ``cosine_embedding`` (one element per row of 2·D entries,
      ``pred[..., :D]`` = x1 and ``pred[..., D:]`` = x2; the label has pred's shape, y in
      {-1, 1} first and 0 elsewhere; ``margin`` m, default 0):
      ``cos = Σx1·x2 / sqrt((Σx1² + ε)(Σx2² + ε))`` with PyTorch's ε (float32's 1e-12,
      9.999999960041972e-13, part of the definition: a zero vector has cos = 0 and a finite
      derivative), ``ℓ = 1 - cos`` at ``y = 1``, ``[cos - m]₊`` at ``y = -1``;
      ``triplet_margin`` (PyTorch ``triplet_margin_loss``, no label; one element per row of ``3·D`` entries along the last
      axis, ``[a | q | n]``: the anchor ``pred[..., :D]``, the positive ``pred[..., D:2D]``, the
      negative ``pred[..., 2D:]``; ``margin`` m > 0, ``p`` in {1, 2} (default 2), ``eps`` ε
      (default 1e-6), ``swap``): ``ℓ = [d(a, q) - d(a, n) + m]₊`` with ``d(x, y) = ‖x - y + ε‖_p``,
      ``d(a, n)`` replaced by ``min(d(a, n), d(q, n))`` with ``swap=True``. See
      :mod:`symjac.loss._kinds.triplet_margin`.
    - ``ctc`` (PyTorch ``ctc_loss``): pred is log_probs ``(T, N, C)``, the label
      ``(targets, input_lengths, target_lengths)``; one loss element per batch item,
      ``ℓ_b = -log Σ_{alignments π of l_b} Π_{t<T_b} e^{x_{t,b,π_t}}`` (a blank between repeated
      labels), ``dℓ_b/dx_{t,b,c} = -γ_b(t, c)`` (the posterior occupancy); an impossible
      alignment's ``ℓ_b = +inf`` (0 with ``zero_infinity``). ``"mean"`` divides each ``ℓ_b`` by
      ``max(L_b, 1)``, then averages over the batch; ``"batch_mean"`` does not apply.
      ``log_input=False``: pred is logits and ``x = log_softmax(pred)`` (optax, TensorFlow).
      See :mod:`symjac.loss._kinds.ctc`.

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
        ``softmax_ce``, ``nll``: class weights (length C). Numbers >= 0.
      label_smoothing: ``softmax_ce``: ε in [0, 1] (default 0).
      ignore_index: ``softmax_ce`` with ``labels="indices"``, ``nll``: a class index
        whose rows are ignored.
      labels: ``softmax_ce``: ``"probabilities"`` (default; one-hot or soft rows of
        pred's shape) or ``"indices"`` (integer class per row, shape ``pred.shape[:-1]``).
      log_input: ``kld``: the prediction is ``log Q`` (default False); ``poisson_nll``: the
        prediction is the log-rate (default True); ``ctc``: the prediction is log-probabilities
        (default True), or logits the loss passes through ``log_softmax`` (False).
      log_target: ``kld``: the label is ``log P`` (default False).
      full: ``poisson_nll``: add the Stirling term; ``gaussian_nll``: add ``½·log 2π``
        (default False).
      eps: ``poisson_nll``'s ε inside the log (default 1e-8), ``gaussian_nll``'s clamp of
        the variance (default 1e-6), ``triplet_margin``'s ε added to each difference
        (default 1e-6); a number >= 0 (> 0 for gaussian_nll), kept exact.
      margin: ``hinge_embedding``, ``multi_margin``: the margin (a number, default 1);
        ``margin_ranking``, ``cosine_embedding``: the margin (a number, default 0);
        ``triplet_margin``: a number > 0 (default 1).
      p: ``multi_margin``: the hinge's power, 1 or 2 (default 1); ``triplet_margin``: the
        distance's norm, 1 or 2 (default 2).
      blank: ``ctc``: the blank class index (default 0).
      zero_infinity: ``ctc``: an impossible alignment's infinite loss and its derivative are 0
        (default False).
      assume_log_softmax: ``ctc``: the derivative is declared to be taken through a
        ``log_softmax`` the input is assumed to have passed through (PyTorch ``ctc_loss``'s
        convention: ``r_b·(e^x - γ_b)``), not with respect to the log-probabilities as given
        (default False: ``-r_b·γ_b``).
      swap: ``triplet_margin``: the distance swap, ``min(d(a, n), d(q, n))`` (default False).

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
    full: bool | None = dataclasses.field(default=None, kw_only=True)
    eps: Fraction | None = dataclasses.field(default=None, kw_only=True)
    margin: Fraction | None = dataclasses.field(default=None, kw_only=True)
    p: int | None = dataclasses.field(default=None, kw_only=True)
    blank: int | None = dataclasses.field(default=None, kw_only=True)
    zero_infinity: bool | None = dataclasses.field(default=None, kw_only=True)
    assume_log_softmax: bool | None = dataclasses.field(default=None, kw_only=True)
    swap: bool | None = dataclasses.field(default=None, kw_only=True)

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

    def at_default(self, name: str) -> bool:
        """Does option ``name`` hold its kind's default (what ``Loss(kind)`` holds, None where it
        has none)? What the native wire and the golden ``operator`` object leave out; ``kind``,
        ``reduction`` and ``scale`` are no options: never."""
        return name in _ALL_OPTIONS and getattr(self, name) == getattr(_bare(self.kind), name)

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


@functools.cache
def _bare(kind: str) -> Loss:
    """``Loss(kind)``: every option at its default."""
    return Loss(kind)


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
