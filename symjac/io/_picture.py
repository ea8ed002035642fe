"""Pictures of the window graph: DOT always, PNG/SVG coverage pictures with matplotlib.

The coverage picture shows, for each input cell of one (N, C) slice (the first, or
the one ``--slice n,c`` names), the exact input gradient at dy = ones (as short
fractions where it has them) beside what the implementation returned, with a
colour bar, every window outlined, the windows the verifier found wrong in their
category's colour and the cells that differ from the exact gradient in red, dashed. The title names the case, the spec (short form, wrapped, never clipped) and
the slice. SVG files carry no date and fixed ids: regenerating gives the same bytes.
"""

from __future__ import annotations

import dataclasses
import textwrap
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from symjac._atomic import atomic_open, write_text
from symjac._exact import round_fraction

PLOT_HINT = "matplotlib is not installed: pip install 'symjac[plot]' to draw PNG/SVG"
CATEGORY_COLOURS = {"missing_windows": "#d62728", "partial_windows": "#ff7f0e",
                    "wrong_cells": "#9467bd", "wrong_weights": "#8c564b"}


def _name(side: str, index: tuple[int, ...]) -> str:
    return f'"{side}[{",".join(map(str, index))}]"'


def window_states(report: Any) -> dict[tuple[int, ...], str]:
    """Output index -> finding category, for every window the report names."""
    states: dict[tuple[int, ...], str] = {}
    for f in report.findings if report is not None else ():
        if f.window is not None and f.category in CATEGORY_COLOURS:
            states.setdefault(tuple(f.window), f.category)
    return states


