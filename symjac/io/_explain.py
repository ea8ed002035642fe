"""Explain: the symbolic forward of each window class and its Jacobian entries."""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy


def _render(expr: Any, latex: bool) -> str:
    return str(sympy.latex(expr) if latex else sympy.sstr(expr))


def _equation(lhs: Any, rhs: Any, latex: bool) -> str:
    return f"{_render(lhs, latex)} = {_render(rhs, latex)}"


def explain_pool(case: Any, latex: bool = False) -> str:
    """One block per window class: how many windows, one representative window
    written over its input cells, and each nonzero ∂y/∂x (SymPy's derivative)."""
    from symjac.io._specfile import has_input, pool_input
    from symjac.pool._symbolic import window_classes

    g, _, _ = pool_input(case, plan=True)
    if not g.operator.kernel_windows:  # RoI pooling: a window per box and bin, named in its own terms
        return _explain_table(case, g, latex)
    picked = "" if has_input(case) else " (no [input]: the coverage plan's shape with the most window classes, symjac.cover)"
    lines = [f"{case.name}: {case.operator!r}",
             f"input {g.input_shape}{picked} -> output {g.output_shape}; pads (low, high) per axis {list(g.pads)}; "
             f"{g.n_out} windows per (N, C) slice"]
    classes = window_classes(g)
    lines.append(f"{len(classes)} window class{'es' if len(classes) != 1 else ''} "
                 "(same valid cells and divisor up to translation):")
    for i, c in enumerate(sorted(classes, key=lambda c: int(c.windows[0]))):
        w = int(c.windows[0])
        out_pos = g.window_position(w)
        cells = [sympy.Symbol("x[" + ",".join(map(str, g.cell_position(int(k)))) + "]", real=True) for k in c.cells[0]]
        sub = dict(zip(c.template.symbols, cells))
        y = sympy.Symbol("y[" + ",".join(map(str, out_pos)) + "]", real=True)
        n = len(c.slots)
        divisor = g.operator.class_note(c)
        lines.append(f"class {i + 1}: {c.windows.size} window{'s' if c.windows.size != 1 else ''}, "
                     f"{n} valid cell{'s' if n != 1 else ''}{divisor}; e.g. window {out_pos}:")
        lines.append(f"  {_equation(y, c.template.expr.xreplace(sub), latex)}")
        for cell, d in zip(cells, c.template.derivatives):
            lhs = sympy.Derivative(y, cell) if latex else f"d{y}/d{cell}"
            lines.append(f"  {_equation(lhs, d.xreplace(sub), latex)}")
    if g.operator.explain_note:
        lines.append(f"note: {g.operator.explain_note}")
    return "\n".join(lines)


def _explain_table(case: Any, g: Any, latex: bool) -> str:
    """RoI pooling: each window (box, bin) of channel 0 over its input cells, and each nonzero ∂y/∂x."""
    names = np.arange(int(np.prod(g.input_shape))).reshape(g.input_shape)
    symbol = {int(names[idx]): sympy.Symbol("x[" + ",".join(map(str, idx)) + "]", real=True)
              for idx in np.ndindex(*g.input_shape)}
    exprs = np.asarray(g.operator.table_expressions(g, symbol)).reshape(g.output_shape)
    lines = [f"{case.name}: {case.operator!r}", f"input {g.input_shape} -> output {g.output_shape}; "
             f"{g.n_out} windows (box, bin) per channel; channel 0:"]
    for w in range(g.n_out):
        index = g.output_index(0, w)
        y = sympy.Symbol("y[" + ",".join(map(str, index)) + "]", real=True)
        lines.append(f"window {index}: {g.operator.window_words(g, w)}")
        lines.append(f"  {_equation(y, exprs[index], latex)}")
        for cell in sorted(exprs[index].free_symbols, key=str):
            lhs = sympy.Derivative(y, cell) if latex else f"d{y}/d{cell}"
            lines.append(f"  {_equation(lhs, sympy.diff(exprs[index], cell), latex)}")
    return "\n".join(lines)


#: Up to this many classes ``explain`` writes softmax_ce out class by class (C
#: derivatives of C-term sums: O(C²) SymPy work and text); above it, the class-generic
#: forms SymPy derives for every C at once (:func:`symjac.loss._softmax.derivation`).
EXPLICIT_CLASSES = 8


