"""The reproducer files of a conformance run: per failure class, a spec file and a Python script.

:meth:`symjac.frameworks.conform._run.Conformance.write_reproducers` names the classes; here each is
written: the failing configuration's spec (TOML), its input (the failing family's, or the tie
input for a tie finding) and a script that calls the framework op on it and prints the exact
values symjac derived beside the framework's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from symjac._atomic import write_text
from symjac._errors import SymjacError

TIE_CATEGORIES = ("tie_not_subgradient", "tie_policy")


def _reproducer_input(r: dict[str, Any], dt: np.dtype[Any]) -> tuple[Any, Any, np.ndarray, np.ndarray, str]:
    """(spec, geometry, x, dy, generator) of a finding: tie inputs and dy = ones for tie
    findings (any Clarke element sums to 1 per window), else the failing family's x and
    distinct dy values (a gradient swapped between windows shows)."""
    from symjac.verifiers.pool._inputs import distinct_dy, generate_input
    from symjac.io._specfile import _operator
    from symjac.pool._geometry import resolve

    spec = _operator(dict(r["operator"]), "reproducer")
    g = resolve(spec, tuple(r["config"]["input_shape"]))
    seed = int(r["config"].get("seed", 0))
    family = "ties" if r["category"] in TIE_CATEGORIES else r.get("family") or "distinct"
    x = generate_input(g, family, dt, seed)
    # as verify's: lp's tie pass zeroes whole windows; its other inputs keep Σ x^p > 0 for odd p
    x = g.operator.tie_input(g, x) if family == "ties" else g.operator.default_input(g, x)
    dy = np.ones(g.output_shape, dt) if r["category"] in TIE_CATEGORIES else distinct_dy(g, dt, seed)
    return spec, g, x, dy, family


def _array_text(a: np.ndarray, dtype: str) -> str:
    lit = np.array2string(np.asarray(a, dtype=np.float64), separator=", ", threshold=1 << 30, max_line_width=110,
                          floatmode="unique")
    ctor = "ml_dtypes.bfloat16" if dtype == "bfloat16" else f"np.{dtype}"
    return f"np.array({lit}, dtype={ctor})"


def write_reproducer(out: Path, stem: str, framework: str, r: dict[str, Any], dt: np.dtype[Any]) -> list[Path]:
    """A failure class's spec file (TOML) and Python script in ``out`` (a text note when no op was built;
    a loss cell's script only, :mod:`symjac.frameworks.conform.reproducers._loss`)."""
    from symjac.io._specwrite import dumps

    if r["config"].get("loss"):
        from symjac.frameworks.conform.reproducers._loss import write_loss_reproducer

        return write_loss_reproducer(out, stem, framework, r)
    from symjac.pool._jacobian import forward as exact_forward, vjp as exact_vjp

    config, category = r["config"], r["category"]
    kwargs = ", ".join(f"{k}={v!r}" for k, v in config["kwargs"].items())
    transform, compiled = config.get("transform", "vjp"), bool(config.get("compiled"))
    known = "known defect " if r["status"] == "known_defect" else ""
    title = f"{framework} {config['op']}({kwargs}) in {r['dtype']}: {known}{category}" + \
        ("" if transform == "vjp" else f" in its {transform}") + (f" in {r.get('mode', 'compiled')}" if compiled else "")
    path = out / f"{stem}.toml"
    try:
        spec, g, x, dy, family = _reproducer_input(r, dt)
    except (SymjacError, KeyError) as exc:  # a crash before the op was built: no spec to write
        script = out / f"{stem}.txt"
        write_text(script, f"{title}\n{r.get('summary', '')}\nno reproducer: {exc}\n")
        return [script]
    write_text(path, dumps(stem, f"{framework} {config['op']} {config['label']}: {category}",
                          dict(r["operator"]),
                          {"shape": list(config["input_shape"]), "generator": family,
                           "seed": int(config.get("seed", 0))},
                          comment=f"{title}\n{r.get('summary', '')}\n"
                                  f"Check: symjac verify {path.name} --impl <your impl> --dtype {r['dtype']}"))
    y = np.array(exact_forward(spec, x.astype(np.float64)), dtype=np.float64)
    dx = np.array(exact_vjp(spec, x.astype(np.float64), dy.astype(np.float64)), dtype=np.float64)
    tie_note = ("# at tied maxima any convex combination of the tied cells is exact (each window's gradient\n"
                "# sums to dy there); this is the one that routes to the first maximum in row-major order\n"
                if category in TIE_CATEGORIES else "")
    note = f"\nKnown defect (the adapter documents it): {r['known_defect']}\n" if r.get("known_defect") else ""
    lines = [f'"""Reproducer: {title}.', "", f"symjac: {r.get('summary', '')}", note,
             f"Spec: {path.name} (load with symjac.load_spec_file). Exact values below come from symjac.",
             '"""', "import numpy as np"]
    if r["dtype"] == "bfloat16":
        lines.append("import ml_dtypes")
    lines += ["", f"x = {_array_text(x, r['dtype'])}"]
    if not r.get("forward_only"):
        lines.append(f"dy = {_array_text(dy, r['dtype'])}")
    if transform != "vjp" or compiled:
        from symjac.frameworks.conform.reproducers._transforms import transform_lines

        script = out / f"{stem}.py"
        write_text(script, "\n".join(lines + transform_lines(r, spec, x, dy, _array_text)) + "\n")
        return [path, script]
    lines += ["", r.get("reproducer") or "# (the adapter gave no reproducer snippet)", "",
              f"expected_y = {_array_text(y, 'float64')}"]
    if not r.get("forward_only"):
        lines += [tie_note + f"expected_dx = {_array_text(dx, 'float64')}"]
    lines += ["print('expected y =', expected_y)"]
    if not r.get("forward_only"):
        lines += ["print('expected dx =', expected_dx)"]
    # the snippet names its results y (and dx): compare them where it did
    lines += ["for name, want in (('y', expected_y), ('dx', globals().get('expected_dx'))):",
              "    got = globals().get(name)",
              "    if got is not None and want is not None:",
              "        got = np.asarray(got.detach() if hasattr(got, 'detach') else got, dtype=np.float64)",
              "        if got.shape != want.shape:",
              "            print(f'{name}: shape {got.shape}, expected {want.shape}')",
              "        else:",
              "            print(f'{name}: max |difference| {np.abs(got - want).max():g}; sum {got.sum():g}, expected '",
              "                  f'{want.sum():g}')"]
    script = out / f"{stem}.py"
    write_text(script, "\n".join(lines) + "\n")
    return [path, script]