def to_dot(graph: Any, states: dict[tuple[int, ...], str]) -> str:
    """The window graph in Graphviz DOT; implicated windows filled by category."""
    lines = ["digraph symjac {", "  rankdir=LR;", "  node [shape=box, fontname=Helvetica];"]
    for node in graph.nodes:
        side, index = node
        if side == "x":
            lines.append(f"  {_name('x', index)} [shape=ellipse];")
        else:
            colour = CATEGORY_COLOURS.get(states.get(index, ""), "")
            style = f', style=filled, fillcolor="{colour}", xlabel="{states[index]}"' if colour else ""
            lines.append(f"  {_name('y', index)} [shape=box{style}];")
    for (k1, i1), (k2, i2), data in graph.edges(data=True):
        label = "" if data.get("weight") is None else f' [label="{data["weight"]}"]'
        lines.append(f"  {_name(k1, i1)} -> {_name(k2, i2)}{label};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def short_spec(spec: Any) -> str:
    """A spec as a short title: the mode, then only the fields that differ from their
    defaults (a full repr runs to 150 characters and would not fit a picture)."""
    fields = []
    for f in dataclasses.fields(spec):
        if f.name == "mode":
            continue
        value = getattr(spec, f.name)
        default = f.default if f.default is not dataclasses.MISSING else None
        if f.name == "stride" and value == getattr(spec, "kernel", None):
            continue
        if f.name == "dilation" and set(value) == {1}:
            continue
        if value == default and f.default is not dataclasses.MISSING:
            continue
        if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
            value = "x".join(map(str, value))
        fields.append(f"{f.name}={value}")
    return f"{type(spec).__name__}({spec.mode!r}{', ' if fields else ''}{', '.join(fields)})"


def slice_batch(g: Any, slice_nc: tuple[int, int] | None) -> tuple[int, str]:
    """The canonical batch index of the (N, C) slice ``slice_nc`` and a label naming it.

    Raises:
      InputError: the slice is outside the input's batch and channel dimensions.
    """
    from symjac._errors import InputError

    n, c = slice_nc or (0, 0)
    batch_dims = g.lead + g.trail
    if g.trail:  # channels_last: lead = (N,) or (), trail = (C,)
        sizes = (g.lead[0] if g.lead else 1, g.trail[0])
    else:  # channels_first: lead = (N, C), (C,) or ()
        sizes = ((g.lead[0] if len(g.lead) == 2 else 1), (g.lead[-1] if g.lead else 1))
    if not (0 <= n < sizes[0] and 0 <= c < sizes[1]):
        raise InputError(f"--slice {n},{c} is outside the input {g.input_shape}: N has {sizes[0]} and C "
                         f"{sizes[1]} entries ({g.spec.layout})")
    b = c * sizes[0] + n if g.trail else n * sizes[1] + c
    label = f"slice N={n}, C={c} of input {g.input_shape}" if batch_dims else f"input {g.input_shape}"
    return b, label


def _cell_text(exact: Any, value: float) -> str:
    """A short exact fraction where there is one (``3/4``), else 4 significant digits."""
    text = str(exact) if exact is not None else ""
    return text if exact is not None and len(text) <= 5 else f"{value:.4g}"


def failing_family(report: Any) -> str | None:
    """The input family of the report's first root-cause finding, when it is not the input the
    report's own x was (``given`` or ``distinct``): a picture at x would show no difference."""
    for f in report.findings:
        if f.consequence_of is None and f.family is not None:
            return None if f.family in ("given", "distinct") else str(f.family)
    return None


def write_graph(case: Any, out: Path, fns: dict[str, Any] | None, dtype: str = "float64",
                slice_nc: tuple[int, int] | None = None) -> tuple[list[str], Any]:
    """Write ``out`` (.dot, .png or .svg); return messages for the user and the
    implementation's :class:`symjac.Report` (None without one: its verdict is
    :attr:`symjac.Report.verdict`). ``slice_nc`` picks the (N, C) slice a picture shows
    (default (0, 0))."""
    from symjac._exact import ExactArray
    from symjac.io._specfile import has_input, pool_input
    from symjac.check._rounding import float_dtype
    from symjac.verifiers.pool._inputs import FAMILY_NAMES, family_input
    from symjac.pool._graph import window_graph
    from symjac.verifiers.pool._verify import verify

    g, x, _ = pool_input(case, plan=True)
    b, slice_label = slice_batch(g, slice_nc)
    x64 = x.astype(np.float64)
    report = None
    messages = [] if has_input(case) else [f"no [input]: input {g.input_shape}, the largest shape of the coverage "
                                           "plan (symjac.cover)"]
    if fns is not None:
        # dy = ones: the report's observed/expected gradients are the picture's panels.
        report = verify(case.operator, **fns, x=x64, dy=np.ones(g.output_shape), dtype=dtype)
        messages.append(f"{report.verdict} {case.name}: {report.summary()}")
        family = failing_family(report)
        if family is not None:  # drawn where it failed: at x both panes could agree
            fx = family_input(g, family, float_dtype(dtype), int(case.inputs.get("seed", 0)))
            at = verify(case.operator, **fns, x=fx, dy=np.ones(g.output_shape), dtype=dtype)
            if not at.ok:  # the report at the input drawn: its gradient is the second pane
                x, x64, report = ExactArray.from_any(fx).to_fractions(), fx.astype(np.float64), at
                slice_label += f" at the {FAMILY_NAMES[family]} input, where the check failed"
    states = window_states(report)
    graph = window_graph(case.operator, x64 if g.operator.graph_needs_x else g.input_shape)
    dot = to_dot(graph, states)
    if out.suffix == ".dot":
        write_text(out, dot)
        return messages + [f"wrote {out}"], report
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        fallback = out.with_suffix(".dot")
        write_text(fallback, dot)
        return messages + [PLOT_HINT, f"wrote {fallback} instead"], report
    if len(g.in_spatial) == 3:
        fallback = out.with_suffix(".dot")
        write_text(fallback, dot)
        return messages + ["coverage pictures show 1-D and 2-D pools; 3-D pools get the DOT graph", f"wrote {fallback}"], report
    _draw(case, g, x, b, slice_label, report, states, out, dtype)
    return messages + [f"drew {slice_label}", f"wrote {out}"], report


def _draw(case: Any, g: Any, x: np.ndarray, b: int, slice_label: str, report: Any,
          states: dict[tuple[int, ...], str], out: Path, dtype: str) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    from symjac._exact import ExactArray
    from symjac.check._rounding import unit_roundoff
    from symjac.pool._jacobian import exact_vjp

    exact = exact_vjp(g, ExactArray.from_any(x), ExactArray.from_any(np.ones(g.output_shape, dtype=np.int64))).to_fractions()
    shape2d = g.in_spatial if len(g.in_spatial) == 2 else (1,) + g.in_spatial

    def grid(a: np.ndarray) -> np.ndarray:
        return np.asarray(g.to_canonical(a)[b].reshape(shape2d))

    exact_grid = grid(exact)
    expected = exact_grid.astype(np.float64)
    # The verifier already called the backward at dy = ones, guarded (None if it failed,
    # or for inputs of more than 4096 cells, which no picture shows legibly).
    observed = report.stats.get("observed_gradient") if report is not None else None
    panels: list[tuple[str, np.ndarray, np.ndarray | None]] = [("exact gradient at dy = 1", expected, exact_grid)]
    wrong = np.zeros(shape2d, dtype=bool)
    if observed is not None:
        obs = grid(observed).astype(np.float64)
        eps = 2 * unit_roundoff(dtype)  # machine epsilon; check._rounding knows bfloat16 too
        scale = max(float(np.abs(expected).max()), 1.0)
        wrong = ~(np.abs(obs - expected) <= 8 * eps * scale) | ~np.isfinite(obs)
        panels.append(("implementation's gradient", obs, None))
    finite = [np.abs(p[np.isfinite(p)]).max(initial=0.0) for _, p, _ in panels]
    vmax = float(max(finite)) or 1.0
    h, w = shape2d
    width = max(5.0, 1.1 * w + 2.2) * len(panels)
    # Constrained layout places the wrapped title, the colour bar and the legend outside the panels.
    fig, axes = plt.subplots(1, len(panels), figsize=(width, max(3.8, 1.0 * h + 2.4)), squeeze=False,
                             layout="constrained")
    image = None
    for ax, (title, data, exact_values) in zip(axes[0], panels):
        image = ax.imshow(np.where(np.isfinite(data), data, 0.0), cmap="Blues", vmin=min(0.0, float(np.nanmin(data))),
                          vmax=vmax)
        for (i, j), v in np.ndenumerate(data):
            bad = exact_values is None and wrong[i, j]
            text = _cell_text(exact_values[i, j] if exact_values is not None else _short_fraction(v), v)
            ax.text(j, i, text, ha="center", va="center", fontsize=9, fontweight="bold" if bad else "normal",
                    color="#d62728" if bad else ("white" if v > 0.6 * vmax else "black"))
            if bad:
                ax.add_patch(Rectangle((j - 0.42, i - 0.42), 0.84, 0.84, fill=False, edgecolor="#d62728",
                                           linewidth=1.5, linestyle="--"))
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(w))
        ax.set_yticks(range(h))
    _outline_windows(axes[0][-1], g, b, states)
    assert image is not None
    fig.colorbar(image, ax=list(axes[0]), shrink=0.8, label="input gradient")
    chars = int(width * 72 / (0.6 * 9))  # characters per line at 9 pt: the title wraps, never clips
    lines = [f"{case.name}: {short_spec(g.spec)}; {slice_label}"]
    if report is not None:
        lines.append(f"{'PASS' if report.ok else 'FAIL'} ({dtype}): {report.summary()}")
    fig.suptitle("\n".join(textwrap.fill(line, chars) for line in lines), fontsize=9)
    handles: list[Any] = [Line2D([], [], color=c, linewidth=2.5, label=k.replace("_", " ")) for k, c in CATEGORY_COLOURS.items()
               if k in states.values()]
    if wrong.any():
        handles.append(Rectangle((0, 0), 1, 1, fill=False, edgecolor="#d62728", linestyle="--",
                                     label="cell differs from the exact gradient (red value)"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 3), fontsize=8, frameon=False)
    import matplotlib as mpl

    with mpl.rc_context({"svg.hashsalt": "symjac"}):  # SVG ids from a fixed salt: reproducible files
        with atomic_open(out, "wb") as f:  # savefig into the temporary file: the format from out's suffix
            fig.savefig(f, format=out.suffix[1:] or None, dpi=120, metadata={"Date": None} if out.suffix == ".svg" else None)
    plt.close(fig)


