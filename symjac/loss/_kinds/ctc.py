"""ctc: connectionist temporal classification from log-probabilities (PyTorch ``ctc_loss``).

The loss is not one expression per element: per batch item ``b`` it sums the
probabilities of every alignment of the target with the input frames,

.. math:: \\ell_b = -\\log \\sum_{\\pi \\in \\mathcal{B}^{-1}(l_b)} \\prod_{t < T_b} e^{x_{t,b,\\pi_t}},

``x`` the log-probabilities ``(T, N, C)``, ``T_b`` the item's input length, ``l_b`` its
target (its first ``L_b`` labels), ``B`` the map that removes repeats and then blanks (so a
repeated label needs a blank between its copies). The derivative with respect to ``x``
*as a free input* is ``dℓ_b/dx_{t,b,c} = -γ_b(t, c)``, the posterior occupancy of class
``c`` at frame ``t`` (0 for ``t >= T_b``), by the forward-backward (alpha-beta) recursion
(Graves et al. 2006). The kind is evaluated whole (:attr:`LossKind.whole`):
:meth:`Ctc.evaluate_whole` gives a :class:`CtcEvaluation`, which the sequence route of
``verify_loss`` (:mod:`symjac.verifiers.loss._sequence`) reads.

*Exact values.* The recursion runs in probability space in MPFR (200 bits) on ``e^x``:
every operation is a sum or product of positive numbers or a quotient of them, so no
step cancels and the computed values are within a relative ``4·T·(S'+2)·2^-199`` of the
exact ones (a proven radius, ``S' = 2L_b + 1``), far below the 60 digits promised; the
loss is ``-log P`` of that ``P`` (absolute error below the same radius).

*Rounding bound of a correct implementation* (the model of :mod:`symjac.loss._bounds`:
a running error ``R`` charged at ``u``, plus a mixed-stable part ``γ_k·(|v| + cond)``).
A log-space implementation forms ``log α_t(s) = x_t + m + log Σ_j e^{a_j - m}`` per
state and frame; each such step rounds values of magnitude at most ``|log α_t(s)|``,
the shift ``m`` (at most ``max_s |log α_{t-1}(s)|``), ``|x_t|`` and a log of a sum in
[1, 3] (absolute), and the log-sum-exp is a convex combination of its inputs, so
carried errors add and never grow. With ``M_t = max_s |log α_t(s)|`` over the reachable
states and ``X_t = max_c |x_{t,c}|`` over the item's classes::

    R_b = Σ_{t<T_b} (2·M_t + X_t + 6) + |ℓ_b| + 6,   cond_b = Σ_{t,c} γ_b(t,c)·|x_{t,c}|
    e_b = u·(1 + γ)·R_b + γ_{k_ℓ}·(|ℓ_b| + cond_b),  k_ℓ = 9·(T_b + 1)

(9 roundings a step on any input-to-result path: the shift, exp (2, libm within 1 ulp),
the sum of up to 3 (2), log (2), adding m and x). A probability-space implementation
rescaled per frame pays ``u·|log c_t| + γ_4`` a frame, within ``R_b``. The derivative
``-Σ_{s: l'_s = c} e^{log α_t(s) + log β_t(s) - x_{t,c} + ℓ_b}`` exponentiates a sum whose
absolute error is at most the running errors of α (``R_b``), β (``R^β_b``, as ``R_b``
over β), ℓ and the additions, so its relative error is at most
``ρ_b = u·(1 + γ)·(2·R_b + R^β_b + 4·G_b + 4)``, ``G_b`` the largest of ``|log α|``,
``|log β|``, ``X_t`` and ``|ℓ_b|`` summed; inputs perturbed by ``γ_{k_h}`` change
``γ_b(t, c)`` by at most a relative ``2·Σ_t X_t`` (numerator and normaliser), so::

    B(t, b, c) = |S·r_b|·γ_b(t,c)·(ρ_b + γ_{k_h}·(1 + 2·Σ_t X_t))
                 + |S·r_b|·γ_3·e^{x_{t,b,c}}  (assume_log_softmax only)  +  k_h·η·max(1, |S·r_b|)

with ``k_h = k_ℓ + 2·S'_b + 6``. As :mod:`symjac.loss._bounds` says of its own: a model
of a correct implementation, not a theorem about every algorithm.

*The log_softmax convention.* PyTorch's ``ctc_loss`` backward returns
``r_b·(e^{x_{t,b,c}} - γ_b(t, c))`` for ``t < T_b``: the derivative with respect to the
logits of a ``log_softmax`` it assumes ``x`` came from (where ``Σ_c e^x = 1`` that is the
true derivative's image under log_softmax's VJP, whose kernel holds ``e^x``). Against
``x`` as a free input it is wrong by ``r_b·e^x``: the finding ``assumes_log_softmax``.
``Loss("ctc", assume_log_softmax=True)`` declares that convention: the expected
derivative is then PyTorch's.

*Logits* (``log_input=False``: optax's ``ctc_loss``, TensorFlow's ``tf.nn.ctc_loss``, which apply a
``log_softmax`` themselves). ``pred`` is then the logits ``z`` and the loss ``ℓ_b(log_softmax(z))``,
whose derivative is ``d/dz_{t,c} = Σ_k (-γ_b(t,k))·(δ_{kc} - p_{t,c}) = p_{t,c} - γ_b(t,c)`` (``t < T_b``,
``Σ_k γ_b(t,k) = 1``), ``p = softmax(z)``: the expected derivative is ``S·r_b·(p - γ_b)``. The recursion
runs on ``p`` (MPFR, relative error a few ``2^-200``: within the radius above), the bound's ``x`` is
``log p``. A correct implementation first rounds ``log_softmax``: ``z - m`` (``|·| <= 2·Z_t``, ``Z_t =
max_c |z_{t,c}|``), ``C`` exponentials summed, a log, a subtraction (``|·| <= X_t``), so each
log-probability it feeds the recursion is off by at most ``u·(1 + γ)·L_t``, ``L_t = 2·Z_t + X_t + 2·C + 4``
(absolute), and its ``p̂ = e^{x̂}`` by a relative ``γ_3 + u·(1 + γ)·L_t``. The recursion's steps add the
errors of their inputs and never grow them (convex combinations), so ``Σ_{t<T_b} L_t`` joins ``R_b``
and ``R^β_b``. The derivative through the loss's own log_softmax is formed as autodiff forms it
(log_softmax's VJP), ``p̂·Σ_c ĝ_c - ĝ`` with ``ĝ_c`` the computed ``γ_b(t, c)``: each within
``γ_b(t, c)·rel_b`` (``rel_b = ρ_b + γ_{k_h}·(1 + 2·Σ_t X_t)``, the occupancy's relative bound in
``B`` above), so the sum is 1 within ``rel_b + γ_C``, and the ``p`` term of the bound is
``|S·r_b|·(γ_3 + u·(1 + γ)·L_t + rel_b + γ_C)·p`` (under ``assume_log_softmax`` PyTorch's
``e^x - γ`` is formed directly: ``|S·r_b|·γ_3·e^x``). No exact
log-probabilities stand in for the logits: ``Σ_c e^{x_c} = 1`` holds at no finite binary floats with
C >= 2, so ``assume_log_softmax`` at the logits would compare with another function (with
``log_input=False`` it is refused).

*Impossible alignments.* ``T_b < L_b + (repeats in l_b)``: no alignment, ``ℓ_b = +inf``
(a constant: no derivative); with ``zero_infinity`` the item's loss and derivative are 0.
Without it, the item's derivative entries take NaN or 0 (PyTorch: NaN), the other items'
are checked as the derivative of the finite part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import gmpy2
import numpy as np

from symjac._errors import InputError, SpecError
from symjac._exact import read_exact
from symjac.check._rounding import finfo, gamma_mp, unit_roundoff_mp
from symjac.loss import _numbers
from symjac.loss._fields import is_int
from symjac.loss._kind import LossKind, Put, Template, register
from symjac.loss._kinds._ctc_inputs import read_label, read_log_probs

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

#: The reductions PyTorch's ``ctc_loss`` takes.
CTC_REDUCTIONS = ("mean", "sum", "none")


@register
class Ctc(LossKind):
    """``ℓ_b = -log Σ_{alignments} Π_t e^{x_{t,b,π_t}}`` over the batch, ``x`` the log-probabilities or
    ``log_softmax`` of logits (``log_input=False``; see the module docstring)."""

    name = "ctc"
    options = ("blank", "zero_infinity", "assume_log_softmax", "log_input")
    synonyms = ("ctc_loss", "connectionist_temporal_classification", "ctcloss")
    class_axis = True
    whole = True
    samples = ({}, {"zero_infinity": True}, {"blank": 2, "assume_log_softmax": True}, {"log_input": False})

    def validate(self, loss: Loss, put: Put) -> None:
        if loss.reduction not in CTC_REDUCTIONS:
            raise SpecError(f"reduction={loss.reduction!r} is not valid for kind='ctc': give one of "
                            f"{', '.join(map(repr, CTC_REDUCTIONS))} (PyTorch ctc_loss's; 'mean' divides each "
                            "item's loss by its target length, then averages over the batch)")
        blank = 0 if loss.blank is None else loss.blank
        if not is_int(blank) or blank < 0:
            raise SpecError(f"blank={loss.blank!r} is not valid: give a class index >= 0 (default 0)")
        put("blank", int(blank))
        for name, default in (("zero_infinity", False), ("assume_log_softmax", False), ("log_input", True)):
            value = getattr(loss, name)
            if value is not None and not isinstance(value, (bool, np.bool_)):
                raise SpecError(f"{name}={value!r} is not valid: give True or False")
            put(name, default if value is None else bool(value))
        if loss.assume_log_softmax and loss.log_input is False:
            raise SpecError("assume_log_softmax=True with log_input=False is not valid: logits (log_input=False) "
                            "pass through the loss's own log_softmax, whose derivative softmax - γ is the true "
                            "one; assume_log_softmax declares that convention for log-probability inputs")

    def element_shape(self, pred_shape: tuple[int, ...]) -> tuple[int, ...]:
        """One loss element per batch item: ``(N,)`` of log_probs ``(T, N, C)``."""
        return (int(pred_shape[1]),) if len(pred_shape) == 3 else (1,)

    def template(self, loss: Loss, classes: int) -> Template:
        raise SpecError("kind='ctc' has no element template (its loss sums over alignments of a whole sequence): "
                        "symjac.loss_value, symjac.loss_derivative and symjac.verify_loss take it; the template "
                        "stages (loss_hessian, explain, expressions, golden data, spec files, check_loss_family) "
                        "do not")

    def evaluate_whole(self, loss: Loss, pred: Any, label: Any, upstream: Any = None) -> CtcEvaluation:
        """The exact evaluation at ``pred`` (log_probs ``(T, N, C)``) and ``label``
        ``(targets, input_lengths, target_lengths)``; ``upstream``: ``"none"``'s per-item gradient."""
        return evaluate(loss, pred, label, upstream)

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, Any]:
        """T = 6 frames, N = 4 items, C = 4 classes (blank = the spec's): item 0 a target with a
        repeated label (a blank must separate its copies), item 1 without, item 2 shorter than
        T (its last frames padding), item 3 an impossible alignment (3 frames, a target
        needing 4) where its infinite loss leaves the reduced loss finite (``zero_infinity``
        or ``"none"``), else 4 frames. Log-probabilities are short dyadic fractions in
        [-3, -1/8], not normalised (so the log_softmax convention shows)."""
        blank = loss.blank if loss.blank is not None else 0
        classes = max(4, blank + 1)
        others = [c for c in range(classes) if c != blank][:3]
        a, b, c = others
        targets = np.array([[a, a, b], [b, c, a], [c, b, 0], [a, a, c]], dtype=np.int64)
        targets[2, 2] = a  # padding beyond the target length: any class
        impossible = bool(loss.zero_infinity) or loss.reduction == "none"
        input_lengths = np.array([6, 6, 4, 3 if impossible else 5], dtype=np.int64)
        target_lengths = np.array([3, 3, 2, 3], dtype=np.int64)
        t, n = 6, 4
        grid = np.arange(t * n * classes, dtype=np.float64).reshape(t, n, classes)
        pred = -((grid * 7 + 3) % 23 + 1) / 8  # in [-3, -1/8], eighths: exact in float16
        return pred, (targets, input_lengths, target_lengths)


