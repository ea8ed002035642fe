"""Losses: a validated spec, exact SymPy expressions and derivatives, mpmath values.

A :class:`Loss` says *which* loss is meant (kind, reduction, loss scale S, options).
For every kind SymPy builds the per-element loss ``ℓ`` once (per number of classes
for ``softmax_ce``) over symbols for the prediction, the label and the options, and
differentiates it with :func:`sympy.diff`; nothing is differentiated by hand. The
expressions are lowered with :func:`sympy.lambdify` to mpmath and evaluated at
``DPS`` >= 50 significant digits (inside a local :func:`mpmath.workdps`), on the
exact rational values of the inputs (:class:`symjac.exact.ExactArray`). The
reduction is exact (rational factors).

Values returned by :func:`loss_value`, :func:`loss_derivative` and
:func:`loss_derivative_set` are ``mpmath.mpf`` numbers (a scalar, or an ``object``
ndarray of them) carrying at least ``DPS`` digits; ``float(v)`` or
:func:`to_numpy` rounds them to a dtype.

The loss-scale contract: the derivative a layer emits is ``d(S·L)/dpred = S·dL/dpred``.

Example (seed 003, S = 8, sigmoid cross-entropy, logit 0, label 1)::

    >>> import symjac
    >>> loss = symjac.Loss("sigmoid_ce", scale=8)
    >>> [float(v) for v in symjac.loss_derivative(loss, [0.0], [1.0])]
    [-4.0]
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import sympy

from ._errors import InputError, SpecError
from .exact import ExactArray, to_fraction

KINDS = (
    "mse",
    "mae",
    "smooth_l1",
    "huber",
    "sigmoid_ce",
    "bce",
    "softmax_ce",
    "kld",
    "constant_derivative",
)
REDUCTIONS = ("mean", "batch_mean", "sum", "none")
LABEL_FORMS = ("probabilities", "indices")

#: Significant decimal digits of every mpmath evaluation (at least; more when
#: large logits make exp/log cancel, see :func:`_working_dps`).
DPS = 60

_ELEMENTWISE = ("mse", "mae", "smooth_l1", "huber", "sigmoid_ce", "bce", "kld", "constant_derivative")
# Which options each kind takes; every other option must be left unset (None).
_OPTIONS: dict[str, tuple[str, ...]] = {
    "mse": (),
    "mae": (),
    "smooth_l1": ("delta",),
    "huber": ("delta",),
    "sigmoid_ce": ("pos_weight", "weight"),
    "bce": ("weight",),
    "softmax_ce": ("weight", "label_smoothing", "ignore_index", "labels"),
    "kld": ("log_input", "log_target"),
    "constant_derivative": (),
}
_ALL_OPTIONS = ("delta", "pos_weight", "weight", "label_smoothing", "ignore_index", "labels", "log_input", "log_target")


# --------------------------------------------------------------------------- spec


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _number(field: str, value: Any, what: str) -> Fraction:
    try:
        return to_fraction(value, field)
    except InputError:
        raise SpecError(f"{field}={value!r} is not valid: give {what}") from None


def _weights(field: str, value: Any) -> tuple[Fraction, ...]:
    what = "a number >= 0 or a sequence of numbers >= 0 (one per class, along the last axis)"
    items = tuple(value) if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, str) else (value,)
    if not items:
        raise SpecError(f"{field}={value!r} is not valid: it is empty; give {what}")
    out = tuple(_number(field, v, what) for v in items)
    for v in out:
        if v < 0:
            raise SpecError(f"{field}={value!r} is not valid: {v} < 0; give {what}")
    return out


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
            raise SpecError(f"kind={self.kind!r} is not valid: give one of {', '.join(map(repr, KINDS))}")
        if self.reduction not in REDUCTIONS:
            raise SpecError(
                f"reduction={self.reduction!r} is not valid: give one of {', '.join(map(repr, REDUCTIONS))}"
            )
        scale = _number("scale", self.scale, "a finite number > 0 (the loss scale S)")
        if scale <= 0:
            raise SpecError(f"scale={self.scale!r} is not valid: the loss scale S must be > 0")
        put(self, "scale", scale)
        allowed = _OPTIONS[self.kind]
        for name in _ALL_OPTIONS:
            if getattr(self, name) is not None and name not in allowed:
                takes = [k for k, v in _OPTIONS.items() if name in v]
                raise SpecError(
                    f"{name}={getattr(self, name)!r} does not apply to kind={self.kind!r}: it is an option of "
                    f"{', '.join(map(repr, takes))}; leave it unset"
                )
        if "delta" in allowed:
            delta = _number("delta", 1 if self.delta is None else self.delta, "a number > 0")
            if delta <= 0:
                hint = " (smooth_l1 with beta = 0 is kind='mae')" if self.kind == "smooth_l1" else ""
                raise SpecError(f"delta={self.delta!r} is not valid: give a number > 0{hint}")
            put(self, "delta", delta)
        if self.pos_weight is not None:
            put(self, "pos_weight", _weights("pos_weight", self.pos_weight))
        if self.weight is not None:
            put(self, "weight", _weights("weight", self.weight))
        if self.kind == "softmax_ce":
            eps = _number("label_smoothing", 0 if self.label_smoothing is None else self.label_smoothing,
                          "a number in [0, 1]")
            if not 0 <= eps <= 1:
                raise SpecError(f"label_smoothing={self.label_smoothing!r} is not valid: give a number in [0, 1]")
            put(self, "label_smoothing", eps)
            labels = "probabilities" if self.labels is None else self.labels
            if labels not in LABEL_FORMS:
                raise SpecError(
                    f"labels={self.labels!r} is not valid: give one of {', '.join(map(repr, LABEL_FORMS))}"
                )
            put(self, "labels", labels)
            if self.ignore_index is not None:
                if not _is_int(self.ignore_index):
                    raise SpecError(f"ignore_index={self.ignore_index!r} is not valid: give an integer class index")
                if labels != "indices":
                    raise SpecError(
                        f"ignore_index={self.ignore_index!r} needs labels='indices' (class indices); "
                        "probability labels have no index to ignore"
                    )
                put(self, "ignore_index", int(self.ignore_index))
        if self.kind == "kld":
            for name in ("log_input", "log_target"):
                value = getattr(self, name)
                if value is None:
                    put(self, name, False)
                elif not isinstance(value, (bool, np.bool_)):
                    raise SpecError(f"{name}={value!r} is not valid: give True or False")
                else:
                    put(self, name, bool(value))

    def __repr__(self) -> str:
        parts = [repr(self.kind), f"reduction={self.reduction!r}", f"scale={_fmt(self.scale)}"]
        for name in _OPTIONS[self.kind]:
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


# --------------------------------------------------------------------- templates

_OP_COST_TRANSCENDENTAL = 2  # libm exp/log are faithful (< 1 ulp = 2u), not correctly rounded


def rounding_depth(expr: sympy.Basic) -> int:
    """The most roundings on any path from an input to the value of ``expr``.

    Counted on the SymPy tree: an n-term sum or product is n - 1 roundings (any
    summation order; recursive summation is the worst case); a division, square
    or reciprocal 1; exp, log and other functions 2 (libm is within 1 ulp = 2u);
    negation, multiplication by a power of two, ``Abs`` and ``sign`` 0 (exact).
    A rational constant that is not dyadic costs 1 (its own rounding).
    Piecewise takes its costliest branch.
    """
    return _depth(expr)


def _dyadic(q: sympy.Rational) -> bool:
    den = int(q.q)
    return den & (den - 1) == 0


def _power_of_two(q: sympy.Basic) -> bool:
    if not q.is_Rational:
        return False
    p, d = abs(int(q.p)), int(q.q)
    return p & (p - 1) == 0 and d & (d - 1) == 0


@functools.lru_cache(maxsize=4096)
def _depth(e: sympy.Basic) -> int:
    if e.is_Symbol or e.is_Integer:
        return 0
    if e.is_Rational:
        return 0 if _dyadic(e) else 1
    if e.is_Number or e.is_NumberSymbol:
        return 1
    if isinstance(e, sympy.Add):
        return len(e.args) - 1 + max(_depth(a) for a in e.args)
    if isinstance(e, sympy.Mul):
        inexact = [a for a in e.args if not _power_of_two(a)]
        ops = max(len(inexact) - 1, 0)
        return ops + max(_depth(a) for a in e.args)
    if isinstance(e, sympy.Pow):
        base, ex = e.args
        if ex.is_Integer:
            k = abs(int(ex))
            ops = max(k.bit_length() - 1 + k.bit_count() - 1, 0) + (1 if int(ex) < 0 else 0)
            return max(ops, 1) + _depth(base)
        return _OP_COST_TRANSCENDENTAL + max(_depth(base), _depth(ex))
    if isinstance(e, (sympy.Abs, sympy.sign)):
        return _depth(e.args[0])
    if isinstance(e, sympy.Piecewise):
        return max(_depth(branch) for branch, _cond in e.args)
    if isinstance(e, (sympy.core.relational.Relational, sympy.logic.boolalg.Boolean)):
        return 0
    return _OP_COST_TRANSCENDENTAL + max((_depth(a) for a in e.args), default=0)


@functools.lru_cache(maxsize=4096)
def running_error(e: sympy.Basic) -> sympy.Expr:
    """First-order rounding error of evaluating ``e`` as written, in units of u.

    The running error bound (Wilkinson; Higham, *Accuracy and Stability*, §3.3),
    built symbolically node by node with ``E(input) = 0`` and:

    - n-term sum: ``Σ E(a_i) + (n-1)·Σ|a_i|`` (recursive summation, γ_{n-1}Σ|a_i|);
    - product: ``Σ_i E(a_i)·Π_{j≠i}|a_j| + m·|Π a_i|``, m the inexact multiplications;
    - ``b^k`` (integer k): ``|k·b^(k-1)|·E(b) + ops·|b^k|``;
    - ``exp(a)``: ``|exp a|·E(a) + 2|exp a|``; ``log(a)``: ``E(a)/|a| + 2|log a|``
      (libm within 1 ulp = 2u); other functions ``|f'(a)|·E(a) + 2|f(a)|``;
    - ``Abs``: ``E(a)``; ``sign``: 0; Piecewise: per branch; a non-dyadic constant: ``|c|``.

    Unlike the condition number, this charges cancellation between large
    intermediates (``1 - softmax`` near 1, ``(1-y)z + softplus(-z)`` at a loss
    minimum), which every algorithm that forms those intermediates pays.
    """
    return _running_error(e)


def _running_error(e: sympy.Basic) -> sympy.Expr:
    zero = sympy.S.Zero
    if e.is_Symbol or e.is_Integer:
        return zero
    if e.is_Rational:
        return zero if _dyadic(e) else sympy.Abs(e)
    if e.is_Number or e.is_NumberSymbol:
        return sympy.Abs(e)
    if isinstance(e, sympy.Add):
        return sympy.Add(*(running_error(a) for a in e.args)) + (len(e.args) - 1) * sympy.Add(
            *(sympy.Abs(a) for a in e.args)
        )
    if isinstance(e, sympy.Mul):
        args = e.args
        terms = []
        for i, a in enumerate(args):
            ea = running_error(a)
            if ea != 0:
                terms.append(ea * sympy.Mul(*(sympy.Abs(b) for j, b in enumerate(args) if j != i)))
        ops = max(len([a for a in args if not _power_of_two(a)]) - 1, 0)
        return sympy.Add(*terms) + ops * sympy.Abs(e)
    if isinstance(e, sympy.Pow):
        base, ex = e.args
        if ex.is_Integer:
            k = int(ex)
            ops = max(abs(k).bit_length() - 1 + abs(k).bit_count() - 1, 0) + (1 if k < 0 else 0)
            return sympy.Abs(k * base ** (k - 1)) * running_error(base) + max(ops, 1) * sympy.Abs(e)
        return (sympy.Abs(sympy.diff(e, base)) * running_error(base) + sympy.Abs(sympy.diff(e, ex)) * running_error(ex)
                + _OP_COST_TRANSCENDENTAL * sympy.Abs(e))
    if isinstance(e, sympy.exp):
        return sympy.Abs(e) * running_error(e.args[0]) + _OP_COST_TRANSCENDENTAL * sympy.Abs(e)
    if isinstance(e, sympy.log):
        a = e.args[0]
        return running_error(a) / sympy.Abs(a) + _OP_COST_TRANSCENDENTAL * sympy.Abs(e)
    if isinstance(e, sympy.Abs):
        return running_error(e.args[0])
    if isinstance(e, sympy.sign):
        return zero
    if isinstance(e, sympy.Piecewise):
        return sympy.Piecewise(*((running_error(b), c) for b, c in e.args))
    if len(e.args) == 1:
        a = e.args[0]
        return sympy.Abs(sympy.diff(e, a)) * running_error(a) + _OP_COST_TRANSCENDENTAL * sympy.Abs(e)
    raise SpecError(f"no rounding model for {e!r}")  # pragma: no cover - every template is covered


@dataclasses.dataclass(frozen=True, eq=False)
class LossTemplate:
    """One loss element as SymPy expressions, differentiated once, lowered to mpmath.

    Attributes:
      kind: the loss kind.
      classes: number of prediction entries per element (C for ``softmax_ce``, else 1).
      pred: prediction symbols of one element.
      label: label symbols of one element (empty for ``constant_derivative``).
      params: option symbols (weights, pos_weight, ε, δ), in the order the
        evaluator passes them.
      loss: the element loss ``ℓ``.
      derivatives: ``sympy.diff(loss, z)`` for each prediction symbol.
      loss_depth / derivative_depth: :func:`rounding_depth` of ``loss`` and of the
        deepest derivative.
      kink_args: arguments of ``sign`` in the derivatives: where one is exactly 0
        the derivative is a Clarke set (the hull of its values with sign = ±1).
    """

    kind: str
    classes: int
    pred: tuple[sympy.Symbol, ...]
    label: tuple[sympy.Symbol, ...]
    params: tuple[sympy.Symbol, ...]
    loss: sympy.Expr
    derivatives: tuple[sympy.Expr, ...]
    loss_depth: int
    derivative_depth: int
    kink_args: tuple[sympy.Expr, ...]

    @property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """Every argument of the lowered functions: pred, label, params."""
        return self.pred + self.label + self.params

    def _lower(self, exprs: Sequence[sympy.Expr]) -> Callable[..., Any]:
        return sympy.lambdify(self.symbols, list(exprs), modules="mpmath", cse=True)  # type: ignore[no-any-return]

    @functools.cached_property
    def value_fn(self) -> Callable[..., Any]:
        """mpmath: args -> [ℓ]."""
        return self._lower([self.loss])

    @functools.cached_property
    def derivative_fn(self) -> Callable[..., Any]:
        """mpmath: args -> [dℓ/dz_0, ...]."""
        return self._lower(self.derivatives)

    def _cond(self, expr: sympy.Expr) -> sympy.Expr:
        # Σ_m |∂e/∂x_m|·|x_m|: the first-order effect of perturbing every input by one
        # relative unit. DiracDelta (from d sign) is zero off the kinks; at a kink the
        # Clarke set is accepted instead.
        terms = []
        for s in self.symbols:
            g = sympy.diff(expr, s).replace(sympy.DiracDelta, lambda *a: sympy.S.Zero)
            if g != 0:
                terms.append(sympy.Abs(g) * sympy.Abs(s))
        return sympy.Add(*terms)

    @functools.cached_property
    def loss_cond_fn(self) -> Callable[..., Any]:
        """mpmath: args -> [ℓ, Σ_m |∂ℓ/∂x_m|·|x_m|, running_error(ℓ)]."""
        return self._lower([self.loss, self._cond(self.loss), running_error(self.loss)])

    @functools.cached_property
    def derivative_cond_fn(self) -> Callable[..., Any]:
        """mpmath: args -> [Σ_m |∂h_c/∂x_m|·|x_m| for each h_c] + [running_error(h_c) for each h_c]."""
        return self._lower([self._cond(h) for h in self.derivatives] + [running_error(h) for h in self.derivatives])

    @functools.cached_property
    def kink_fn(self) -> Callable[..., Any] | None:
        """mpmath: args -> the sign arguments (None if the loss has no kink)."""
        return self._lower(self.kink_args) if self.kink_args else None

    @functools.cached_property
    def clarke_fn(self) -> Callable[..., Any]:
        """mpmath: args -> derivatives with every sign() = -1, then with every sign() = +1."""
        lo = [h.replace(sympy.sign, lambda *a: sympy.S.NegativeOne) for h in self.derivatives]
        hi = [h.replace(sympy.sign, lambda *a: sympy.S.One) for h in self.derivatives]
        return self._lower(lo + hi)


def _real(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, real=True)


@functools.lru_cache(maxsize=64)
def _template(kind: str, classes: int, log_input: bool, log_target: bool) -> LossTemplate:
    half = sympy.Rational(1, 2)
    label: tuple[sympy.Symbol, ...]
    params: tuple[sympy.Symbol, ...] = ()
    if kind == "softmax_ce":
        z = tuple(_real(f"z{c}") for c in range(classes))
        t = tuple(_real(f"t{c}") for c in range(classes))
        w = tuple(_real(f"w{c}") for c in range(classes))
        eps = _real("epsilon")
        lse = sympy.log(sympy.Add(*(sympy.exp(zc) for zc in z)))
        loss = -sympy.Add(
            *(((1 - eps) * t[c] + eps / classes) * w[c] * (z[c] - lse) for c in range(classes))
        )
        pred, label, params = z, t, w + (eps,)
    else:
        zz, y = _real("z"), _real("y")
        pred, label = (zz,), (y,)
        d = zz - y
        if kind == "mse":
            loss = d**2
        elif kind == "mae":
            loss = sympy.Abs(d)
        elif kind in ("smooth_l1", "huber"):
            delta = sympy.Symbol("delta", positive=True)
            params = (delta,)
            if kind == "smooth_l1":
                loss = sympy.Piecewise((half * d**2 / delta, sympy.Abs(d) < delta), (sympy.Abs(d) - half * delta, True))
            else:
                loss = sympy.Piecewise((half * d**2, sympy.Abs(d) < delta), (delta * (sympy.Abs(d) - half * delta), True))
        elif kind == "sigmoid_ce":
            w, p = _real("w"), _real("pos_weight")
            params = (w, p)
            # -log σ(z) = log(1 + e^-z) and -log(1 - σ(z)) = z + log(1 + e^-z): the same
            # function, written without 1 - σ so mpmath need not cancel.
            softplus = sympy.log(1 + sympy.exp(-zz))
            loss = w * (p * y * softplus + (1 - y) * (zz + softplus))
        elif kind == "bce":
            w = _real("w")
            params = (w,)
            loss = -w * (y * sympy.log(zz) + (1 - y) * sympy.log(1 - zz))
        elif kind == "kld":
            logq = zz if log_input else sympy.log(zz)
            if log_target:
                loss = sympy.exp(y) * (y - logq)
            else:  # 0·log 0 = 0 (xlogy), as PyTorch
                loss = sympy.Piecewise((sympy.S.Zero, sympy.Eq(y, 0)), (y * sympy.log(y) - y * logq, True))
        elif kind == "constant_derivative":
            loss = zz
            label = ()
        else:  # pragma: no cover - KINDS is closed
            raise SpecError(f"kind={kind!r} is not valid")
    derivatives = tuple(sympy.diff(loss, s) for s in pred)
    kinks = tuple(dict.fromkeys(a.args[0] for h in derivatives for a in h.atoms(sympy.sign)))
    return LossTemplate(
        kind=kind,
        classes=classes,
        pred=pred,
        label=label,
        params=params,
        loss=loss,
        derivatives=derivatives,
        loss_depth=_depth(loss),
        derivative_depth=max(_depth(h) for h in derivatives),
        kink_args=kinks,
    )


def loss_template(loss: Loss, classes: int = 1) -> LossTemplate:
    """The SymPy template of one element of ``loss`` (``classes`` = C for softmax_ce).

    Example::

        >>> import symjac
        >>> t = symjac.losses.loss_template(symjac.Loss("mse"))
        >>> t.loss, t.derivatives
        ((-y + z)**2, (-2*y + 2*z,))
    """
    check_loss(loss)
    if loss.kind == "softmax_ce":
        if not _is_int(classes) or classes < 1:
            raise SpecError(f"classes={classes!r} is not valid: give the number of classes, an integer >= 1")
    else:
        classes = 1
    return _template(loss.kind, int(classes), bool(loss.log_input), bool(loss.log_target))


# -------------------------------------------------------------------- evaluation


def _mpf(f: Fraction) -> mpmath.mpf:
    return mpmath.mpf(f.numerator) / f.denominator


def _index(shape: tuple[int, ...], flat: int) -> list[int]:
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []


def _exact(data: Any, name: str) -> np.ndarray:
    if isinstance(data, np.ndarray) and data.dtype.kind == "c" or np.iscomplexobj(data):
        raise InputError(f"{name} is complex; give real numbers")
    try:
        return ExactArray.from_any(data, name).to_fractions()
    except InputError:
        raise
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} could not be read as an array of numbers: {exc}") from None


@dataclasses.dataclass(frozen=True, eq=False)
class LossEvaluation:
    """Everything exact about one loss at one input, at :data:`DPS`-digit precision.

    Shapes: ``pred_shape``; the element shape is ``pred_shape`` (element-wise kinds)
    or ``pred_shape[:-1]`` (``softmax_ce``: one element per row).

    Attributes:
      loss: the spec.
      template: the SymPy template used.
      pred: exact prediction (object array of Fraction).
      args: per element, the exact mpmath argument tuple of the template.
      counted: per element, False for rows equal to ``ignore_index``.
      elements: ``ℓ_i`` (mpf; 0 for ignored rows).
      element_cond: ``Σ_m |∂ℓ_i/∂x_m|·|x_m|`` (None unless ``bounds``).
      element_run: :func:`running_error` of ``ℓ_i`` in units of u (None unless ``bounds``).
      h: per prediction entry, the unreduced unscaled ``dℓ_i/dz_j`` (mpf).
      h_cond: ``Σ_m |∂h_j/∂x_m|·|x_m|`` (None unless ``bounds``).
      h_run: :func:`running_error` of ``h_j`` in units of u (None unless ``bounds``).
      h_lo / h_hi: the Clarke set of ``dℓ_i/dz_j`` (equal to ``h`` where smooth).
      factor: per element, the exact reduction factor ``r_i`` (1/D, 1/B, 1, or the
        upstream ``u_i`` for ``"none"``; 0 for ignored rows).
      denominator: D (or B, or 1).
      denominator_ops: roundings an implementation needs to form D in floats
        (0 if D is an integer count, else the terms of the weight sum).
      dps: digits used.
    """

    loss: Loss
    template: LossTemplate
    pred: np.ndarray
    args: np.ndarray
    counted: np.ndarray
    elements: np.ndarray
    element_cond: np.ndarray | None
    element_run: np.ndarray | None
    h: np.ndarray
    h_cond: np.ndarray | None
    h_run: np.ndarray | None
    h_lo: np.ndarray
    h_hi: np.ndarray
    factor: np.ndarray
    denominator: Fraction
    denominator_ops: int
    dps: int

    @property
    def pred_shape(self) -> tuple[int, ...]:
        return tuple(self.pred.shape)

    @property
    def element_shape(self) -> tuple[int, ...]:
        return tuple(self.elements.shape)

    def expand(self, per_element: np.ndarray) -> np.ndarray:
        """Broadcast a per-element array to pred's shape (repeat over the class axis)."""
        if self.loss.kind != "softmax_ce":
            return per_element
        return np.repeat(per_element[..., None], self.template.classes, axis=-1)

    def value(self) -> Any:
        """``L``: an mpf for reduced losses, an object array of ``ℓ_i`` for ``"none"``."""
        with mpmath.workdps(self.dps):
            if self.loss.reduction == "none":
                return self.elements.copy()
            total = mpmath.fsum(self.elements.reshape(-1).tolist())
            return total / _mpf(self.denominator)

    def derivative(self, scale: Fraction | None = None) -> np.ndarray:
        """``S·r_i·dℓ_i/dz_j`` in pred's shape (S = the spec's scale unless given)."""
        s = self.loss.scale if scale is None else scale
        return self._scaled(self.h, s)

    def derivative_set(self, scale: Fraction | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The Clarke set of the scaled derivative, elementwise ``[lo, hi]``."""
        s = self.loss.scale if scale is None else scale
        a, b = self._scaled(self.h_lo, s), self._scaled(self.h_hi, s)
        with mpmath.workdps(self.dps):
            lo = np.array([min(x, y) for x, y in zip(a.reshape(-1), b.reshape(-1))] + [None], dtype=object)[:-1]
            hi = np.array([max(x, y) for x, y in zip(a.reshape(-1), b.reshape(-1))] + [None], dtype=object)[:-1]
        return lo.reshape(a.shape), hi.reshape(a.shape)

    def _scaled(self, h: np.ndarray, s: Fraction) -> np.ndarray:
        factor = self.expand(self.factor)
        out = np.empty(h.size, dtype=object)
        with mpmath.workdps(self.dps):
            for i, (hv, r) in enumerate(zip(h.reshape(-1), factor.reshape(-1))):
                out[i] = _mpf(s * r) * hv
        return out.reshape(h.shape)


def _working_dps(loss: Loss, pred: np.ndarray) -> int:
    # exp(|z|) next to 1 cancels ~|z|·log10(e) digits (σ(z) - y, softmax - t at large
    # logits): add them so DPS significant digits survive.
    if loss.kind not in ("sigmoid_ce", "softmax_ce"):
        return DPS
    big = max((abs(v) for v in pred.reshape(-1)), default=Fraction(0))
    return DPS + int(float(big) * 0.4343) + 1


def _per_class(name: str, values: tuple[Fraction, ...] | None, classes: int, default: Fraction) -> list[Fraction]:
    if values is None:
        return [default] * classes
    if len(values) == 1:
        return list(values) * classes
    if len(values) != classes:
        raise SpecError(
            f"{name} has {len(values)} entries but pred has {classes} classes along its last axis: "
            f"give one number or {classes}"
        )
    return list(values)


def _check_range(name: str, values: np.ndarray, ok: Callable[[Fraction], bool], what: str, why: str) -> None:
    for i, v in enumerate(values.reshape(-1)):
        if not ok(v):
            where = _index(values.shape, i)
            raise InputError(f"{name}{where} = {float(v)!r} is outside {what}: {why}")


def evaluate(
    loss: Loss,
    pred: Any,
    label: Any = None,
    upstream: Any = None,
    *,
    values: bool = True,
    derivatives: bool = True,
    bounds: bool = False,
) -> LossEvaluation:
    """Validate the inputs and evaluate the loss exactly (mpmath, >= DPS digits).

    Args:
      loss: the spec.
      pred: predictions (logits, probabilities, ... per kind), at least 1-D.
      label: labels (see :class:`Loss`); ignored (may be None) for ``constant_derivative``.
      upstream: ``"none"``: the per-element upstream gradient (default all ones);
        other reductions: None or one number multiplying the derivative.
      values / derivatives / bounds: what to compute (bounds: the condition sums
        the verifier's error bounds need).

    Raises:
      SpecError: the spec does not fit the input (e.g. weight length vs classes).
      InputError: an input is malformed or outside the loss's domain; the message
        names the argument and the first offending index.
    """
    check_loss(loss)
    z = _exact(pred, "pred")
    if z.ndim == 0:
        raise InputError("pred is a scalar; give an array with at least one axis (e.g. [0.0])")
    if z.size == 0:
        raise InputError(f"pred has shape {z.shape} with no elements; give at least one")
    kind = loss.kind
    classes = int(z.shape[-1]) if kind == "softmax_ce" else 1
    tpl = loss_template(loss, classes)
    element_shape = tuple(z.shape[:-1]) if kind == "softmax_ce" else tuple(z.shape)

    # ---- labels
    counted = np.ones(element_shape, dtype=bool)
    t: np.ndarray | None = None
    if kind == "constant_derivative":
        pass
    elif label is None:
        raise InputError(f"label is None; kind={kind!r} needs a label")
    elif kind == "softmax_ce" and loss.labels == "indices":
        raw = np.asarray(label)
        if raw.shape != element_shape:
            raise InputError(
                f"label has shape {raw.shape} but pred has shape {z.shape}: labels='indices' needs one class "
                f"index per row, shape {element_shape}"
            )
        idx = _exact(raw, "label")
        t = np.zeros(z.shape, dtype=object)
        t[...] = Fraction(0)
        for i, v in enumerate(idx.reshape(-1)):
            where = _index(element_shape, i)
            if v.denominator != 1:
                raise InputError(f"label{where} = {float(v)!r} is not an integer class index")
            k = int(v)
            if loss.ignore_index is not None and k == loss.ignore_index:
                counted[tuple(where)] = False
                continue
            if not 0 <= k < classes:
                ign = "" if loss.ignore_index is None else f" or ignore_index={loss.ignore_index}"
                raise InputError(f"label{where} = {k} is out of range: class indices must be in [0, {classes}){ign}")
            t[tuple(where) + (k,)] = Fraction(1)
    else:
        t = _exact(label, "label")
        if t.shape != z.shape:
            raise InputError(f"label has shape {t.shape} but pred has shape {z.shape}: kind={kind!r} needs "
                             f"label of pred's shape")

    # ---- domains (exact comparisons on the rational inputs)
    unit = "[0, 1]"
    if kind in ("sigmoid_ce", "bce") or (kind == "softmax_ce" and loss.labels == "probabilities") or (
        kind == "kld" and not loss.log_target
    ):
        assert t is not None
        _check_range("label", t, lambda v: 0 <= v <= 1, unit, f"kind={kind!r} takes probability labels")
    if kind == "kld" and loss.log_target:
        assert t is not None
        _check_range("label", t, lambda v: v <= 0, "(-inf, 0]", "with log_target=True the label is log P, P <= 1")
    if kind == "bce":
        _check_range("pred", z, lambda v: 0 < v < 1, "(0, 1)",
                     "bce takes probabilities, and its derivative (p - y)/(p(1 - p)) is infinite at 0 and 1")
    if kind == "kld" and not loss.log_input:
        _check_range("pred", z, lambda v: 0 < v <= 1, "(0, 1]",
                     "kld takes the probability Q (log Q and -P/Q need Q > 0); use log_input=True for log Q")

    # ---- options per class
    params_per_class: list[list[Fraction]]
    if kind == "softmax_ce":
        params_per_class = [_per_class("weight", loss.weight, classes, Fraction(1)) + [loss.label_smoothing or Fraction(0)]]
    elif kind in ("smooth_l1", "huber"):
        assert loss.delta is not None
        params_per_class = [[loss.delta]]
    elif kind in ("sigmoid_ce", "bce"):
        c_last = int(z.shape[-1])
        w = _per_class("weight", loss.weight, c_last, Fraction(1))
        if kind == "bce":
            params_per_class = [[wc] for wc in w]
        else:
            pw = _per_class("pos_weight", loss.pos_weight, c_last, Fraction(1))
            params_per_class = [[wc, pc] for wc, pc in zip(w, pw)]
    else:
        params_per_class = [[]]

    # ---- reduction
    n_el = int(np.prod(element_shape)) if element_shape else 1
    factor = np.empty(element_shape, dtype=object)
    denominator_ops = 0
    if loss.reduction == "none":
        u = np.ones(element_shape, dtype=object) * Fraction(1) if upstream is None else _exact(upstream, "upstream")
        if u.shape != element_shape:
            raise InputError(
                f"upstream has shape {u.shape}; reduction='none' needs one upstream gradient per loss element, "
                f"shape {element_shape}"
            )
        factor[...] = u
        den = Fraction(1)
    else:
        scalar = Fraction(1)
        if upstream is not None:
            ua = _exact(upstream, "upstream")
            if ua.size != 1:
                raise InputError(
                    f"upstream has shape {ua.shape}; reduction={loss.reduction!r} gives one number, so the upstream "
                    "gradient is one number (or None)"
                )
            scalar = ua.reshape(-1)[0]
        if loss.reduction == "sum":
            den = Fraction(1)
        elif loss.reduction == "batch_mean":
            den = Fraction(element_shape[0] if element_shape else 1)
        elif kind == "softmax_ce" and loss.labels == "indices":
            w = _per_class("weight", loss.weight, classes, Fraction(1))
            assert t is not None
            den = Fraction(0)
            for i in range(n_el):
                row = tuple(_index(element_shape, i))
                if counted[row]:
                    den += w[int(np.argmax([bool(v) for v in t[row]]))]
            n_counted = int(counted.sum())
            if n_counted == 0:
                raise InputError(
                    f"ignore_index={loss.ignore_index} matches every row of label: reduction='mean' would divide by "
                    "zero (PyTorch returns NaN); use reduction='sum' or keep at least one row"
                )
            if den == 0:
                raise InputError(
                    f"weight={tuple(map(float, w))} gives the labelled rows a total weight of 0: reduction='mean' "
                    "would divide by zero"
                )
            if loss.weight is not None:
                denominator_ops = n_counted  # n - 1 additions + the weights' own rounding
        else:
            den = Fraction(n_el)
        factor[...] = scalar / den
    factor[~counted] = Fraction(0)

    # ---- exact evaluation, element by element
    dps = _working_dps(loss, z)
    elements = np.empty(element_shape, dtype=object)
    element_cond = np.empty(element_shape, dtype=object) if bounds else None
    element_run = np.empty(element_shape, dtype=object) if bounds else None
    h = np.empty(z.shape, dtype=object)
    h_cond = np.empty(z.shape, dtype=object) if bounds else None
    h_run = np.empty(z.shape, dtype=object) if bounds else None
    h_lo = np.empty(z.shape, dtype=object)
    h_hi = np.empty(z.shape, dtype=object)
    args = np.empty(element_shape, dtype=object)
    with mpmath.workdps(dps):
        zero = mpmath.mpf(0)
        for i in range(n_el):
            key = tuple(_index(element_shape, i))
            if kind == "softmax_ce":
                zs = list(z[key])
                ts = list(t[key]) if t is not None else []
                ps = params_per_class[0]
                hw = [key + (c,) for c in range(classes)]
            else:
                zs = [z[key]]
                ts = [] if t is None else [t[key]]
                ps = params_per_class[key[-1] % len(params_per_class)] if len(params_per_class) > 1 else (
                    params_per_class[0])
                hw = [key]
            a = tuple(_mpf(v) for v in zs + ts + list(ps))
            args[key] = a
            if not counted[key]:
                elements[key] = zero
                if element_cond is not None and element_run is not None:
                    element_cond[key] = element_run[key] = zero
                for pos in hw:
                    h[pos] = h_lo[pos] = h_hi[pos] = zero
                    if h_cond is not None and h_run is not None:
                        h_cond[pos] = h_run[pos] = zero
                continue
            if bounds:
                v, c, run = tpl.loss_cond_fn(*a)
                elements[key] = v
                assert element_cond is not None and element_run is not None
                element_cond[key], element_run[key] = c, run
            elif values:
                elements[key] = tpl.value_fn(*a)[0]
            else:
                elements[key] = zero
            if derivatives or bounds:
                hv = tpl.derivative_fn(*a)
                lo, hi = list(hv), list(hv)
                if tpl.kink_fn is not None and any(k == 0 for k in tpl.kink_fn(*a)):
                    both = tpl.clarke_fn(*a)
                    lo = [min(p, q) for p, q in zip(both[: len(hv)], both[len(hv):])]
                    hi = [max(p, q) for p, q in zip(both[: len(hv)], both[len(hv):])]
                hc = tpl.derivative_cond_fn(*a) if bounds else [None] * (2 * len(hv))
                for pos, v_, l_, u_, c_, r_ in zip(hw, hv, lo, hi, hc[: len(hv)], hc[len(hv):]):
                    h[pos], h_lo[pos], h_hi[pos] = v_, l_, u_
                    if h_cond is not None and h_run is not None:
                        h_cond[pos], h_run[pos] = c_, r_
            else:
                for pos in hw:
                    h[pos] = h_lo[pos] = h_hi[pos] = zero
    return LossEvaluation(
        loss=loss,
        template=tpl,
        pred=z,
        args=args,
        counted=counted,
        elements=elements,
        element_cond=element_cond,
        element_run=element_run,
        h=h,
        h_cond=h_cond,
        h_run=h_run,
        h_lo=h_lo,
        h_hi=h_hi,
        factor=factor,
        denominator=den,
        denominator_ops=denominator_ops,
        dps=dps,
    )


def loss_value(loss: Loss, pred: Any, label: Any = None) -> Any:
    """The exact loss ``L`` (unscaled), at >= :data:`DPS` significant digits.

    Returns:
      ``mpmath.mpf`` for ``"mean"``, ``"batch_mean"``, ``"sum"``; for ``"none"`` an
      ``object`` ndarray of ``mpf``, one per loss element.

    Raises:
      SpecError, InputError: as :func:`evaluate`.

    Example::

        >>> import symjac, mpmath
        >>> v = symjac.loss_value(symjac.Loss("softmax_ce"), [[0.0, 0.0]], [[1.0, 0.0]])
        >>> mpmath.nstr(v, 50)   # -log softmax([0, 0])_0 = log 2
        '0.69314718055994530941723212145817656807550013436026'
    """
    return evaluate(loss, pred, label, values=True, derivatives=False).value()


def loss_derivative(loss: Loss, pred: Any, label: Any = None, upstream: Any = None) -> np.ndarray:
    """The exact emitted derivative ``S·dL/dpred`` (``S·Σ_i u_i·dℓ_i/dpred`` for ``"none"``).

    At a kink (``mae`` at ``pred == label``) the minimal-norm element of the Clarke
    set (0) is returned; :func:`loss_derivative_set` gives the whole set.

    Returns:
      An ``object`` ndarray of ``mpmath.mpf`` of pred's shape.

    Raises:
      SpecError, InputError: as :func:`evaluate`.
    """
    return evaluate(loss, pred, label, upstream, values=False, derivatives=True).derivative()


def loss_derivative_set(
    loss: Loss, pred: Any, label: Any = None, upstream: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """The Clarke set of ``S·dL/dpred`` as elementwise intervals ``(lo, hi)``.

    ``lo == hi`` wherever the loss is differentiable. (Every loss here is separable
    across elements, so the Clarke set is the product of these intervals.)
    """
    return evaluate(loss, pred, label, upstream, values=False, derivatives=True).derivative_set()


def to_numpy(values: Any, dtype: Any = np.float64) -> np.ndarray:
    """Round mpf values (scalar or object array) to ``dtype``, to nearest.

    Rounds through an exact binary fraction of the mpf, so there is no double
    rounding through float64.
    """
    from .exact import round_fraction

    arr = np.asarray(values, dtype=object)
    out = np.empty(arr.size, dtype=np.dtype(dtype))
    for i, v in enumerate(arr.reshape(-1)):
        sign, man, exp, _bc = mpmath.mpf(v)._mpf_  # exact binary value; man_exp would drop the sign
        f = (-1 if sign else 1) * Fraction(int(man)) * (Fraction(2) ** int(exp))
        out[i] = round_fraction(f, dtype)
    return out.reshape(arr.shape)


def complete_inputs(loss: Loss, pred: Any, label: Any, upstream: Any) -> tuple[Any, Any, Any]:
    """Fill what the caller left out: :func:`default_inputs` when ``pred`` is None, and
    for ``reduction="none"`` a varied upstream gradient (so an ignored upstream shows).

    Raises:
      InputError: a label without a prediction.
    """
    if pred is None:
        if label is not None:
            raise InputError("label is given without pred; give both (or neither, for the default inputs)")
        pred, label, default_up = default_inputs(loss)
        return pred, label, default_up if upstream is None else upstream
    if loss.reduction == "none" and upstream is None:
        shape = np.shape(pred)[:-1] if loss.kind == "softmax_ce" else np.shape(pred)
        upstream = np.resize(np.array([0.5, -1.0, 1.5, 2.0, -0.25, 0.75]), shape)
    return pred, label, upstream


def default_inputs(loss: Loss) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Small deterministic inputs in the loss's domain: ``(pred, label, upstream)``.

    Every value is a short dyadic fraction, exact in float16/32/64, so the exact
    analysis and the implementation see the same numbers in every dtype; no element
    sits on a kink; huber/smooth_l1 (δ = 1) get both branches. ``upstream`` is set
    (and varied, so an ignored upstream shows) only for ``reduction="none"``.
    """
    check_loss(loss)
    kind = loss.kind
    pred: np.ndarray
    label: np.ndarray | None
    if kind in ("mse", "mae", "smooth_l1", "huber"):
        pred = np.array([[0.5, -1.25, 2.0], [0.75, 0.0, -0.5]])
        label = np.array([[0.25, -1.0, -0.5], [1.5, -0.125, 1.5]])
    elif kind == "sigmoid_ce":
        pred = np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]])
        label = np.array([[1.0, 0.0, 0.25], [0.0, 1.0, 0.75]])
    elif kind == "bce":
        pred = np.array([[0.25, 0.5, 0.75], [0.125, 0.625, 0.875]])
        label = np.array([[0.0, 1.0, 0.5], [1.0, 0.0, 0.25]])
    elif kind == "softmax_ce":
        pred = np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]])
        if loss.labels == "indices":
            label = np.array([2, 0])
        else:
            label = np.array([[0.0, 0.0, 1.0], [0.75, 0.25, 0.0]])
    elif kind == "kld":
        q = np.array([[0.25, 0.5, 0.25], [0.125, 0.375, 0.5]])
        pred = np.array([[-1.5, -0.75, -1.25], [-2.0, -1.0, -0.625]]) if loss.log_input else q
        p = np.array([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]])
        label = np.array([[-0.75, -1.5, -1.25], [-1.5, -1.0, -0.625]]) if loss.log_target else p
    else:  # constant_derivative
        pred = np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]])
        label = None
    upstream = None
    if loss.reduction == "none":
        shape = pred.shape[:-1] if kind == "softmax_ce" else pred.shape
        cycle = np.array([0.5, -1.0, 1.5, 2.0, -0.25, 0.75])
        upstream = np.resize(cycle, shape)
    return pred, label, upstream


__all__ = [
    "DPS",
    "KINDS",
    "LABEL_FORMS",
    "REDUCTIONS",
    "Loss",
    "LossEvaluation",
    "LossTemplate",
    "check_loss",
    "complete_inputs",
    "default_inputs",
    "evaluate",
    "loss_derivative",
    "loss_derivative_set",
    "loss_template",
    "loss_value",
    "rounding_depth",
    "running_error",
    "to_numpy",
]
