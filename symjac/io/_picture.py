"""Pictures of the window graph: DOT always, PNG/SVG coverage pictures with matplotlib.

The coverage picture shows, for each input cell of the first (N, C) slice, the exact
input gradient at dy = ones beside what the implementation returned, with every
window outlined and the windows the verifier found wrong highlighted.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

PLOT_HINT = "matplotlib is not installed: pip install 'symjac[plot]' to draw PNG/SVG"
CATEGORY_COLOURS = {"missing_windows": "#d62728", "partial_windows": "#ff7f0e",
                    "wrong_cells": "#9467bd", "wrong_weights": "#8c564b"}


def _name(kind: str, index: tuple[int, ...]) -> str:
    return f'"{kind}[{",".join(map(str, index))}]"'


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
        kind, index = node
        if kind == "x":
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


def write_graph(case: Any, out: Path, fns: dict[str, Any] | None, dtype: str = "float64") -> tuple[list[str], bool]:
    """Write ``out`` (.dot, .png or .svg); return messages for the user and whether
    the implementation (if any) verified."""
    messages, report = _write_graph(case, out, fns, dtype)
    return messages, report is None or report.ok


def _write_graph(case: Any, out: Path, fns: dict[str, Any] | None, dtype: str) -> tuple[list[str], Any]:
    from symjac._exact import ExactArray
    from symjac.pool._graph import window_graph
    from symjac.pool._jacobian import exact_vjp
    from symjac.io._specfile import pool_input
    from symjac.verifiers._pool import verify

    g, x, _ = pool_input(case)
    x64 = x.astype(np.float64)
    report = None
    messages = []
    if fns is not None:
        # dy = ones: the report's observed/expected gradients are the picture's panels.
        report = verify(case.operator, **fns, x=x64, dy=np.ones(g.output_shape), dtype=dtype)
        messages.append(f"{'PASS' if report.ok else 'FAIL'} {case.name}: {report.summary()}")
    states = window_states(report)
    graph = window_graph(case.operator, x64 if case.operator.mode == "max" else g.input_shape)
    dot = to_dot(graph, states)
    if out.suffix == ".dot":
        out.write_text(dot)
        return messages + [f"wrote {out}"], report
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Rectangle
    except ImportError:
        fallback = out.with_suffix(".dot")
        fallback.write_text(dot)
        return messages + [PLOT_HINT, f"wrote {fallback} instead"], report
    if len(g.in_spatial) == 3:
        fallback = out.with_suffix(".dot")
        fallback.write_text(dot)
        return messages + ["coverage pictures show 1-D and 2-D pools; 3-D pools get the DOT graph", f"wrote {fallback}"], report

    ones = np.ones(g.output_shape)
    expected = exact_vjp(g, ExactArray.from_any(x64), ExactArray.from_any(ones)).to_numpy(np.float64)
    # The verifier already called the backward at dy = ones, guarded (None if it failed,
    # or for inputs of more than 4096 cells, which no picture shows legibly).
    observed = report.stats.get("observed_gradient") if report is not None else None

    def grid(a: np.ndarray) -> np.ndarray:
        return np.asarray(g.to_canonical(a)[0].reshape(g.in_spatial if len(g.in_spatial) == 2 else (1,) + g.in_spatial))

    panels = [("exact gradient at dy = 1", grid(expected))]
    if observed is not None:
        panels.append(("implementation's gradient", grid(observed)))
    vmax = max(float(np.abs(p).max()) for _, p in panels) or 1.0
    h, w = panels[0][1].shape
    fig, axes = plt.subplots(1, len(panels), figsize=(max(4.5, 1.1 * w + 1.5) * len(panels), max(3.5, 1.0 * h + 1.8)),
                             squeeze=False)
    for ax, (title, data) in zip(axes[0], panels):
        ax.imshow(data, cmap="Blues", vmin=0, vmax=vmax)
        for (i, j), v in np.ndenumerate(data):
            ax.text(j, i, f"{v:.4g}", ha="center", va="center", fontsize=9,
                    color="white" if v > 0.6 * vmax else "black")
        ax.set_title(title, fontsize=10)
        ax.set_xticks(range(w))
        ax.set_yticks(range(h))
    # Outline each window of the first slice; implicated windows in their category's colour.
    ax = axes[0][-1]
    for win in range(g.n_out):
        cells = g.cells[win][g.valid[win]]
        pos = np.array([g.cell_position(int(c)) for c in cells]).reshape(len(cells), -1)
        if pos.shape[1] == 1:
            pos = np.concatenate([np.zeros_like(pos), pos], axis=1)
        cat = states.get(g.output_index(0, win))
        colour = CATEGORY_COLOURS.get(cat or "", "#999999")
        inset = 0.46 - 0.07 * (win % 4)  # nested windows stay distinguishable
        r0, c0 = pos.min(axis=0) - inset
        r1, c1 = pos.max(axis=0) + inset
        ax.add_patch(Rectangle((c0, r0), c1 - c0, r1 - r0, fill=False, edgecolor=colour,
                                   linewidth=2.5 if cat else 0.6, linestyle="-" if cat else ":"))
        if cat:
            ax.text(c0 + 0.05, r0 + 0.05, "y" + ",".join(map(str, g.window_position(win))), color=colour,
                    fontsize=7, va="top", ha="left")
    title = report.summary() if report is not None else repr(case.operator)
    fig.suptitle(textwrap.fill(title, 90), fontsize=9)
    handles = [Line2D([], [], color=c, linewidth=2.5, label=k.replace("_", " ")) for k, c in CATEGORY_COLOURS.items()
               if k in states.values()]
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 if handles else 0, 1, 0.9))
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return messages + [f"wrote {out}"], report