def _short_fraction(v: float) -> Any:
    """The fraction of denominator at most 64 a float is the rounding of (``1/9`` for the
    float64 or float32 nearest 1/9, ``1/4``), or None: a float no such fraction rounds to."""
    if not np.isfinite(v):
        return None
    dtype = np.asarray(v).dtype if np.asarray(v).dtype.kind == "f" else np.dtype(np.float64)
    f = Fraction(float(v)).limit_denominator(64)
    return f if round_fraction(f, dtype) == v else None


def _outline_windows(ax: Any, g: Any, b: int, states: dict[tuple[int, ...], str]) -> None:
    """Outline each window of the slice; implicated windows in their category's colour."""
    from matplotlib.patches import Rectangle

    for win in range(g.n_out):
        cells = g.cells[win][g.valid[win]]
        pos = np.array([g.cell_position(int(c)) for c in cells]).reshape(len(cells), -1)
        if pos.shape[1] == 1:
            pos = np.concatenate([np.zeros_like(pos), pos], axis=1)
        cat = states.get(g.output_index(b, win))
        colour = CATEGORY_COLOURS.get(cat or "", "#999999")
        inset = 0.46 - 0.07 * (win % 4)  # nested windows stay distinguishable
        r0, c0 = pos.min(axis=0) - inset
        r1, c1 = pos.max(axis=0) + inset
        ax.add_patch(Rectangle((c0, r0), c1 - c0, r1 - r0, fill=False, edgecolor=colour,
                                   linewidth=2.5 if cat else 0.6, linestyle="-" if cat else ":"))
        if cat:
            ax.text(c0 + 0.05, r0 + 0.05, "y" + ",".join(map(str, g.window_position(win))), color=colour,
                    fontsize=7, va="top", ha="left")