def explain_loss(case: Any, latex: bool = False) -> str:
    """The per-element loss and its derivative, as SymPy built them."""
    from symjac.loss._elements import loss_template
    from symjac.loss._spec import kind_of

    loss = case.operator
    pred = case.inputs.get("pred")
    kind = kind_of(loss)  # classes per element: along pred's last axis, or the kind's default to show
    classes = kind.classes(tuple(np.shape(pred))) if pred is not None else kind.explain_classes
    if classes > EXPLICIT_CLASSES:
        return _explain_softmax_generic(case, classes, latex)
    t = loss_template(loss, classes)
    unset, given = _parameters(loss, t)
    lines = [f"{case.name}: {loss!r}", "per-element loss:", f"  {_render(t.loss.xreplace(unset), latex)}"]
    if given:
        lines.append("where " + ", ".join(_equation(k, v, latex) for k, v in given.items()))
    lines.append("derivatives:")
    for z, d in zip(t.pred, t.derivatives):
        lhs = sympy.Derivative(sympy.Symbol("l"), z) if latex else f"dl/d{z}"
        lines.append(f"  {_equation(lhs, d.xreplace(unset), latex)}")
    lines.append(f"emitted derivative = S * dL/dpred with S = {loss.scale} (after the {loss.reduction!r} reduction)")
    return "\n".join(lines)


def _explain_softmax_generic(case: Any, classes: int, latex: bool) -> str:
    """softmax_ce over many classes: ℓ and dℓ/dz_j as SymPy derives them for every C, with
    classes j and k written out and the others through sums over c ≠ j, k."""
    from symjac.loss._softmax import derivation

    loss = case.operator
    ell, h = derivation()
    by_name = {str(s): s for s in ell.free_symbols | h.free_symbols}
    sub: dict[Any, Any] = {by_name["C"]: classes}
    given = []
    if loss.label_smoothing:
        eps = loss.label_smoothing
        given.append(_equation(by_name["epsilon"], sympy.Rational(eps.numerator, eps.denominator), latex))
    else:
        sub[by_name["epsilon"]] = 0
    if loss.weight is None:
        sub.update({by_name["w_j"]: 1, by_name["w_k"]: 1, by_name["WS"]: classes - 2})
    else:
        given.append("w = (" + ", ".join(str(sympy.Rational(w.numerator, w.denominator)) for w in loss.weight) + ")")
    lines = [f"{case.name}: {loss!r}",
             f"per-row loss over C = {classes} classes, as SymPy derives it for every C (classes j, k written "
             "out; over the other classes c: s = sum exp(z_c), TW = sum t_c*w_c, TWZ = sum t_c*w_c*z_c, "
             "WS = sum w_c, WZ = sum w_c*z_c):",
             f"  {_render(ell.xreplace(sub), latex)}"]
    if given:
        lines.append("where " + ", ".join(given))
    lhs = sympy.Derivative(sympy.Symbol("l"), by_name["z_j"]) if latex else "dl/dz_j"
    lines += ["derivative (every class alike):", f"  {_equation(lhs, h.xreplace(sub), latex)}",
              f"emitted derivative = S * dL/dpred with S = {loss.scale} (after the {loss.reduction!r} reduction)"]
    return "\n".join(lines)


def _parameters(loss: Any, t: Any) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """The template's option symbols split into those the spec leaves at their neutral
    value (substituted away: no ``w0``, ``epsilon`` when there are no weights or
    smoothing) and those it sets (kept as symbols, their values listed)."""
    unset: dict[Any, Any] = {}
    given: dict[Any, Any] = {}
    for symbol in t.params:
        name = symbol.name
        if name.startswith("w"):
            values = loss.weight
            index = int(name[1:]) if name[1:].isdigit() else 0
        elif name == "pos_weight":
            values, index = loss.pos_weight, 0
        elif name == "epsilon":
            values, index = (loss.label_smoothing,) if loss.label_smoothing else None, 0
        elif name == "eps":  # poisson_nll's ε in log(z + ε), gaussian_nll's clamp: always shown, with its value
            values, index = (loss.eps,), 0
        else:  # delta: always shown, with its value
            values, index = (loss.delta,), 0
        if values is None:
            unset[symbol] = sympy.S.Zero if name == "epsilon" else sympy.S.One
        elif len(values) > 1 and not name[1:].isdigit():  # per class along the last axis
            given[symbol] = sympy.Tuple(*(sympy.Rational(v.numerator, v.denominator) for v in values))
        else:
            value = values[index] if len(values) > 1 else values[0]
            given[symbol] = sympy.Rational(value.numerator, value.denominator)
    return unset, given


def explain(case: Any, latex: bool = False) -> str:
    return explain_loss(case, latex) if case.is_loss else explain_pool(case, latex)
