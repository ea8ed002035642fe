"""Loss templates: the per-element SymPy loss, its derivative, and their rounding depth and running-error bounds."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sympy
from sympy.codegen.cfunctions import log1p

from symjac._errors import SpecError
from symjac.loss import _numbers

from symjac.loss._softmax import SoftmaxTemplate
from symjac.loss._spec import Loss, check_loss, _is_int

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
        return (sympy.Abs(sympy.diff(e, base)) * running_error(base) + sympy.Abs(sympy.diff(e, ex)) * running_error(ex)
                + _OP_COST_TRANSCENDENTAL * sympy.Abs(e))
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
      stable_loss / stable_derivatives: the same functions (checked by SymPy) written
        so that nothing cancels at any magnitude; the exact values are evaluated from
        these, the rounding bounds from ``loss`` and ``derivatives``.
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

    @property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """Every argument of the lowered functions: pred, label, params."""
        return self.pred + self.label + self.params

    def _lower(self, exprs: Sequence[sympy.Expr]) -> Callable[..., Any]:
        return sympy.lambdify(self.symbols, list(exprs), modules="mpmath", cse=True)  # type: ignore[no-any-return]

    @functools.cached_property
    def _stable_value(self) -> Callable[..., Any]:
        return self._lower([self.stable_loss])

    @functools.cached_property
    def _exponentials(self) -> tuple[sympy.Symbol, ...]:
        """Symbols E for e^z, which sigmoid_ce's stable loss and derivative take as
        arguments (computed once per element, not once per function); none for other kinds."""
        return (sympy.Symbol("E0", positive=True),) if self.kind == "sigmoid_ce" else ()

    def _in_exponentials(self, e: sympy.Expr) -> sympy.Expr:
        """``e`` with e^z read from :attr:`_exponentials` where there is one."""
        return e.xreplace({sympy.exp(z): x for z, x in zip(self.pred, self._exponentials)})

    @functools.cached_property
    def _stable_derivatives(self) -> Callable[..., Any]:
        return self._lower(self.stable_derivatives)

    def value_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [ℓ] (from the stable form)."""
        return list(self._stable_value(*args))

    def derivative_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [dℓ/dz_0, ...] (from the stable forms)."""
        return list(self._stable_derivatives(*args))

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
        """mpmath: args -> derivatives with every sign() = -1, then with every sign() = +1."""
        return self._lower(self._clarke_exprs)

    @functools.cached_property
    def _clarke_exprs(self) -> list[sympy.Expr]:
        lo = [h.replace(sympy.sign, lambda *a: sympy.S.NegativeOne) for h in self.derivatives]
        hi = [h.replace(sympy.sign, lambda *a: sympy.S.One) for h in self.derivatives]
        return lo + hi

    # ---- the same functions on arrays of MPFR numbers (symjac.loss._numbers), one
    # array per symbol (``cols``), every element of a batch at once

    @functools.cached_property
    def _vec_value(self) -> Callable[..., list[Any]]:
        """The stable ℓ, e^z read from E where :attr:`_exponentials` has it (the
        exponential the derivative takes too, computed once per element: the lowered
        code is the same, each exp(z) replaced by E)."""
        return _numbers.lambdify(self.symbols + self._exponentials, [self._in_exponentials(self.stable_loss)])

    @functools.cached_property
    def _vec_derivatives(self) -> Callable[..., list[Any]]:
        return _numbers.lambdify(self.symbols + self._exponentials,
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
        exps = [_numbers.FUNCTIONS["exp"](z) for z in cols[:len(self._exponentials)]]
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

    def clarke_at(self, cols: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The Clarke set [lo, hi] of every dℓ/dz_c (hull over sign() = ±1), each (elements, classes)."""
        got = [_full(v, len(cols[0])) for v in self._vec_clarke(*cols)]
        n = self.classes
        a, b = np.stack(got[:n], axis=1), np.stack(got[n:], axis=1)
        return np.minimum(a, b), np.maximum(a, b)


def _full(value: Any, n: int) -> np.ndarray:
    """A lowered function's result as an object array of n elements (a constant broadcast)."""
    arr = np.asarray(value, dtype=object)
    return arr if arr.shape == (n,) else np.broadcast_to(arr, (n,)).copy()


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
        a = [((1 - eps) * t[c] + eps / classes) * w[c] for c in range(classes)]
        loss = -sympy.Add(*(a[c] * (z[c] - lse) for c in range(classes)))
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
            # function, written without 1 - σ (the form implementations evaluate, so the
            # running-error bounds model it).
            softplus = sympy.log(1 + sympy.exp(-zz))
            loss = w * (p * y * softplus + (1 - y) * (zz + softplus))
            # For the exact values: log1p(e^-z) and log1p(e^z), where nothing cancels at
            # any |z| and log1p keeps e^-|z| when tiny, so mpmath needs no extra digits.
            stable = w * (p * y * log1p(sympy.exp(-zz)) + (1 - y) * log1p(sympy.exp(zz)))
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
    stable_derivatives = derivatives
    if kind == "sigmoid_ce":
        if sympy.simplify(loss - stable.rewrite(sympy.log)) != 0:
            raise AssertionError(f"stable form {stable} of {loss} is not the same function")
        # SymPy's derivative over one denominator, w(-p·y + (1 - y)e^z)/(e^z + 1): the
        # 1 - e^-z/(1 + e^-z) of the raw form would cancel ~|z|·log10(e) digits.
        stable_derivatives = tuple(sympy.together(h) for h in derivatives)
    else:  # evaluated as written (softmax_ce: symjac.loss._softmax evaluates its stable forms)
        stable = loss
    kinks = tuple(dict.fromkeys(a.args[0] for h in derivatives for a in h.atoms(sympy.sign)))
    return LossTemplate(
        kind=kind,
        classes=classes,
        pred=pred,
        label=label,
        params=params,
        loss=loss,
        derivatives=derivatives,
        stable_loss=stable,
        stable_derivatives=stable_derivatives,
        loss_depth=_depth(loss),
        derivative_depth=max(_depth(h) for h in derivatives),
        kink_args=kinks,
    )


#: What :func:`loss_template` gives: softmax_ce's is class-generic (symjac.loss._softmax).
Template = LossTemplate | SoftmaxTemplate


@functools.lru_cache(maxsize=64)
def _softmax_template(classes: int) -> SoftmaxTemplate:
    return SoftmaxTemplate(classes)


def loss_template(loss: Loss, classes: int = 1) -> Template:
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
    if loss.kind == "softmax_ce":
        return _softmax_template(int(classes))
    return _template(loss.kind, int(classes), bool(loss.log_input), bool(loss.log_target))

