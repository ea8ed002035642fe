"""Loss templates: the per-element SymPy loss, its derivative, and their rounding depth and running-error bounds."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import mpmath
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
      derivative_sources: per class j, a class k whose stable derivative, with classes
        k and j swapped, is class j's (k = j: its own). Only the sources are lowered.
      class_weights: softmax_ce's ``a_c = ((1 - ε)·t_c + ε/C)·w_c``, the weight of
        ``log softmax_c`` in ℓ (the stable derivatives are built from them); else ().
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
    derivative_sources: tuple[int, ...] = (0,)
    class_weights: tuple[sympy.Expr, ...] = ()

    @property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """Every argument of the lowered functions: pred, label, params."""
        return self.pred + self.label + self.params

    def _lower(self, exprs: Sequence[sympy.Expr]) -> Callable[..., Any]:
        return sympy.lambdify(self.symbols, list(exprs), modules="mpmath", cse=True)  # type: ignore[no-any-return]

    def _shifted(self, args: Sequence[Any]) -> tuple[list[Any], list[int]]:
        """The arguments the stable forms take, and the class order they are in.

        softmax_ce's stable forms assume class 0 holds the largest logit and that it
        is 0: the classes (z, t, w together; ℓ is symmetric under that) are reordered
        so the argmax comes first, and every logit is shifted by it *exactly*
        (``mpmath.fsub(..., exact=True)``: z_c - max z of two doubles may need more
        bits than the working precision, and exp of a rounded 1e300-sized difference
        would be wrong in every digit). Other kinds: unchanged.
        """
        n = self.classes
        if self.kind != "softmax_ce":
            return list(args), [0]
        z = list(args[:n])
        k = max(range(n), key=lambda c: z[c])
        order = [k] + [c for c in range(n) if c != k]
        top = z[k]
        shifted = [mpmath.fsub(z[c], top, exact=True) for c in order]
        t, w = args[n:2 * n], args[2 * n:3 * n]
        return shifted + [t[c] for c in order] + [w[c] for c in order] + list(args[3 * n:]), order

    def _lower_stable(self, exprs: Sequence[sympy.Expr]) -> Callable[..., Any]:
        if self.kind == "softmax_ce":
            # _shifted passes z_0 = 0 and z_c - max z exactly: with z_0 written as 0 the
            # lowered code forms no z_c - z_0, which would round at the working precision
            exprs = [e.subs(self.pred[0], 0) for e in exprs]
        return self._lower(exprs)

    @functools.cached_property
    def _stable_value(self) -> Callable[..., Any]:
        return self._lower_stable([self.stable_loss])

    @functools.cached_property
    def _sources(self) -> list[int]:
        """The classes whose stable derivatives are lowered (see ``derivative_sources``)."""
        return sorted(set(self.derivative_sources))

    @functools.cached_property
    def _exponentials(self) -> tuple[sympy.Symbol, ...]:
        """Symbols E_c for e^{z_c}, which the stable loss and derivatives take as arguments
        (computed once per element, not once per class and function): softmax_ce's
        (e^{z_c - z_0} once the logits are shifted), sigmoid_ce's (e^z); none for other kinds."""
        return tuple(sympy.Symbol(f"E{c}", positive=True) for c in range(self.classes)) \
            if self.kind in ("softmax_ce", "sigmoid_ce") else ()

    def _derivative_source_exprs(self) -> dict[int, sympy.Expr]:
        """The lowered sources' stable derivatives, in E_c where :attr:`_exponentials` has
        them (softmax_ce's with z_0 = 0)."""
        out = {}
        for k in self._sources:
            h = self.stable_derivatives[k]
            if self.kind == "softmax_ce":
                h = h.subs(self.pred[0], 0)
            if self._exponentials:
                h = h.xreplace({sympy.exp(z): e for z, e in zip(self.pred, self._exponentials)})
            out[k] = h
        return out

    @functools.cached_property
    def _stable_derivatives(self) -> dict[int, Callable[..., Any]]:
        symbols = self.symbols + self._exponentials
        return {k: sympy.lambdify(symbols, [h], modules="mpmath", cse=True)
                for k, h in self._derivative_source_exprs().items()}

    def _by_class(self, fns: dict[int, Callable[..., Any]], args: Sequence[Any]) -> list[Any]:
        """Each class's stable derivative from the lowered sources (one function each), at
        args with the source's class and the class swapped."""
        return [fns[k](*(args if k == j else self._swapped(args, k, j)))[0]
                for j, k in enumerate(self.derivative_sources)]

    def _swapped(self, args: Sequence[Any], i: int, j: int) -> list[Any]:
        """args with classes i and j exchanged (logit, label, weight blocks, and the
        exponentials E_c where given)."""
        n, a = self.classes, list(args)
        for block in (0, n, 2 * n) + ((3 * n + 1,) if len(args) > 3 * n + 1 else ()):
            a[block + i], a[block + j] = args[block + j], args[block + i]
        return a

    def value_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [ℓ] (from the stable form)."""
        shifted, _ = self._shifted(args)
        return list(self._stable_value(*shifted))

    def derivative_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [dℓ/dz_0, ...] (from the stable forms, in the caller's class order)."""
        shifted, order = self._shifted(args)
        exps = [mpmath.exp(x) for x in shifted[:len(self._exponentials)]]
        hs = self._by_class(self._stable_derivatives, shifted + exps)
        out = [hs[0]] * len(order)
        for pos, c in enumerate(order):
            out[c] = hs[pos]
        return out

    def _cond(self, expr: sympy.Expr, symbols: Sequence[sympy.Symbol] | None = None,
              diffs: dict[sympy.Symbol, sympy.Expr] | None = None) -> sympy.Expr:
        # Σ_m |∂e/∂x_m|·|x_m| (over every symbol unless given; ∂e/∂x_m from diffs where
        # given): the first-order effect of perturbing every input by one relative unit.
        # DiracDelta (from d sign) is zero off the kinks; at a kink the Clarke set is
        # accepted instead.
        terms = []
        for s in self.symbols if symbols is None else symbols:
            g = (sympy.diff(expr, s) if diffs is None else diffs[s]).replace(sympy.DiracDelta, lambda *a: sympy.S.Zero)
            if g != 0:  # unevaluated: SymPy would query the sign of every subexpression of g
                terms.append(sympy.Abs(g, evaluate=False) * sympy.Abs(s))
        return sympy.Add(*terms)

    @functools.cached_property
    def _loss_cond_expr(self) -> sympy.Expr:
        """``Σ_m |∂ℓ/∂x_m|·|x_m|``, as :meth:`_cond` builds it, differentiating less.

        softmax_ce's ℓ is the same SymPy expression with classes 0 and c swapped (z_c,
        t_c, w_c together; checked), so ∂ℓ/∂z_c is ∂ℓ/∂z_0 with 0 and c swapped, and
        likewise for t_c and w_c: 4 differentiations (class 0 and ε), not 3C + 1.
        (tests/test_cliffs.py checks the result equals the direct build.)
        """
        if self.kind != "softmax_ce":
            return self._cond(self.loss)
        first = (self.pred[0], self.label[0], self.params[0])
        own = {x: sympy.diff(self.loss, x) for x in first}
        diffs = {self.params[-1]: sympy.diff(self.loss, self.params[-1])}
        for c, swap in enumerate(self._class_swaps()):
            if c and self.loss.xreplace(swap) != self.loss:  # pragma: no cover - SymPy's canonical form
                return self._cond(self.loss)
            diffs.update({swap[x]: g.xreplace(swap) for x, g in own.items()})
        return self._cond(self.loss, diffs=diffs)

    @functools.cached_property
    def _loss_cond(self) -> Callable[..., Any]:
        return self._lower([self._loss_cond_expr, running_error(self.loss)])

    def loss_cond_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [ℓ, Σ_m |∂ℓ/∂x_m|·|x_m|, running_error(ℓ)] (ℓ from the stable
        form; the bounds from the form implementations evaluate)."""
        return self.value_fn(*args) + list(self._loss_cond(*args))

    def _class_swaps(self) -> list[dict[sympy.Symbol, sympy.Symbol]]:
        """Per class j, the symbols of classes 0 and j swapped (z, t and w together)."""
        n = self.classes
        return [_swap(self.pred, self.label, self.params[:n], 0, j) for j in range(n)]

    @functools.cached_property
    def _bound_derivatives(self) -> tuple[sympy.Expr, ...]:
        """The derivatives the bound functions are built from: softmax_ce's class 0 only.

        softmax_ce is symmetric under permuting the classes (z_c, t_c, w_c together):
        SymPy's dℓ/dz_j is dℓ/dz_0 with classes 0 and j swapped (checked here), so class
        j's condition sum and running error are class 0's at the swapped arguments.
        """
        if self.kind != "softmax_ce":
            return self.derivatives
        for j, swap in enumerate(self._class_swaps()):
            if self.derivatives[0].xreplace(swap) != self.derivatives[j]:  # pragma: no cover - SymPy's canonical form
                raise AssertionError(f"dℓ/dz_{j} is not dℓ/dz_0 with classes 0 and {j} swapped")
        return self.derivatives[:1]

    @functools.cached_property
    def _derivative_bound_exprs(self) -> list[list[sympy.Expr]]:
        """The derivative bound's SymPy forms, in groups lowered together.

        Other kinds: one group, [cond(h_c)..., running_error(h_c)...]. softmax_ce, built
        for class 0 only (see :attr:`_bound_derivatives`): [the terms of cond(h_0) from
        class 0 and ε, running_error(h_0)] and [the terms from class 1]; h_0 is the same
        expression with classes 1 and m swapped (checked), so the terms from class m are
        class 1's at swapped arguments. Each form is then O(C) in size, not O(C²).
        """
        hs = self._bound_derivatives
        if self.kind != "softmax_ce":
            return [[self._cond(h) for h in hs] + [running_error(h) for h in hs]]
        h0, n = hs[0], self.classes
        symmetric = all(h0.xreplace(_swap(self.pred, self.label, self.params[:n], 1, m)) == h0 for m in range(2, n))
        own = [self.pred[0], self.label[0], self.params[0], self.params[-1]]
        if n == 1 or not symmetric:  # pragma: no cover - SymPy's canonical form makes the swap exact
            return [[self._cond(h0), running_error(h0)]]
        return [[self._cond(h0, own), running_error(h0)], [self._cond(h0, [self.pred[1], self.label[1], self.params[1]])]]

    def _derivative_bounds_from(self, fns: list[Callable[..., Any]], args: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """(cond, running error) of each class's derivative from the lowered groups of
        :attr:`_derivative_bound_exprs`, at args (mpmath numbers or MPFR columns)."""
        if self.kind != "softmax_ce":
            got = list(fns[0](*args))
            return got[:self.classes], got[self.classes:]
        conds, runs = [], []
        for j in range(self.classes):
            a = self._swapped(args, 0, j)
            cond, run = fns[0](*a)
            for m in range(1, self.classes) if len(fns) > 1 else []:
                cond = cond + fns[1](*self._swapped(a, 1, m))[0]
            conds.append(cond)
            runs.append(run)
        return conds, runs

    @functools.cached_property
    def _derivative_bounds(self) -> list[Callable[..., Any]]:
        return [self._lower(group) for group in self._derivative_bound_exprs]

    def derivative_cond_fn(self, *args: Any) -> list[Any]:
        """mpmath: args -> [Σ_m |∂h_c/∂x_m|·|x_m| for each h_c] + [running_error(h_c) for each h_c]."""
        conds, runs = self._derivative_bounds_from(self._derivative_bounds, args)
        return conds + runs

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


    # ---- the same functions on arrays of MPFR numbers (symjac.loss._numbers), one
    # array per symbol (``cols``), every element of a batch at once

    def _value_expr(self) -> sympy.Expr:
        """The stable ℓ as lowered for arrays: softmax_ce's with z_0 = 0, and e^{z_c} read
        from E_c where :attr:`_exponentials` has them (the exponentials the derivatives
        take too, computed once per element: the lowered code is the same, each
        exp(z_c) replaced by E_c)."""
        ell = self._stable_exprs([self.stable_loss])[0]
        return ell.xreplace({sympy.exp(z): e for z, e in zip(self.pred, self._exponentials)})

    @functools.cached_property
    def _vec_value(self) -> Callable[..., list[Any]]:
        return _numbers.lambdify(self.symbols + self._exponentials, [self._value_expr()])

    @functools.cached_property
    def _vec_derivatives(self) -> dict[int, Callable[..., list[Any]]]:
        symbols = self.symbols + self._exponentials
        return {k: _numbers.lambdify(symbols, [h]) for k, h in self._derivative_source_exprs().items()}

    @functools.cached_property
    def _softmax_parts(self) -> tuple[Callable[..., list[Any]], Callable[..., list[Any]],
                                      dict[int, Callable[..., list[Any]]]]:
        """softmax_ce's stable derivatives on arrays, from parts formed once per element:
        ``a_c`` (``class_weights``; one lowered ``a_0``, called per class),
        ``D = 1 + Σ_{c>0} E_c``, and per source class k the numerator over D in symbols
        A_c, E_c, D: ``Σ_{c≠k} (A_c·E_k - A_k·E_c) / D`` (E_0 = 1). Checked: with a_c
        and D put back it is the source's stable derivative (:meth:`_derivative_source_exprs`).
        Per class that is ~2C multiplications and 2C additions; the stable forms
        themselves form every a_c and D again for every class.
        """
        n, t0, w0, eps = self.classes, self.label[0], self.params[0], self.params[-1]
        amps = tuple(sympy.Symbol(f"A{c}", real=True) for c in range(n))
        den = sympy.Symbol("D", positive=True)
        e = (sympy.S.One,) + self._exponentials[1:]
        back = {**dict(zip(amps, self.class_weights)), den: 1 + sympy.Add(*e[1:])}
        sources = self._derivative_source_exprs()
        forms = {}
        for k, h in sources.items():
            form = sympy.Add(*(amps[c] * e[k] - amps[k] * e[c] for c in range(n) if c != k)) / den
            if form.xreplace(back) != h:  # pragma: no cover - built from the same a_c and e_c
                raise AssertionError(f"softmax_ce derivative {form} is not {h} with a_c and D put back")
            forms[k] = _numbers.lambdify(self._exponentials + amps + (den,), [form])
        weight = _numbers.lambdify((t0, w0, eps), [self.class_weights[0]])
        return weight, _numbers.lambdify(self._exponentials, [back[den]]), forms

    def _softmax_derivatives_at(self, shifted: Sequence[np.ndarray], exps: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Each class's dℓ/dz_c at shifted columns (class 0 the largest logit) from
        :attr:`_softmax_parts`, in the shifted class order."""
        n, m = self.classes, len(shifted[0])
        weight, denominator, forms = self._softmax_parts
        amps = [_full(weight(shifted[n + c], shifted[2 * n + c], shifted[3 * n])[0], m) for c in range(n)]
        args = list(exps) + amps + [_full(denominator(*exps)[0], m)]

        def swapped(k: int, j: int) -> list[Any]:
            a = list(args)
            for block in (0, n):  # E and A of classes k and j exchanged
                a[block + k], a[block + j] = args[block + j], args[block + k]
            return a

        return [forms[k](*(args if k == j else swapped(k, j)))[0] for j, k in enumerate(self.derivative_sources)]

    @functools.cached_property
    def _vec_loss_bounds(self) -> Callable[..., list[Any]]:
        return _numbers.lambdify(self.symbols, [self._loss_cond_expr, running_error(self.loss)])

    @functools.cached_property
    def _vec_derivative_bounds(self) -> list[Callable[..., list[Any]]]:
        return [_numbers.lambdify(self.symbols, group) for group in self._derivative_bound_exprs]

    @functools.cached_property
    def _vec_kinks(self) -> Callable[..., list[Any]]:
        return _numbers.lambdify(self.symbols, list(self.kink_args))

    @functools.cached_property
    def _vec_clarke(self) -> Callable[..., list[Any]]:
        lo = [h.replace(sympy.sign, lambda *a: sympy.S.NegativeOne) for h in self.derivatives]
        hi = [h.replace(sympy.sign, lambda *a: sympy.S.One) for h in self.derivatives]
        return _numbers.lambdify(self.symbols, lo + hi)

    def _stable_exprs(self, exprs: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        # _shifted_columns passes z_0 = 0 exactly (see _lower_stable)
        return [e.subs(self.pred[0], 0) for e in exprs] if self.kind == "softmax_ce" else list(exprs)

    def _shifted_columns(self, cols: Sequence[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
        """:meth:`_shifted` on whole columns: per row, the classes reordered so the
        largest logit comes first, every logit minus it (exact: the subtraction runs at
        enough bits for any two inputs below ``_numbers.LIMIT``), and the order."""
        n = self.classes
        if self.kind != "softmax_ce":
            return list(cols), np.zeros((len(cols[0]), 1), dtype=np.intp)
        z = np.stack(cols[:n], axis=1)
        top = np.argmax(z, axis=1)
        classes = np.arange(n)
        order = np.argsort(np.where(classes == top[:, None], -1, classes), axis=1, kind="stable")

        def take(block: Sequence[np.ndarray]) -> np.ndarray:
            return np.take_along_axis(np.stack(block, axis=1), order, axis=1)

        zs = take(cols[:n])
        with _numbers.exact_context():
            shifted = zs - zs[:, :1]
        t, w = take(cols[n:2 * n]), take(cols[2 * n:3 * n])
        out = [shifted[:, c] for c in range(n)] + [t[:, c] for c in range(n)] + [w[:, c] for c in range(n)]
        return out + list(cols[3 * n:]), order

    def stable_at(self, cols: Sequence[np.ndarray], values: bool = True,
                  derivatives: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
        """ℓ of every element and dℓ/dz_c, shape (elements, classes), in the caller's
        class order (from the stable forms; None for what was not asked)."""
        shifted, order = self._shifted_columns(cols)
        exps = [_numbers.FUNCTIONS["exp"](z) for z in shifted[:len(self._exponentials)]]
        ell = np.asarray(_full(self._vec_value(*shifted, *exps)[0], len(cols[0])), dtype=object) if values else None
        if not derivatives:
            return ell, None
        by_class = self._softmax_derivatives_at(shifted, exps) if self.kind == "softmax_ce" else \
            self._by_class(self._vec_derivatives, shifted + exps)
        hs = np.stack([_full(h, len(cols[0])) for h in by_class], axis=1)
        out = np.empty_like(hs)
        np.put_along_axis(out, order, hs, axis=1)
        return ell, out

    def loss_bounds_at(self, cols: Sequence[np.ndarray]) -> list[np.ndarray]:
        """[Σ_m |∂ℓ/∂x_m|·|x_m|, running_error(ℓ)] of every element."""
        return [_full(v, len(cols[0])) for v in self._vec_loss_bounds(*cols)]

    def derivative_bounds_at(self, cols: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(conditions, running errors) of every dℓ/dz_c, each shape (elements, classes)."""
        m = len(cols[0])
        conds, runs = self._derivative_bounds_from(self._vec_derivative_bounds, cols)
        return np.stack([_full(c, m) for c in conds], axis=1), np.stack([_full(r, m) for r in runs], axis=1)

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
        stable, stable_softmax = _stable_softmax_ce(z, a, loss)
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
    derivatives = _symmetric_derivatives(loss, z, t, w) if kind == "softmax_ce" else tuple(
        sympy.diff(loss, s) for s in pred)
    stable_derivatives = derivatives
    sources = tuple(range(len(pred)))
    if kind == "softmax_ce":
        sources = _check_softmax_derivatives(z, t, w, derivatives, stable_softmax)
        stable_derivatives = stable_softmax
    elif kind == "sigmoid_ce":
        if sympy.simplify(loss - stable.rewrite(sympy.log)) != 0:
            raise AssertionError(f"stable form {stable} of {loss} is not the same function")
        # SymPy's derivative over one denominator, w(-p·y + (1 - y)e^z)/(e^z + 1): the
        # 1 - e^-z/(1 + e^-z) of the raw form would cancel ~|z|·log10(e) digits.
        stable_derivatives = tuple(sympy.together(h) for h in derivatives)
    elif kind != "softmax_ce":
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
        derivative_sources=sources,
        class_weights=tuple(a) if kind == "softmax_ce" else (),
    )


def _swap(z: Sequence[sympy.Symbol], t: Sequence[sympy.Symbol], w: Sequence[sympy.Symbol], i: int,
          j: int) -> dict[sympy.Symbol, sympy.Symbol]:
    """The symbols of classes i and j exchanged (logit, label and weight together)."""
    return {z[i]: z[j], z[j]: z[i], t[i]: t[j], t[j]: t[i], w[i]: w[j], w[j]: w[i]}


def _symmetric_derivatives(loss: sympy.Expr, z: Sequence[sympy.Symbol], t: Sequence[sympy.Symbol],
                           w: Sequence[sympy.Symbol]) -> tuple[sympy.Expr, ...]:
    """softmax_ce's dℓ/dz_j for every class, differentiating once.

    ℓ is the same SymPy expression with classes 0 and j swapped (checked: SymPy's
    canonical forms make it an exact comparison), so dℓ/dz_j is dℓ/dz_0 with 0 and j
    swapped; a class for which the check fails is differentiated itself. That keeps
    the SymPy work O(C²) where C differentiations of an O(C) expression cost O(C³).
    """
    h0 = sympy.diff(loss, z[0])
    out = [h0]
    for j in range(1, len(z)):
        swap = _swap(z, t, w, 0, j)
        out.append(h0.xreplace(swap) if loss.xreplace(swap) == loss else sympy.diff(loss, z[j]))
    return tuple(out)


def _in_exponentials(z: Sequence[sympy.Symbol]) -> tuple[tuple[sympy.Symbol, ...], Callable[[sympy.Expr], sympy.Expr]]:
    """Positive symbols p_c for e^{z_c}, and a map writing an expression in which z
    appears only inside e^{z_c} and e^{z_c - z_0} as a rational function of them."""
    p = tuple(sympy.Symbol(f"p{c}", positive=True) for c in range(len(z)))
    rep = {sympy.exp(zc): pc for zc, pc in zip(z, p)}
    rep.update({sympy.exp(zc - z[0]): pc / p[0] for zc, pc in zip(z[1:], p[1:])})

    def to_p(e: sympy.Expr) -> sympy.Expr:
        return e.xreplace(rep)

    return p, to_p


def _is_zero(rational: sympy.Expr) -> bool:
    """A rational function is identically 0 iff its numerator over one denominator expands to 0."""
    return bool(sympy.expand(sympy.numer(sympy.together(rational))) == 0)


def _stable_softmax_ce(z: Sequence[sympy.Symbol], a: Sequence[sympy.Expr],
                       loss: sympy.Expr) -> tuple[sympy.Expr, tuple[sympy.Expr, ...]]:
    """softmax_ce written for class 0 holding the largest logit (the evaluator reorders
    the classes so it does, and shifts by it: see :meth:`LossTemplate._shifted`).

    With E_c = e^{z_c - z_0} <= 1 (E_0 = 1) and S = Σ_{c>0} E_c:
    ``lse = z_0 + log1p(S)``, so ``ℓ = -Σ_c a_c·((z_c - z_0) - log1p(S))``: every term
    has one sign, and log1p keeps S when it is below the working precision. The
    derivative ``W·softmax_j - a_j`` (W = Σ a_c) over the one denominator 1 + S is
    ``Σ_{c≠j} (a_c·E_j - a_j·E_c) / (1 + S)``: the c = j terms, which cancel
    (softmax_j - 1 near p_j = 1 cancels ~|z|·log10(e) digits), are taken out before
    anything is evaluated. Both are checked equal to the SymPy forms (``loss`` here,
    the derivatives in :func:`_check_softmax_derivatives`).
    """
    n = len(z)
    e = [sympy.exp(z[c] - z[0]) for c in range(n)]
    s = sympy.Add(*e[1:])
    lse = z[0] + log1p(s)
    stable = -sympy.Add(*(a[c] * ((z[c] - z[0]) - log1p(s)) for c in range(n)))
    # ℓ is linear in lse: the same function iff e^{z_0}·(1 + S) = Σ e^{z_c} (in p_c = e^{z_c}).
    lse_sym = sympy.Symbol("lse")
    p, to_p = _in_exponentials(z)
    ell = -sympy.Add(*(a[c] * (z[c] - lse_sym) for c in range(n)))
    if (sympy.expand(ell.subs(lse_sym, lse) - stable) != 0
            or not _is_zero(p[0] * (1 + to_p(s)) - sympy.Add(*p))
            or sympy.expand(loss - ell.subs(lse_sym, sympy.log(sympy.Add(*(sympy.exp(zc) for zc in z))))) != 0):
        raise AssertionError(f"stable softmax_ce form {stable} is not the same function as {loss}")
    derivatives = tuple(
        sympy.Add(*(a[c] * e[j] - a[j] * e[c] for c in range(n) if c != j)) / (1 + s) for j in range(n))
    return stable, derivatives


def _check_softmax_derivatives(z: Sequence[sympy.Symbol], t: Sequence[sympy.Symbol], w: Sequence[sympy.Symbol],
                               derivatives: Sequence[sympy.Expr], stable: Sequence[sympy.Expr]) -> tuple[int, ...]:
    """Each stable derivative equals SymPy's: both are rational in e^{z_c} (z appears only
    inside exp), so their difference cancels to 0 as a rational function of p_c = e^{z_c}.

    That cancellation costs more the more classes there are, and classes 1..C-1 are
    symmetric (the stable forms single out class 0 only): it is run for classes 0 and
    1, and class j >= 2 is checked to be class 1's pair of expressions with classes 1
    and j swapped (z, t and w together), which SymPy's canonical forms make an exact
    comparison; a pair that is not is checked by cancellation too.

    Returns, per class, the class its stable derivative is a swap of (itself if none).
    """
    _p, to_p = _in_exponentials(z)
    sources = []
    for j, (h, hs) in enumerate(zip(derivatives, stable)):
        if j >= 2:
            swap = _swap(z, t, w, 1, j)
            if derivatives[1].xreplace(swap) == h and stable[1].xreplace(swap) == hs:
                sources.append(1)
                continue
        if not _is_zero(to_p(h) - to_p(hs)):
            raise AssertionError(f"stable softmax_ce derivative {hs} is not {h}")
        sources.append(j)
    return tuple(sources)


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

