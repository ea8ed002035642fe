"""Loss templates: the per-element SymPy loss, its derivatives, and their rounding depth and running-error bounds.

The machinery every element-wise kind's template is built with (:func:`element_template`);
which expression each kind has is its definition's (:mod:`symjac.loss._kinds`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import sympy
from sympy.codegen.cfunctions import log1p

from symjac._errors import SpecError
from symjac.loss import _numbers

# --------------------------------------------------------------------- templates

#: Significant digits of the limits (:func:`limits_of`): those of every exact value and more.
DIGITS = 70
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
    - ``b^x`` (other x: a square root, ``(·)^(-1/2)``): ``|x·b^(x-1)|·E(b) + |b^x·log b|·E(x) + 2|b^x|`` (a
      correctly rounded sqrt and a division are within 2u together);
    - ``exp(a)``: ``|exp a|·E(a) + 2|exp a|``; ``log(a)``: ``E(a)/|a| + 2|log a|``;
      ``log1p(a)``: ``E(a)/|1 + a| + 2|log1p a|``
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
        # ∂(b^x)/∂b = x·b^(x-1) and ∂(b^x)/∂x = b^x·log b, written out: SymPy differentiates with
        # respect to symbols only, and b may be a sum (triplet_margin's √Σd²: x = 1/2, a constant)
        by_base = sympy.Abs(ex * base ** (ex - 1)) * running_error(base)
        by_exponent = zero if ex.is_number else sympy.Abs(e * sympy.log(base)) * running_error(ex)
        return by_base + by_exponent + _OP_COST_TRANSCENDENTAL * sympy.Abs(e)
    if isinstance(e, sympy.exp):
        return sympy.Abs(e) * running_error(e.args[0]) + _OP_COST_TRANSCENDENTAL * sympy.Abs(e)
    if isinstance(e, sympy.log):
        a = e.args[0]
        return running_error(a) / sympy.Abs(a) + _OP_COST_TRANSCENDENTAL * sympy.Abs(e)
    if isinstance(e, log1p):
        a = e.args[0]
        return running_error(a) / sympy.Abs(1 + a) + _OP_COST_TRANSCENDENTAL * sympy.Abs(e)
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

    The evaluator uses it for the element-wise kinds. softmax_ce's (one symbol per
    class) is built for display and as the definition the class-generic evaluation
    (:mod:`symjac.loss._softmax`) is tested against; its ``stable_*`` forms are its raw
    forms.

    Attributes:
      kind: the loss kind's name (for display).
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
      stable_loss / stable_derivatives: the same functions (checked by SymPy) written
        so that nothing cancels at any magnitude; the exact values are evaluated from
        these, the rounding bounds from ``loss`` and ``derivatives``.
      exponentials: symbols E for e^z that the stable loss and derivative take as
        arguments (computed once per element, not once per function; sigmoid_ce's
        ``E0``), none for other kinds.
    """

    kind: str
    classes: int
    pred: tuple[sympy.Symbol, ...]
    label: tuple[sympy.Symbol, ...]
    params: tuple[sympy.Symbol, ...]
    loss: sympy.Expr
    derivatives: tuple[sympy.Expr, ...]
    stable_loss: sympy.Expr
    stable_derivatives: tuple[sympy.Expr, ...]
    loss_depth: int
    derivative_depth: int
    kink_args: tuple[sympy.Expr, ...]
    exponentials: tuple[sympy.Symbol, ...] = ()

    @property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """Every argument of the lowered functions: pred, label, params."""
        return self.pred + self.label + self.params

    def _lower(self, exprs: Sequence[sympy.Expr]) -> Callable[..., Any]:
        return sympy.lambdify(self.symbols, list(exprs), modules="mpmath", cse=True)  # type: ignore[no-any-return]

    @functools.cached_property
    def _stable_value(self) -> Callable[..., Any]:
        return self._lower([self.stable_loss])

    def _in_exponentials(self, e: sympy.Expr) -> sympy.Expr:
        """``e`` with e^z read from :attr:`exponentials` where there is one."""
        return e.xreplace({sympy.exp(z): x for z, x in zip(self.pred, self.exponentials)})

    @functools.cached_property
    def _stable_derivatives(self) -> Callable[..., Any]:
        return self._lower(self.stable_derivatives)

    def value_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [ℓ] (from the stable form)."""
        return list(self._stable_value(*args))

    def derivative_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [dℓ/dz_0, ...] (from the stable forms)."""
        return list(self._stable_derivatives(*args))

    def limits(self, values: Sequence[Fraction], slot: int, sign: int) -> tuple[Any, list[Any]]:
        """``(ℓ, [dℓ/dz_c ...])`` in the limit as prediction ``slot`` goes to ``sign``·∞, every
        other argument (in :attr:`symbols` order; the slot's own value is not read) at its
        exact value: SymPy's limits (:func:`limits_of`), as mpmath numbers, ±inf included,
        None where SymPy finds no limit."""
        return limits_of(self.loss, self.derivatives, self.symbols, tuple(values), slot, sign)

    def _cond(self, expr: sympy.Expr) -> sympy.Expr:
        # Σ_m |∂e/∂x_m|·|x_m| over every symbol: the first-order effect of perturbing
        # every input by one relative unit. DiracDelta (from d sign) is zero off the
        # kinks; at a kink the Clarke set is accepted instead.
        terms = []
        for s in self.symbols:
            g = sympy.diff(expr, s).replace(sympy.DiracDelta, lambda *a: sympy.S.Zero)
            if g != 0:  # unevaluated: SymPy would query the sign of every subexpression of g
                terms.append(sympy.Abs(g, evaluate=False) * sympy.Abs(s))
        return sympy.Add(*terms)

    @functools.cached_property
    def _loss_bound_exprs(self) -> list[sympy.Expr]:
        return [self._cond(self.loss), running_error(self.loss)]

    @functools.cached_property
    def _derivative_bound_exprs(self) -> list[sympy.Expr]:
        """[cond(h_c)...] + [running_error(h_c)...]."""
        hs = self.derivatives
        return [self._cond(h) for h in hs] + [running_error(h) for h in hs]

    @functools.cached_property
    def _loss_cond(self) -> Callable[..., Any]:
        return self._lower(self._loss_bound_exprs)

    def loss_cond_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [ℓ, Σ_m |∂ℓ/∂x_m|·|x_m|, running_error(ℓ)] (ℓ from the stable
        form; the bounds from the form implementations evaluate)."""
        return self.value_fn(*args) + list(self._loss_cond(*args))

    @functools.cached_property
    def _derivative_bounds(self) -> Callable[..., Any]:
        return self._lower(self._derivative_bound_exprs)

    def derivative_cond_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [Σ_m |∂h_c/∂x_m|·|x_m| for each h_c] + [running_error(h_c) for each h_c]."""
        return list(self._derivative_bounds(*args))

    @functools.cached_property
    def kink_fn(self) -> Callable[..., Any] | None:
        """mpmath: args -> the sign arguments (None if the loss has no kink)."""
        return self._lower(self.kink_args) if self.kink_args else None

    @functools.cached_property
    def clarke_fn(self) -> Callable[..., Any]:
        """mpmath: args -> derivatives with every sign() at 0 = -1, then with every sign() at 0 = +1
        (a sign() whose argument is not 0 keeps its value)."""
        return self._lower(self._clarke_exprs)

    @functools.cached_property
    def _clarke_exprs(self) -> list[sympy.Expr]:
        lo = [kink_side(h, -1) for h in self.derivatives]
        hi = [kink_side(h, 1) for h in self.derivatives]
        return lo + hi

    @functools.cached_property
    def second_derivatives(self) -> tuple[tuple[sympy.Expr, ...], ...]:
        """``d²ℓ/dz_c dz_k`` per row c and column k: one more SymPy differentiation of
        :attr:`derivatives` (DiracDelta, from d sign, is zero off the kinks; at a kink the
        second derivative does not exist)."""
        return tuple(tuple(_off_kinks(sympy.diff(h, z)) for z in self.pred) for h in self.derivatives)

    @functools.cached_property
    def _stable_second(self) -> Callable[..., Any]:
        # the same differentiation of the stable derivatives (the same functions, SymPy-checked)
        return self._lower([_off_kinks(sympy.diff(h, z)) for h in self.stable_derivatives for z in self.pred])

    def hessian_fn(self, *args: Any) -> list[list[Any]]:
        """mpmath: args -> the matrix ``d²ℓ/dz_c dz_k`` (classes x classes; 1 x 1 element-wise)."""
        flat, n = list(self._stable_second(*args)), self.classes
        return [flat[c * n:(c + 1) * n] for c in range(n)]

    # ---- the same functions on arrays of MPFR numbers (symjac.loss._numbers), one
    # array per symbol (``cols``), every element of a batch at once

    @functools.cached_property
    def _vec_value(self) -> Callable[..., list[Any]]:
        """The stable ℓ, e^z read from E where :attr:`_exponentials` has it (the
        exponential the derivative takes too, computed once per element: the lowered
        code is the same, each exp(z) replaced by E)."""
        return _numbers.lambdify(self.symbols + self.exponentials, [self._in_exponentials(self.stable_loss)])

    @functools.cached_property
    def _vec_derivatives(self) -> Callable[..., list[Any]]:
        return _numbers.lambdify(self.symbols + self.exponentials,
                                 [self._in_exponentials(h) for h in self.stable_derivatives])

    @functools.cached_property
    def _vec_loss_bounds(self) -> Callable[..., list[Any]]:
        return _numbers.lambdify(self.symbols, self._loss_bound_exprs)

    @functools.cached_property
    def _vec_derivative_bounds(self) -> Callable[..., list[Any]]:
        return _numbers.lambdify(self.symbols, self._derivative_bound_exprs)

    @functools.cached_property
    def _vec_kinks(self) -> Callable[..., list[Any]]:
        return _numbers.lambdify(self.symbols, list(self.kink_args))

    @functools.cached_property
    def _vec_clarke(self) -> Callable[..., list[Any]]:
        return _numbers.lambdify(self.symbols, self._clarke_exprs)

    def stable_at(self, cols: Sequence[np.ndarray], values: bool = True,
                  derivatives: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
        """ℓ of every element and dℓ/dz_c, shape (elements, classes) (from the stable
        forms; None for what was not asked)."""
        m = len(cols[0])
        exps = [_numbers.FUNCTIONS["exp"](z) for z in cols[:len(self.exponentials)]]
        ell = np.asarray(_full(self._vec_value(*cols, *exps)[0], m), dtype=object) if values else None
        if not derivatives:
            return ell, None
        return ell, np.stack([_full(h, m) for h in self._vec_derivatives(*cols, *exps)], axis=1)

    def loss_bounds_at(self, cols: Sequence[np.ndarray]) -> list[np.ndarray]:
        """[Σ_m |∂ℓ/∂x_m|·|x_m|, running_error(ℓ)] of every element."""
        return [_full(v, len(cols[0])) for v in self._vec_loss_bounds(*cols)]

    def derivative_bounds_at(self, cols: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(conditions, running errors) of every dℓ/dz_c, each shape (elements, classes)."""
        m, n = len(cols[0]), self.classes
        got = [_full(v, m) for v in self._vec_derivative_bounds(*cols)]
        return np.stack(got[:n], axis=1), np.stack(got[n:], axis=1)

    def kink_values(self, cols: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The sign() arguments of every element (one array per argument; none without a kink)."""
        return [_full(k, len(cols[0])) for k in self._vec_kinks(*cols)] if self.kink_args else []

    def at_kink(self, cols: Sequence[np.ndarray]) -> np.ndarray:
        """Per element: is some sign() argument exactly 0 (bool array)?"""
        at = np.zeros(len(cols[0]), dtype=bool)
        for k in self.kink_values(cols):
            at |= np.asarray(k == 0, dtype=bool)
        return at

    def clarke_corners(self, cols: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The derivatives with every kink at 0 on its -1 side, and on its +1 side, each (elements,
        classes), unsorted: at one kink the Clarke set is the segment between them."""
        got = [_full(v, len(cols[0])) for v in self._vec_clarke(*cols)]
        n = self.classes
        return np.stack(got[:n], axis=1), np.stack(got[n:], axis=1)

    def clarke_at(self, cols: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The Clarke set [lo, hi] of every dℓ/dz_c (hull over sign() = ±1), each (elements, classes)."""
        got = [_full(v, len(cols[0])) for v in self._vec_clarke(*cols)]
        n = self.classes
        a, b = np.stack(got[:n], axis=1), np.stack(got[n:], axis=1)
        return np.minimum(a, b), np.maximum(a, b)


#: |z| beyond every threshold a template compares with (any float's magnitude is below 2^1024).
_FAR = sympy.Integer(2) ** 2048


@functools.lru_cache(maxsize=1024)
def limits_of(loss: sympy.Expr, derivatives: tuple[sympy.Expr, ...], symbols: tuple[sympy.Symbol, ...],
              values: tuple[Fraction, ...], slot: int, sign: int) -> tuple[Any, list[Any]]:
    """:meth:`LossTemplate.limits` of any template's SymPy forms (cached per element's values).

    Every other symbol is replaced by its value, each Piecewise by the branch that holds for
    ``|z|`` beyond every threshold (``z = ±2^2048``: SymPy's limit of a Piecewise fails),
    then :func:`sympy.limit`.
    """
    z = symbols[slot]
    subs = {s: sympy.Rational(v.numerator, v.denominator) for i, (s, v) in enumerate(zip(symbols, values))
            if i != slot}
    far = _FAR if sign > 0 else -_FAR

    def branch(*pieces: Any) -> sympy.Expr:
        for value, cond in pieces:
            if cond == sympy.true or bool(cond.subs(z, far)):
                return value
        return sympy.nan  # pragma: no cover - SymPy's Piecewise ends with a True condition here

    def limit(e: sympy.Expr) -> Any:
        got = sympy.limit(e.subs(subs).replace(sympy.Piecewise, branch), z, sympy.oo if sign > 0 else -sympy.oo)
        if got in (sympy.oo, -sympy.oo):
            return mpmath.inf if got == sympy.oo else -mpmath.inf
        if not (got.is_number and got.is_real and got.is_finite):  # zoo, nan, AccumBounds: no limit
            return None
        with mpmath.workdps(DIGITS):  # the value keeps every digit after the context
            return mpmath.mpf(sympy.Float(sympy.N(got, DIGITS), DIGITS)._mpf_)

    return limit(loss), [limit(h) for h in derivatives]


def _off_kinks(e: sympy.Expr) -> sympy.Expr:
    return e.replace(sympy.DiracDelta, lambda *a: sympy.S.Zero)


def _full(value: Any, n: int) -> np.ndarray:
    """A lowered function's result as an object array of n elements (a constant broadcast)."""
    arr = np.asarray(value, dtype=object)
    return arr if arr.shape == (n,) else np.broadcast_to(arr, (n,)).copy()


def kink_side(e: sympy.Expr, s: int) -> sympy.Expr:
    """``e`` with each ``sign(a)`` at ``a = 0`` read as ``s`` (±1) and every other ``sign(a)`` kept: an
    element with several kinks (a class-axis hinge) keeps the side of those it is not at. Where
    ``a = 0``, ``sign(a)² = 0``, elsewhere 1, so ``sign(a) + s·(1 - sign(a)²)`` is s at the kink only."""
    return e.replace(sympy.sign, lambda a: sympy.sign(a) + s * (1 - sympy.sign(a) ** 2))


def positive_part(a: sympy.Expr) -> sympy.Expr:
    """``[a]₊ = max(0, a)`` written ``(a + |a|)/2``: its derivative ``(1 + sign(a))/2·da`` carries the
    kink as a ``sign`` (:attr:`LossTemplate.kink_args`), so at ``a = 0`` the Clarke set is the hull
    of both sides, ``[0, 1]·da``; the rounding model charges the one addition an implementation's
    ``max(0, a)`` does not make (a bound a little wider, never narrower)."""
    return (a + sympy.Abs(a)) / 2


def element_template(kind: str, pred: tuple[sympy.Symbol, ...], label: tuple[sympy.Symbol, ...],
                     params: tuple[sympy.Symbol, ...], loss: sympy.Expr, *, stable: sympy.Expr | None = None,
                     stable_derivatives: Callable[[tuple[sympy.Expr, ...]], tuple[sympy.Expr, ...]] | None = None,
                     exponentials: tuple[sympy.Symbol, ...] = ()) -> LossTemplate:
    """The template of the element loss ``loss``: SymPy differentiates it once per
    prediction symbol; ``stable`` (checked by SymPy to be the same function) and
    ``stable_derivatives`` (a rewriting of SymPy's derivatives) are the forms the exact
    values come from, the loss and its derivatives as written where not given."""
    derivatives = tuple(sympy.diff(loss, s) for s in pred)
    if stable is None:
        stable = loss
    elif sympy.simplify(loss - stable.rewrite(sympy.log)) != 0:
        raise AssertionError(f"stable form {stable} of {loss} is not the same function")
    kinks = tuple(dict.fromkeys(a.args[0] for h in derivatives for a in h.atoms(sympy.sign)))
    return LossTemplate(
        kind=kind,
        classes=len(pred),
        pred=pred,
        label=label,
        params=params,
        loss=loss,
        derivatives=derivatives,
        stable_loss=stable,
        stable_derivatives=derivatives if stable_derivatives is None else stable_derivatives(derivatives),
        loss_depth=_depth(loss),
        derivative_depth=max(_depth(h) for h in derivatives),
        kink_args=kinks,
        exponentials=exponentials,
    )
