"""The reproducer scripts of a conformance cell under ``jvp``, ``hvp`` or ``vmap``, or in a compiled mode.

The adapter's snippet (``Impl.reproducer``) calls the framework op on ``x`` and its VJP on
``dy``; here its op call is taken out as a function ``pool_op`` of a framework tensor and driven by
the framework's own transform (PyTorch forward AD, double backward, ``torch.func.vmap``;
``tf.autodiff.ForwardAccumulator``, nested tapes, ``tf.vectorized_map``; ``jax.jvp``,
``jax.vjp`` of the VJP, ``jax.vmap``), as the adapters call them, in the cell's mode: a
compiled cell's (its job's ``compiled``) runs the transform inside ``tf.function``, ``jax.jit`` or
``torch.compile`` (the VJP too), five times over (graph-mode results may vary from call to call);
an eager JAX cell's with ``jax_disable_jit``. The script prints the framework's values beside
symjac's exact ones (a raising transform prints its exception).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac.verifiers._vmap import LAYOUTS

#: Each batched call on its own (one raising does not hide the others), at every batch of ``LAYOUTS`` and
#: twice more at the first (a batching rule may differ from call to call); the sample's slots of each.
_EACH = ("got = {}\nfor name, run in runs.items():\n    try:\n"
         "        got[name] = [np.take(np.asarray(run(n, i, o, slots)), s, axis=o)\n"
         "                     for n, i, o, slots in [*layouts, layouts[0], layouts[0]] for s in slots]\n"
         "    except Exception as exc:  # the batching rule raised: that is the finding\n"
         "        print(f'{name}: {type(exc).__name__}: {exc}'.splitlines()[0])\n")
#: A compiled cell's function, called five times (graph-mode results may differ from call to call).
_FIVE = "got = {{}}\nfor _ in range(5):\n    for name, value in {call}.items():\n        got.setdefault(name, []).append(value)\n"
#: Per framework and transform, the transform code run on ``pool_op`` (a tensor -> tensor) eagerly; and
#: compiled (``{C}`` the framework's compile call around a function) where it differs.
_TORCH = {
    "jvp": ("fa = torch.autograd.forward_ad\nwith fa.dual_level():\n"
            "    out = first(pool_op(fa.make_dual(torch.tensor(x), torch.tensor(t))))\n"
            "    tangent = fa.unpack_dual(out).tangent\n"
            "got = {'jvp': (torch.zeros_like(out) if tangent is None else tangent).detach().numpy()}\n"),
    "hvp": ("xt, g = torch.tensor(x, requires_grad=True), torch.tensor(dy, requires_grad=True)\n"
            "(dx,) = torch.autograd.grad(first(pool_op(xt)), xt, g, create_graph=True)\n"
            "ddx, ddy = torch.autograd.grad(dx, (xt, g), torch.tensor(v), allow_unused=True)\n"
            "got = {'ddx': np.zeros_like(x) if ddx is None else ddx.numpy(), "
            "'ddy': np.zeros_like(dy) if ddy is None else ddy.numpy()}\n"),
    "vmap": ("from torch import func\nf1 = lambda a: first(pool_op(a))\n"
             "layouts = positions(x.ndim)\n"
             "def vm(f, n, i, o, slots, *arrays):\n"
             "    return {C}(func.vmap(f, in_dims=i, out_dims=o))(*(torch.tensor(batch(a, n, i, slots)) for a in arrays))\n\n\n"
             "runs = {'y': lambda *b: vm(f1, *b, x),\n"
             "        'dx': lambda *b: vm(lambda a, g: func.vjp(f1, a)[1](g)[0], *b, x, dy),\n"
             "        'jvp': lambda *b: vm(lambda a, c: func.jvp(f1, (a,), (c,))[1], *b, x, t)}\n"
             + _EACH),
}
#: torch.compile: the forward compiled, its VJP through autograd (AOTAutograd's compiled backward);
#: forward mode and second order as torch.func functions compiled whole (as the adapter runs them).
_TORCH_COMPILED = {
    "vjp": ("f1 = torch.compile(lambda a: first(pool_op(a)))\n"
            "def compute():\n    xt = torch.tensor(x, requires_grad=True)\n    out = f1(xt)\n"
            "    (dx,) = torch.autograd.grad(out, xt, torch.tensor(dy))\n"
            "    return {'y': out.detach().numpy(), 'dx': dx.numpy()}\n"),
    "jvp": ("from torch import func\nf1 = lambda a: first(pool_op(a))\n"
            "run = torch.compile(lambda a, b: func.jvp(f1, (a,), (b,))[1])\n"
            "def compute():\n    return {'jvp': run(torch.tensor(x), torch.tensor(t)).numpy()}\n"),
    "hvp": ("from torch import func\nf1 = lambda a: first(pool_op(a))\n"
            "vjp = lambda a, g: func.vjp(f1, a)[1](g)[0]\n"
            "run = torch.compile(lambda a, g, w: func.vjp(vjp, a, g)[1](w))\n"
            "def compute():\n    ddx, ddy = run(torch.tensor(x), torch.tensor(dy), torch.tensor(v))\n"
            "    return {'ddx': ddx.numpy(), 'ddy': ddy.numpy()}\n"),
}
_TF = {
    "vjp": ("def compute(xt, g):\n    with tf.GradientTape() as tape:\n        tape.watch(xt)\n"
            "        out = pool_op(xt)\n    return {'y': out, 'dx': tape.gradient(out, xt, output_gradients=g)}\n"
            "{C}got = {k: val.numpy() for k, val in compute(tf.constant(x), tf.constant(dy)).items()}\n"),
    "jvp": ("def compute(xt, tt):\n    with tf.autodiff.ForwardAccumulator(xt, tt) as acc:\n"
            "        out = pool_op(xt)\n    tangent = acc.jvp(out)\n"
            "    return {'jvp': tf.zeros_like(out) if tangent is None else tangent}\n"
            "{C}got = {k: val.numpy() for k, val in compute(tf.constant(x), tf.constant(t)).items()}\n"),
    "hvp": ("def compute(xt, g, w):\n    with tf.GradientTape() as outer:\n        outer.watch([xt, g])\n"
            "        with tf.GradientTape() as inner:\n            inner.watch(xt)\n            out = pool_op(xt)\n"
            "        dx = inner.gradient(out, xt, output_gradients=g)\n"
            "    ddx, ddy = outer.gradient(dx, [xt, g], output_gradients=w)\n"
            "    return {'ddx': tf.zeros_like(xt) if ddx is None else ddx, 'ddy': tf.zeros_like(g) if ddy is None else ddy}\n"
            "{C}got = {k: val.numpy() for k, val in compute(tf.constant(x), tf.constant(dy), tf.constant(v)).items()}\n"),
    "vmap": ("def vjp(a, g):\n    with tf.GradientTape() as tape:\n        tape.watch(a)\n        out = pool_op(a)\n"
             "    return tape.gradient(out, a, output_gradients=g)\n\n\n"
             "def tangent(a, b):\n    with tf.autodiff.ForwardAccumulator(a, b) as acc:\n        out = pool_op(a)\n"
             "    return acc.jvp(out)\n\n\n"
             "def vmapped(f, n, i, o, slots, *arrays):  # as the adapter calls it: one tf.function, no fallback\n"
             "    mapped = tf.function(lambda *e: tf.vectorized_map(lambda a: f(*a), e, fallback_to_while_loop=False))\n"
             "    return mapped(*(tf.constant(batch(a, n, i, slots)) for a in arrays))\n\n\n"
             "layouts = [(n, 0, 0, slots) for n, _, _, slots in positions(x.ndim)]  # tf.vectorized_map: axis 0 only\n"
             "runs = {'y': lambda *b: vmapped(pool_op, *b, x), 'dx': lambda *b: vmapped(vjp, *b, x, dy),\n"
             "        'jvp': lambda *b: vmapped(tangent, *b, x, t)}\n" + _EACH),
}
_JAX = {
    "vjp": ("def compute(a, g):\n    out, pullback = jax.vjp(pool_op, a)\n    return {'y': out, 'dx': pullback(g)[0]}\n"
            "{C}got = {k: np.asarray(val) for k, val in compute(jnp.asarray(x), jnp.asarray(dy)).items()}\n"),
    "jvp": ("def compute(a, b):\n    return {'jvp': jax.jvp(pool_op, (a,), (b,))[1]}\n"
            "{C}got = {k: np.asarray(val) for k, val in compute(jnp.asarray(x), jnp.asarray(t)).items()}\n"),
    "hvp": ("def compute(a, g, w):\n    vjp = lambda p, q: jax.vjp(pool_op, p)[1](q)[0]\n"
            "    ddx, ddy = jax.vjp(vjp, a, g)[1](w)\n    return {'ddx': ddx, 'ddy': ddy}\n"
            "{C}got = {k: np.asarray(val) for k, val in compute(jnp.asarray(x), jnp.asarray(dy), jnp.asarray(v)).items()}\n"),
    "vmap": ("layouts = positions(x.ndim)\n"
             "def vm(f, n, i, o, slots, *arrays):\n"
             "    return {C}(jax.vmap(f, in_axes=i, out_axes=o))(*(jnp.asarray(batch(a, n, i, slots)) for a in arrays))\n\n\n"
             "runs = {'y': lambda *b: vm(pool_op, *b, x),\n"
             "        'dx': lambda *b: vm(lambda a, g: jax.vjp(pool_op, a)[1](g)[0], *b, x, dy),\n"
             "        'jvp': lambda *b: vm(lambda a, c: jax.jvp(pool_op, (a,), (c,))[1], *b, x, t)}\n" + _EACH),
}
#: The batches symjac.verifiers._vmap.PerSample runs a batching rule at: (size, batch axis in the
#: arguments, in the result, the sample's slots), the others holding its companions.
_BATCH = ("LAYOUTS = " + repr([(lay.size, lay.in_axis, lay.out_axis, lay.slots) for lay in LAYOUTS]) + "\n\n\n"
          "def positions(rank):  # -1: after the sample's axes\n"
          "    return [(n, i % (rank + 1), o % (rank + 1), slots) for n, i, o, slots in LAYOUTS]\n\n\n"
          "def companion(a, slot):  # the sample negated and reversed, rolled by one, or reversed\n"
          "    flat = a.reshape(-1)\n"
          "    return [-flat[::-1], np.roll(flat, 1), flat[::-1]][slot % 3].reshape(a.shape)\n\n\n"
          "def batch(a, n, axis, slots):\n"
          "    return np.stack([a if s in slots else companion(a, s) for s in range(n)], axis=axis)\n\n\n")
_FIRST = "def first(out):\n    return out[0] if isinstance(out, (tuple, list)) else out\n\n\n"


def _driver(framework: str, transform: str, compiled: bool) -> str | None:
    """The transform code of ``framework``'s snippet, eager or compiled (the one the cell ran)."""
    if framework == "torch":
        if compiled and transform != "vmap":
            return _TORCH_COMPILED[transform] + _FIVE.format(call="compute()")
        return _TORCH.get(transform, "").replace("{C}", "torch.compile" if compiled else "") or None
    text = (_TF if framework == "tensorflow" else _JAX).get(transform)
    if text is None:
        return None
    if transform == "vmap":
        return text.replace("{C}", "jax.jit" if compiled and framework == "jax" else "")
    if not compiled:  # the eager call once
        return text.replace("{C}", "")
    call = text[text.index("{C}got = ") + len("{C}got = "):].rstrip("\n")
    wrap = "compute = tf.function(compute)\n" if framework == "tensorflow" else "compute = jax.jit(compute)\n"
    return text[:text.index("{C}")] + wrap + _FIVE.format(call=call)