@dataclasses.dataclass(frozen=True, eq=False)
class CtcEvaluation:
    """The exact CTC loss and derivative at one input, with what the rounding bounds need.

    MPFR numbers in ``object`` arrays. ``probs`` is ``e^x`` (``softmax(z)`` of logits,
    ``log_input=False``) ``(T, N, C)``; ``softmax_run`` per frame and item ``(T, N)`` the running error
    of a log_softmax of logits, ``L_t`` (0 for log-probabilities). ``occupancy`` is ``γ_b(t, c)`` ``(T, N, C)``, 0 at
    ``t >= T_b`` and at impossible items; ``elements`` ``ℓ_b`` (+inf at an impossible item,
    0 there with ``zero_infinity``); ``factor`` ``r_b`` (Fractions); per item ``R_b``,
    ``cond_b``, ``ρ_b`` (in units of u: times u below), ``Σ_t X_t`` and ``k_ℓ``, ``k_h``.
    """

    loss: Loss
    pred: np.ndarray
    targets: tuple[tuple[int, ...], ...]
    input_lengths: tuple[int, ...]
    target_lengths: tuple[int, ...]
    feasible: np.ndarray
    elements: np.ndarray
    occupancy: np.ndarray
    probs: np.ndarray
    softmax_run: np.ndarray
    factor: tuple[Fraction, ...]
    items: tuple[dict[str, Any], ...]
    run: tuple[Any, ...]
    cond: tuple[Any, ...]
    rho: tuple[Any, ...]
    spread: tuple[Any, ...]
    k_loss: tuple[int, ...]
    k_deriv: tuple[int, ...]

    @property
    def batch(self) -> int:
        return int(self.pred.shape[1])

    def at(self, pred: np.ndarray) -> CtcEvaluation:
        """The evaluation at other log-probabilities of the same shape (float64), the items whose
        columns are unchanged reused (a finite-difference point changes one item)."""
        x = read_log_probs(pred)
        changed = np.any(x != self.pred, axis=(0, 2))
        blank = int(self.loss.blank if self.loss.blank is not None else 0)
        with _numbers.context():
            lx, y, lsm = _normalised(self.loss, x)
            items = tuple(_item(lx[:, b, :], y[:, b, :], self.targets[b], self.input_lengths[b], blank, lsm[:, b])
                          if changed[b] else self.items[b] for b in range(self.batch))
        return build(self.loss, x, self.targets, self.input_lengths, self.target_lengths, self.factor, items,
                     (y, lsm))

    def with_upstream(self, upstream: Any) -> CtcEvaluation:
        """The evaluation with another ``"none"`` upstream gradient (None: ones)."""
        return dataclasses.replace(self, factor=_factors(self.loss, upstream, self.target_lengths))

    def infinite(self) -> np.ndarray:
        """Per item: its loss is +inf (impossible, without zero_infinity)."""
        return np.asarray(~self.feasible & (not self.loss.zero_infinity), dtype=bool)

    def value(self) -> Any:
        """``L`` (MPFR; +inf when an impossible item counts) or, for ``"none"``, ``ℓ_b`` per item."""
        if self.loss.reduction == "none":
            return self.elements.copy()
        with _numbers.context():
            weights = self.weights()
            return _numbers.total(_numbers.number(w) * e for w, e in zip(weights, self.elements))

    def weights(self) -> tuple[Fraction, ...]:
        """Each item's weight in the reduced loss: 1 (sum) or ``1/(N·max(L_b, 1))`` (mean)."""
        if self.loss.reduction == "mean":
            return tuple(Fraction(1, self.batch * max(n, 1)) for n in self.target_lengths)
        return tuple(Fraction(1) for _ in self.target_lengths)

    def derivative(self, scale: Fraction | None = None, log_softmax: bool | None = None) -> np.ndarray:
        """``S·r_b·dℓ_b/dx`` (with the spec's convention unless ``log_softmax`` is given); NaN at an
        impossible item without zero_infinity (no derivative: the loss is +inf around it)."""
        s = self.loss.scale if scale is None else scale
        through = self.through if log_softmax is None else log_softmax
        with _numbers.context():
            out = np.empty(self.occupancy.shape, dtype=object)
            for b in range(self.batch):
                sr = _numbers.number(s * self.factor[b])
                h = -self.occupancy[:, b, :]
                if through and self.feasible[b]:
                    h = h + self.frames(b) * self.probs[:, b, :]
                out[:, b, :] = sr * h
                if self.infinite()[b]:
                    out[:, b, :] = gmpy2.nan()
            return out

    @property
    def through(self) -> bool:
        """The expected derivative is through a log_softmax: declared (``assume_log_softmax``) or applied
        by the loss to logits (``log_input=False``): ``S·r_b·(p - γ_b)``, p the probabilities."""
        return bool(self.loss.assume_log_softmax) or self.loss.log_input is False

    def frames(self, b: int) -> np.ndarray:
        """``[t < T_b]`` as a ``(T, 1)`` 0/1 column."""
        return (np.arange(self.pred.shape[0]) < self.input_lengths[b]).astype(int)[:, None]

    def derivative_bound(self, dt: np.dtype[Any], scale: Fraction | None = None,
                         log_softmax: bool | None = None) -> np.ndarray:
        """``B(t, b, c)`` in ``dt`` (the module docstring), MPFR, pred's shape (the spec's scale and
        convention unless given)."""
        s = self.loss.scale if scale is None else scale
        through = self.through if log_softmax is None else log_softmax
        with _numbers.context():
            u = unit_roundoff_mp(dt)
            eta = _numbers.number(float(finfo(dt).smallest_subnormal))
            out = np.empty(self.occupancy.shape, dtype=object)
            for b in range(self.batch):
                sr = abs(_numbers.number(s * self.factor[b]))
                k = self.k_deriv[b]
                g = gamma_mp(k, u)
                rel = u * (1 + g) * self.rho[b] + g * (1 + 2 * self.spread[b])
                bound = sr * self.occupancy[:, b, :] * rel + k * eta * max(_numbers.number(1), sr)
                if through:
                    rel_p = gamma_mp(3, u)
                    if self.loss.log_input is False:  # logits: log_softmax's rounding, and p·Σ_c ĝ_c (docstring)
                        rel_p = (rel_p + u * (1 + g) * self.softmax_run[:, b][:, None] + rel
                                 + gamma_mp(self.pred.shape[-1], u))
                    bound = bound + sr * rel_p * self.frames(b) * self.probs[:, b, :]
                out[:, b, :] = bound
            return out

    def element_bounds(self, dt: np.dtype[Any]) -> list[Any]:
        """``e_b`` per item in ``dt`` (0 at an item whose exact loss is +inf or a zeroed 0)."""
        with _numbers.context():
            u = unit_roundoff_mp(dt)
            eta = _numbers.number(float(finfo(dt).smallest_subnormal))
            out = []
            for b in range(self.batch):
                if not self.feasible[b]:
                    out.append(_numbers.number(0))
                    continue
                g = gamma_mp(self.k_loss[b], u)
                out.append(u * (1 + g) * self.run[b] + g * (abs(self.elements[b]) + self.cond[b])
                           + self.k_loss[b] * eta)
            return out

    def value_bound(self, dt: np.dtype[Any]) -> Any:
        """The bound on a reduced ``L̂``: the weighted element bounds, the recursive sum of N terms
        and the divisions (``γ_{N+2}·Σ w_b·|ℓ_b|``) and underflow; for ``"none"`` per item ``e_b``."""
        e = self.element_bounds(dt)
        if self.loss.reduction == "none":
            return e
        with _numbers.context():
            u = unit_roundoff_mp(dt)
            finite = [(w, el, eb) for w, el, eb, f in zip(self.weights(), self.elements, e, self.feasible) if f]
            err = _numbers.total(_numbers.number(w) * eb for w, _, eb in finite)
            size = _numbers.total(_numbers.number(w) * abs(el) for w, el, _ in finite)
            eta = _numbers.number(float(finfo(dt).smallest_subnormal))
            return err + gamma_mp(self.batch + 2, u) * size + (self.batch + 2) * eta


