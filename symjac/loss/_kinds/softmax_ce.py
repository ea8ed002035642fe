"""softmax_ce: cross-entropy over the last axis from logits (PyTorch ``cross_entropy``, both target forms).

One loss element per row; the label is a row of probabilities of pred's shape, or
(``labels="indices"``) one integer class per row. Evaluated class-generically
(:class:`symjac.loss._softmax.SoftmaxTemplate`); the explicit per-class SymPy template
here is for display and is what the class-generic forms are tested against.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import mpmath
import numpy as np
import sympy

from symjac._errors import SpecError, did_you_mean
from symjac._exact import ExactArray
from symjac.loss import _fast
from symjac.loss._domain import Convention, overflow_logit, per_class, probability_labels
from symjac.loss._fields import is_int, number
from symjac.loss._kind import LossKind, Put, Template, real, register
from symjac.loss._softmax import SoftmaxTemplate
from symjac.loss._templates import DIGITS, LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

LABEL_FORMS = ("probabilities", "indices")


@functools.lru_cache(maxsize=64)
def explicit_template(classes: int) -> LossTemplate:
    """``ℓ = -Σ_c a_c·(z_c - log Σ_k e^{z_k})``, ``a_c = ((1 - ε)·t_c + ε/C)·w_c``, one
    symbol per class (O(C²) SymPy work: for display and tests)."""
    z = tuple(real(f"z{c}") for c in range(classes))
    t = tuple(real(f"t{c}") for c in range(classes))
    w = tuple(real(f"w{c}") for c in range(classes))
    eps = real("epsilon")
    lse = sympy.log(sympy.Add(*(sympy.exp(zc) for zc in z)))
    a = [((1 - eps) * t[c] + eps / classes) * w[c] for c in range(classes)]
    loss = -sympy.Add(*(a[c] * (z[c] - lse) for c in range(classes)))
    return element_template("softmax_ce", z, t, w + (eps,), loss)


@functools.lru_cache(maxsize=64)
def _generic(classes: int) -> SoftmaxTemplate:
    return SoftmaxTemplate(classes, explicit_template)


@register
class SoftmaxCe(LossKind):
    """``ℓ = -Σ_c t̃_c·w_c·log softmax(z)_c``, ``t̃ = (1-ε)·t + ε/C`` (see :class:`symjac.Loss`)."""

    name = "softmax_ce"
    options = ("weight", "label_smoothing", "ignore_index", "labels")
    synonyms = ("cross_entropy", "crossentropy", "ce", "categorical_crossentropy", "sparse_categorical_crossentropy",
                "softmax_cross_entropy")
    class_axis = True
    explain_classes = 2
    samples = ({}, {"labels": "indices"}, {"weight": (1, 0.5, 2), "label_smoothing": 0.25},
               {"labels": "indices", "weight": (1, 0.5, 2), "label_smoothing": 0.125, "ignore_index": 0})

    def validate(self, loss: Loss, put: Put) -> None:
        eps = number("label_smoothing", 0 if loss.label_smoothing is None else loss.label_smoothing,
                     "a number in [0, 1]")
        if not 0 <= eps <= 1:
            raise SpecError(f"label_smoothing={loss.label_smoothing!r} is not valid: give a number in [0, 1]")
        put("label_smoothing", eps)
        labels = "probabilities" if loss.labels is None else loss.labels
        if labels not in LABEL_FORMS:
            raise SpecError(
                f"labels={loss.labels!r} is not valid{did_you_mean(labels, LABEL_FORMS)}: give one of "
                f"{', '.join(map(repr, LABEL_FORMS))}"
            )
        put("labels", labels)
        if loss.ignore_index is not None:
            if not is_int(loss.ignore_index):
                raise SpecError(f"ignore_index={loss.ignore_index!r} is not valid: give an integer class index")
            if labels != "indices":
                raise SpecError(
                    f"ignore_index={loss.ignore_index!r} needs labels='indices' (class indices); "
                    "probability labels have no index to ignore"
                )
            put("ignore_index", int(loss.ignore_index))

    def labels_are_indices(self, loss: Loss) -> bool:
        return loss.labels == LABEL_FORMS[1]

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        if not self.labels_are_indices(loss):  # one-hot rows from indices are in [0, 1] by construction
            probability_labels(self.name, t)

    def fast_derivative(self, loss: Loss, z: np.ndarray, y: np.ndarray | None,
                        column: np.ndarray | None = None) -> _fast.FastDerivative | None:
        # h_j = W·p_j - a_j, a = ((1 - ε)t + ε/C)·w, W = Σ a (symjac.loss._softmax: (E_j·W_{-j}
        # - a_j·D_{-j})/D); t the probability rows, or one-hot rows of the class indices (a
        # row at ignore_index: t = 0, and its reduction factor 0). The bound's terms are
        # symjac.loss._softmax's closed forms (_derivative_condition,
        # _derivative_running_error), with q_j = 1 - p_j and X_{-j} = Σ_{k≠j} X_k:
        #   cond = W·p_j·(q_j|z_j| + (p|z|)_{-j}) + |1 - ε|·(p_j·|wt|_{-j} + q_j·|w_j t_j|)
        #          + p_j·|a|_{-j} + q_j·|a_j| + |ε|·|p_j·Σ_k o_k - o_j|,  o = w/C - t·w,
        #   run  = ((C + 6)p_j + 1)|a_j| + (R_j|w_j| + (C + 1)|a_j|)q_j
        #          + p_j·((R|w|)_{-j} + (2C + 6)|a|_{-j}),  R = ρ·ε/C + |t|(1 + ε + 2|1 - ε|),
        # ρ = 1 for a power-of-two C, else 3. Every term is >= 0 (t, w >= 0, ε in [0, 1]);
        # the last condition term is bounded above by |ε|·(p_j·Σ|o| + |o_j|), left out below.
        if z.ndim != 2 or not 2 <= z.shape[1] <= 2**10:
            return None
        assert y is not None
        with np.errstate(all="ignore"):  # inf and NaN leave an entry undecided
            return self._fast_form(loss, z, y)

    def _coefficients(self, loss: Loss, c: int, y: np.ndarray) -> tuple[np.ndarray, Fraction, _fast.Ball, _fast.Ball]:
        """(t, ε, w, a): the label rows, label smoothing, the class weights and ``a = ((1 - ε)t + ε/C)·w`` enclosed."""
        t_val = (y[:, None] == np.arange(c)).astype(np.float64) if self.labels_are_indices(loss) else y
        eps_q = loss.label_smoothing or Fraction(0)
        weights = per_class("weight", loss.weight, c, Fraction(1))
        plain = eps_q == 0 and all(q == 1 for q in weights)
        t = _fast.Ball.exact(t_val)
        if plain:
            return t_val, eps_q, _fast.Ball.exact(np.ones((1, c))), t
        got = [_fast.Ball.of(q) for q in weights]
        w = _fast.Ball(np.array([[float(b.v) for b in got]]), np.array([[float(b.e) for b in got]]))
        b = _fast.add(_fast.mul(_fast.Ball.of(1 - eps_q), t), _fast.Ball.of(eps_q / c))
        return t_val, eps_q, w, _fast.mul(b, w)

    def fast_value(self, loss: Loss, z: np.ndarray, y: np.ndarray | None,
                   column: np.ndarray | None = None) -> _fast.FastValue | None:
        # ℓ = Σ_c a_c·(m - z_c + log Σ_k e^(z_k - m)), m = max z (every term >= 0: no
        # cancellation). The bound's terms are symjac.loss._softmax's closed forms
        # (_loss_condition, _loss_running_error), with g_c = L - z_c >= 0, L = log Σ_k e^(z_k):
        #   cond = Σ_c (|h_c|·|z_c| + (1 - ε)·w_c·t_c·g_c + a_c·g_c) + |ε|·|Σ_c (w_c/C - t_c·w_c)·g_c|,
        #   run  = Σ_c (R(b_c)·w_c·g_c + ((C + 1) + 3|L| + |z_c|)·a_c + (C + 1)·a_c·g_c),
        # R(b_c) = ρ·ε/C + t_c(1 + ε + 2(1 - ε)) (ρ = 1 for a power-of-two C, else 3), h_c =
        # W·p_c - a_c. Every term is >= 0 and increases with the balls' |.|: at their lower
        # |.| the sums bound below, at their upper |.| above (lower/upper cover the float64
        # roundings, a row sum of C <= 2^10 terms within 2^10·u < 2^-42 included).
        if z.ndim != 2 or not 2 <= z.shape[1] <= 2**10:
            return None
        assert y is not None
        c = z.shape[1]
        with np.errstate(all="ignore"):
            t_val, eps_q, w, a = self._coefficients(loss, c, y)
            top = np.broadcast_to(z.max(axis=1, keepdims=True), z.shape)
            e = _fast.exp(_fast.sub(_fast.Ball.exact(z), _fast.Ball.exact(top)))
            d = _fast.total(e, axis=1)
            lse = _fast.log(d)
            gap = _fast.add(_fast.sub(_fast.Ball.exact(top), _fast.Ball.exact(z)), lse)
            ell = _fast.total(_fast.mul(a, gap), axis=1)
            h = _fast.sub(_fast.mul(_fast.total(a, axis=1), _fast.div(e, d)), a)
            big_l = _fast.add(_fast.Ball.exact(top[:, :1]), lse)
            eps, om = float(eps_q), float(1 - eps_q)
            rho = 1 if c & (c - 1) == 0 else 3
            ta, az = np.abs(t_val), np.abs(z)
            r_b = rho * eps / c + ta * (1 + eps + 2 * om)  # R(b_c) in float64 (to within ~10u)
            sides = []
            for at in (_fast.Ball.lower_abs, _fast.Ball.upper_abs):
                g, aa, wa, la = at(gap), at(a), at(w), at(big_l)
                cond = np.sum(at(h) * az + om * wa * ta * g + aa * g, axis=1, keepdims=True)
                run = np.sum(r_b * wa * g + ((c + 1) + 3 * la + az) * aa + (c + 1) * aa * g, axis=1, keepdims=True)
                sides.append((cond, run))
            (cond_lo, run_lo), (cond_hi, run_hi) = sides
            # the ε term: Σ_c (w_c/C - t_c·w_c)·g_c enclosed, times float(ε) (within u of ε) moved by 2^-50
            own = _fast.mul(w, _fast.sub(_fast.Ball.of(Fraction(1, c), t_val.shape), _fast.Ball.exact(t_val)))
            d_eps = _fast.total(_fast.mul(own, gap), axis=1)
            cond_lo = cond_lo + eps * (1 - 2.0**-50) * d_eps.lower_abs()
            cond_hi = cond_hi + eps * (1 + 2.0**-50) * d_eps.upper_abs()
            return _fast.FastValue(ell, _fast.lower(cond_lo), _fast.lower(run_lo), _fast.upper(cond_hi),
                                   _fast.upper(run_hi))

    def _fast_form(self, loss: Loss, z: np.ndarray, y: np.ndarray) -> _fast.FastDerivative:
        c = z.shape[1]
        t_val, eps_q, w, a = self._coefficients(loss, c, y)
        top = np.broadcast_to(z.max(axis=1, keepdims=True), z.shape)
        e = _fast.exp(_fast.sub(_fast.Ball.exact(z), _fast.Ball.exact(top)))
        d = _fast.total(e, axis=1)
        p = _fast.div(e, d)
        q = _fast.div(_fast.others_ball(e), d)
        big_w = _fast.total(a, axis=1)
        h = _fast.sub(_fast.mul(big_w, p), a)
        pl, ph, ql, qh = p.lower_abs(), p.upper_abs(), q.lower_abs(), q.upper_abs()
        al, ah, wl, wh = a.lower_abs(), a.upper_abs(), w.lower_abs(), w.upper_abs()
        tw = np.abs(t_val) * w.v
        eps, om = float(eps_q), float(1 - eps_q)
        rho = 1 if c & (c - 1) == 0 else 3
        ta = np.abs(t_val)
        r_abs = rho * eps / c + ta * (1 + eps + 2 * om)  # R, computed in float64 (to within ~10u)
        az = np.abs(z)
        big_wl, big_wh = big_w.lower_abs(), big_w.upper_abs()
        cond_lo = _fast.lower(big_wl * pl * (ql * az + _fast.others(pl * az))
                              + om * (pl * _fast.others(tw * (1 - 2**-50)) + ql * tw * (1 - 2**-50))
                              + pl * _fast.others(al) + ql * al)
        run_lo = _fast.lower(((c + 6) * pl + 1) * al + (r_abs * wl + (c + 1) * al) * ql
                             + pl * (_fast.others(r_abs * wl) + (2 * c + 6) * _fast.others(al)))
        own = np.abs(w.v / c - t_val * w.v) * (1 + 2.0**-50) + w.e
        cond_hi = _fast.upper(big_wh * ph * (qh * az + _fast.others(ph * az, down=False))
                              + om * (ph * _fast.others(ta * wh, down=False) + qh * ta * wh)
                              + ph * _fast.others(ah, down=False) + qh * ah
                              + eps * (ph * np.sum(own, axis=1, keepdims=True) + own))
        run_hi = _fast.upper(((c + 6) * ph + 1) * ah + (r_abs * wh + (c + 1) * ah) * qh
                             + ph * (_fast.others(r_abs * wh, down=False) + (2 * c + 6) * _fast.others(ah, down=False)))
        return _fast.FastDerivative(h, cond_lo, run_lo, cond_hi, run_hi)

    def template(self, loss: Loss, classes: int) -> Template:
        if not is_int(classes) or classes < 1:
            raise SpecError(f"classes={classes!r} is not valid: give the number of classes, an integer >= 1")
        return _generic(int(classes))

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        return [per_class("weight", loss.weight, classes, Fraction(1)) + [loss.label_smoothing or Fraction(0)]]

    def mean_weights(self, loss: Loss, classes: int) -> list[Fraction] | None:
        # PyTorch with class indices: the mean divides by Σ w[label] over the counted rows
        return per_class("weight", loss.weight, classes, Fraction(1)) if self.labels_are_indices(loss) else None

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        # rows [M, 0, -M] and [-2M, -3M/2, -7M/4] (e^M overflows the dtype, e^-2M underflows it),
        # labelled at their lowest logit: exponentiating without the max shift gives e^M = inf
        # (inf/inf = NaN) or Σ e^z = 0 (log 0 = -inf); log(softmax(z)) after the shift takes the
        # log of an underflowed p = e^-2M = 0 at the labelled class (or at every class a
        # label_smoothing reaches): loss inf, derivative NaN. The exact loss is about 2M.
        m, c = overflow_logit(dt), self.default_classes(loss)
        pred = np.array([np.resize([m, 0.0, -m], c), np.resize([-2 * m, -1.5 * m, -1.75 * m], c)])
        low, high = np.argmin(pred, axis=1), np.argmax(pred, axis=1)
        if self.labels_are_indices(loss):
            label = np.where(low == loss.ignore_index, high, low)  # the two rows count
            if loss.ignore_index is not None:  # and a row at ignore_index, as in the defaults
                pred = np.vstack([pred, np.resize([-m, m, 0.0], c)])
                label = np.append(label, loss.ignore_index)
            return pred, label
        rows = np.zeros((2, c))
        rows[0, low[0]] = 1.0
        rows[1, high[1]] += 0.25
        rows[1, low[1]] += 0.75
        return pred, rows

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(evidence=(
            "a NaN logit: loss NaN and derivative NaN across its row, every other row exact (PyTorch cross_entropy, "
            "optax.softmax_cross_entropy and its integer-label form, tf.nn.(sparse_)softmax_cross_entropy_with_"
            "logits, Keras CategoricalCrossentropy, measured in float64); +inf: a NaN row (PyTorch, TensorFlow) or "
            "the limits in part (JAX: [0, NaN, -1], loss +inf); -inf: the limits (p = 0 at that class: [0.18, 0, "
            "-0.18]) in all three, the loss its limit or NaN (0·inf where that class's label is 0)"))

    def limits(self, loss: Loss, template: Template, args: Sequence[Fraction], slot: int,
               sign: int) -> tuple[Any, list[Any]]:
        # h_j = W·p_j - a_j and ℓ = Σ_c a_c·(L - z_c), L = log Σ e^z (symjac.loss._softmax). As
        # z_k -> -inf: p_k -> 0 and p_j -> the softmax of the other logits, ℓ -> inf if a_k > 0
        # (L - z_k -> inf), else the others' terms at L' = log Σ_{j≠k} e^{z_j}. As z_k -> +inf:
        # p -> the unit vector at k, so h_k -> W - a_k, h_j -> -a_j, ℓ -> inf if any other a_j > 0,
        # else 0 (L - z_k -> 0). tests/test_loss_families.py checks these against sympy.limit.
        c = template.classes
        z, t, w, eps = args[:c], args[c:2 * c], args[2 * c:3 * c], args[3 * c]
        a = [((1 - eps) * t[j] + eps / c) * w[j] for j in range(c)]
        big_w, others = sum(a, Fraction(0)), [j for j in range(c) if j != slot]
        def mp(q: Fraction) -> Any:
            return mpmath.mpf(q.numerator) / q.denominator

        with mpmath.workdps(DIGITS):
            if sign > 0 or not others:
                h = [mp(big_w - a[j] if j == slot else -a[j]) for j in range(c)]
                rest = any(a[j] > 0 for j in others)
                return (mpmath.inf if rest and sign > 0 else mpmath.mpf(0)), h
            top = max(z[j] for j in others)
            e = {j: mpmath.exp(mp(z[j] - top)) for j in others}
            d = mpmath.fsum(e.values())
            h = [mp(-a[j]) if j == slot else mp(big_w) * e[j] / d - mp(a[j]) for j in range(c)]
            if a[slot] > 0:
                return mpmath.inf, h
            return mpmath.fsum(mp(a[j]) * (mpmath.log(d) + mp(top - z[j])) for j in others), h

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        # C classes (weight's length, else 3); with ignore_index, a row at it (a third row
        # unless a default row's class is the ignored one), so the reduction's skip shows
        c = self.default_classes(loss)
        pred = np.array([np.resize([0.5, -1.0, 2.0], c), np.resize([-0.25, 1.5, -2.0], c)])
        if self.labels_are_indices(loss):
            label = np.array([c - 1, 0])
            if loss.ignore_index is not None and loss.ignore_index not in label:
                pred = np.vstack([pred, np.resize([1.0, -0.5, 0.25], c)])
                label = np.append(label, loss.ignore_index)
            return pred, label
        rows = np.zeros((2, c))
        rows[0, c - 1] = 1.0
        rows[1, :2] = [0.75, 0.25] if c > 1 else [1.0]
        return pred, rows