def _function(snippet: str) -> tuple[str, str] | None:
    """(the snippet's imports and set-up, then ``pool_op``; its framework), or None for a snippet of a
    form not known here (a user adapter's)."""
    lines = snippet.splitlines()
    if "torch.autograd.grad" in snippet and "xt = torch.tensor(x, requires_grad=True)" in lines:
        i = lines.index("xt = torch.tensor(x, requires_grad=True)")
        call = next((ln[4:] for ln in lines[i + 1:] if ln.startswith("y = ") and "xt" in ln), None)
        framework = "torch"
    elif "tf.GradientTape" in snippet and "xt = tf.constant(x)" in lines:
        i = lines.index("xt = tf.constant(x)")
        call = next((ln.strip()[4:] for ln in lines[i + 1:] if ln.strip().startswith("y = ")), None)
        framework = "tensorflow"
    elif "jax.vjp(f," in snippet:
        i = next(k for k, ln in enumerate(lines) if ln.startswith("y, pullback = jax.vjp(f,"))
        call, framework = "f(xt)", "jax"
    else:
        return None
    if call is None or "xt" not in call:
        return None
    head = "\n".join(lines[:i])
    return f"{head}\n\n\n{_FIRST}{_BATCH}def pool_op(xt):\n    return {call}\n\n\n", framework