def _exp(x: np.ndarray) -> np.ndarray:
    """``e^x`` of an array of floats, in MPFR."""
    return np.asarray(_numbers.FUNCTIONS["exp"](_numbers.from_floats(np.asarray(x, dtype=np.float64))), dtype=object)


# -------------------------------------------------------------------- the exact recursion


def evaluate(loss: Loss, pred: Any, label: Any, upstream: Any = None) -> CtcEvaluation:
    """See :meth:`Ctc.evaluate_whole`."""
    x = read_log_probs(pred)
    frames, batch, classes = x.shape
    blank = int(loss.blank if loss.blank is not None else 0)
    if blank >= classes:
        raise SpecError(f"blank={blank} is not a class of log_probs with C = {classes} classes")
    rows, inputs, lengths = read_label(label, batch, frames, classes, blank)
    factor = _factors(loss, upstream, lengths)
    with _numbers.context():
        lx, y, lsm = _normalised(loss, x)
        items = tuple(_item(lx[:, b, :], y[:, b, :], rows[b], inputs[b], blank, lsm[:, b]) for b in range(batch))
    return build(loss, x, rows, inputs, lengths, factor, items, (y, lsm))


def _normalised(loss: Loss, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(log-probabilities, probabilities, L)`` in MPFR: ``x``, ``e^x`` and 0 for log-probabilities;
    ``log_softmax(z)``, ``softmax(z)`` and the log_softmax's running error per frame
    ``L_t = 2·Z_t + X_t + 2·C + 4`` for logits ``z`` (``log_input=False``; module docstring)."""
    y = _exp(x)
    if loss.log_input is not False:
        return x, y, _numbers.zeros(x.shape[:2])
    p = y / y.sum(axis=-1, keepdims=True)
    lx = np.frompyfunc(gmpy2.log, 1, 1)(p)
    classes = x.shape[-1]
    lsm = np.empty(x.shape[:2], dtype=object)
    for t, b in np.ndindex(*x.shape[:2]):
        lsm[t, b] = (2 * gmpy2.mpfr(float(np.abs(x[t, b]).max())) + max(abs(v) for v in lx[t, b])
                     + 2 * classes + 4)
    return lx, p, lsm


def build(loss: Loss, x: np.ndarray, rows: tuple[tuple[int, ...], ...], inputs: tuple[int, ...],
          lengths: tuple[int, ...], factor: tuple[Fraction, ...], items: tuple[dict[str, Any], ...],
          probs: tuple[np.ndarray, np.ndarray]) -> CtcEvaluation:
    """The evaluation from its items' exact values (:func:`_item`) and ``(probabilities, L)`` (:func:`_normalised`)."""
    batch = x.shape[1]
    with _numbers.context():
        occupancy = _numbers.zeros(x.shape)
        for b, item in enumerate(items):
            if item["feasible"]:
                occupancy[:, b, :] = item["occupancy"]
        zi = bool(loss.zero_infinity)
        elements = np.array([it["loss"] if it["feasible"] else _numbers.number(0) if zi else gmpy2.inf()
                             for it in items], dtype=object)
    return CtcEvaluation(
        loss=loss, pred=x, targets=rows, input_lengths=inputs, target_lengths=lengths,
        feasible=np.array([it["feasible"] for it in items], dtype=bool), elements=elements, occupancy=occupancy,
        probs=probs[0], softmax_run=probs[1],
        factor=factor, items=items, run=tuple(it["run"] for it in items), cond=tuple(it["cond"] for it in items),
        rho=tuple(it["rho"] for it in items), spread=tuple(it["spread"] for it in items),
        k_loss=tuple(9 * (inputs[b] + 1) for b in range(batch)),
        k_deriv=tuple(9 * (inputs[b] + 1) + 2 * (2 * lengths[b] + 1) + 6 for b in range(batch)))


def _factors(loss: Loss, upstream: Any, lengths: tuple[int, ...]) -> tuple[Fraction, ...]:
    """``r_b``: the upstream gradient (``"none"``), 1 (sum) or ``1/(N·max(L_b, 1))`` (mean)."""
    batch = len(lengths)
    if loss.reduction == "none":
        if upstream is None:
            return tuple(Fraction(1) for _ in lengths)
        u = read_exact(upstream, "upstream")
        if u.shape != (batch,):
            raise InputError(f"upstream has shape {u.shape}; reduction='none' needs one upstream gradient per "
                             f"batch item, shape ({batch},)")
        return tuple(u.to_fractions())
    if upstream is not None:
        raise InputError(f"upstream is given but reduction={loss.reduction!r}: a reduced loss takes the loss "
                         "scale S, no upstream gradient")
    if loss.reduction == "mean":
        return tuple(Fraction(1, batch * max(n, 1)) for n in lengths)
    return tuple(Fraction(1) for _ in lengths)


def extended(target: Sequence[int], blank: int) -> list[int]:
    """``l'``: the target with a blank before, between and after its labels."""
    out = [blank]
    for c in target:
        out += [c, blank]
    return out


def feasible(target: Sequence[int], frames: int) -> bool:
    """Some alignment exists: ``T_b >= L_b + (adjacent repeats)`` (a blank between each repeat)."""
    repeats = sum(1 for a, b in zip(target, target[1:]) if a == b)
    return frames >= len(target) + repeats


def _item(x: np.ndarray, y: np.ndarray, target: Sequence[int], frames: int, blank: int,
          lsm: np.ndarray) -> dict[str, Any]:
    """One item's exact loss, occupancy and bound terms (in an MPFR context): ``x`` the log-probabilities
    (floats or MPFR), ``y`` their exponentials, ``lsm`` a log_softmax's running error per frame."""
    if not feasible(target, frames):
        return {"feasible": False, "loss": None, "occupancy": None, "run": 0, "cond": 0, "rho": 0, "spread": 0}
    ext = extended(target, blank)
    alpha = _sweep(y, ext, frames, forward=True)
    beta = _sweep(y, ext, frames, forward=False)
    total = alpha[frames - 1][-1] + (alpha[frames - 1][-2] if len(ext) > 1 else 0) if frames else gmpy2.mpfr(1)
    loss = -gmpy2.log(total)
    occupancy = _numbers.zeros(y.shape)
    for t in range(frames):
        for s, c in enumerate(ext):
            if alpha[t][s] and beta[t][s]:
                occupancy[t, c] += alpha[t][s] * beta[t][s] / (y[t, c] * total)
    labels = sorted(set(ext))
    spread = [max(abs(gmpy2.mpfr(x[t, c])) for c in labels) for t in range(frames)]
    mags_a = [max((abs(gmpy2.log(v)) for v in alpha[t] if v), default=gmpy2.mpfr(0)) for t in range(frames)]
    mags_b = [max((abs(gmpy2.log(v)) for v in beta[t] if v), default=gmpy2.mpfr(0)) for t in range(frames)]
    extra = sum((lsm[t] for t in range(frames)), gmpy2.mpfr(0))  # a log_softmax of logits before the recursion
    run = sum((2 * m + xs + 6 for m, xs in zip(mags_a, spread)), gmpy2.mpfr(0)) + abs(loss) + 6 + extra
    run_beta = sum((2 * m + xs + 6 for m, xs in zip(mags_b, spread)), gmpy2.mpfr(0)) + extra
    largest = max(mags_a, default=0) + max(mags_b, default=0) + max(spread, default=0) + abs(loss)
    cond = _numbers.total(occupancy[t, c] * abs(gmpy2.mpfr(x[t, c]))
                          for t in range(frames) for c in labels)
    return {"feasible": True, "loss": loss, "occupancy": occupancy, "run": run, "cond": cond,
            "rho": 2 * run + run_beta + 4 * largest + 4, "spread": gmpy2.mpfr(sum(spread))}


def _sweep(y: np.ndarray, ext: list[int], frames: int, forward: bool) -> list[list[Any]]:
    """α (``forward``) or β over frames ``t < T_b`` in probability space, each including ``y_t``."""
    n = len(ext)
    table = [[gmpy2.mpfr(0)] * n for _ in range(frames)]
    order = range(frames) if forward else range(frames - 1, -1, -1)
    for step, t in enumerate(order):
        for s in range(n):
            if step == 0:
                edge = s < 2 if forward else s >= n - 2
                table[t][s] = y[t, ext[s]] if edge else gmpy2.mpfr(0)
                continue
            prev = table[t - 1] if forward else table[t + 1]
            d = -1 if forward else 1
            acc = prev[s]
            if 0 <= s + d < n:
                acc = acc + prev[s + d]
            if 0 <= s + 2 * d < n and ext[s] != ext[s + 2 * d]:  # skip a blank between distinct labels
                acc = acc + prev[s + 2 * d]
            table[t][s] = acc * y[t, ext[s]] if acc else gmpy2.mpfr(0)
    return table