def _exact(f: Any) -> np.ndarray | None:
    try:
        out: np.ndarray = np.vectorize(lambda e: float(e), otypes=[np.float64])(np.asarray(f()))
        return out
    except Exception:  # noqa: BLE001 - no exact value (lp at an all-zero window): the script says so
        return None


def transform_lines(r: dict[str, Any], spec: Any, x: np.ndarray, dy: np.ndarray, array_text: Any) -> list[str]:
    """The script lines after ``x`` and ``dy``: the direction ``t`` (= ``v``), the framework's transform
    of the op, symjac's exact values and the comparison."""
    from symjac.pool._jacobian import forward, hvp, jvp, vjp

    transform, dt, compiled = r["config"].get("transform", "vjp"), r["dtype"], bool(r["config"].get("compiled"))
    rng = np.random.default_rng(int(r["config"].get("seed", 0)) + 23)
    t = (rng.integers(-8, 9, x.shape) / 4).astype(x.dtype)  # quarter-integers: exact in every dtype
    x64, dy64, t64 = (np.asarray(a, dtype=np.float64) for a in (x, dy, t))
    expected: dict[str, np.ndarray | None]
    if transform == "jvp":
        expected = {"jvp": _exact(lambda: jvp(spec, x64, t64))}
    elif transform == "hvp":
        expected = {"ddx": _exact(lambda: hvp(spec, x64, dy64, t64)), "ddy": _exact(lambda: jvp(spec, x64, t64))}
    elif transform == "vjp":  # a compiled cell's: the forward and the VJP
        expected = {"y": _exact(lambda: forward(spec, x64)), "dx": _exact(lambda: vjp(spec, x64, dy64))}
    else:  # vmap: the sample's slot of the batched forward, VJP and JVP
        expected = {"y": _exact(lambda: forward(spec, x64)), "dx": _exact(lambda: vjp(spec, x64, dy64)),
                    "jvp": _exact(lambda: jvp(spec, x64, t64))}
    lines = [f"t = v = {array_text(t, dt)}  # the tangent / second-order direction", ""]
    built = _function(r.get("reproducer") or "")
    driver = None if built is None else _driver(built[1], transform, compiled)
    if built is None or driver is None:
        lines += ["# (the adapter's snippet has no form symjac knows: call your op's "
                  f"{transform} here and set got = {{name: array}})", "got = {}"]
    else:
        head, framework = built
        if framework == "jax" and not compiled:  # the adapter's eager mode: every jax.jit runs op by op
            driver = "jax.config.update('jax_disable_jit', True)\n" + driver
        lines += [head + "try:", *("    " + ln for ln in driver.splitlines()),
                  "except Exception as exc:  # the framework's transform raised: that is the finding",
                  "    print(f'{type(exc).__name__}: {exc}'.splitlines()[0])", "    got = {}"]
    lines.append("expected = {" + ", ".join(
        f"{name!r}: {'None' if want is None else array_text(want, 'float64')}" for name, want in expected.items())
        + "}")
    lines += ["for name, want in expected.items():",
              "    calls = got.get(name)",
              "    calls = [calls] if calls is not None and not isinstance(calls, list) else calls",
              "    if not calls or want is None:",
              "        print(f'{name}: framework {None if not calls else np.asarray(calls[0]).tolist()}, exact '",
              "              f'{None if want is None else want.tolist()}')",
              "        continue",
              "    calls = [np.asarray(c, dtype=np.float64) for c in calls]",
              "    if any(c.shape != want.shape for c in calls):",
              "        print(f'{name}: shape {calls[0].shape}, expected {want.shape}')",
              "        continue",
              "    # the call farthest from the exact values (of several, where the script repeats it)",
              "    have = max(calls, key=lambda c: int((~(np.abs(c - want) == 0)).sum()))",
              "    diff = np.abs(have - want)",
              "    bad = int((~(diff == 0)).sum())",
              "    again = '' if len(calls) == 1 else f' (the worst of {len(calls)} calls, ' + \\",
              "        f'{sum(not np.array_equal(c, calls[0], equal_nan=True) for c in calls[1:])} differ from the first)'",
              "    print(f'{name}: {bad} of {diff.size} values differ{again}; max |difference| '",
              "          f'{np.nanmax(diff, initial=0):g}{\"; NaN\" if np.isnan(have).any() else \"\"}; sum '",
              "          f'{np.nansum(have):g}, expected {want.sum():g}')"]
    return lines

