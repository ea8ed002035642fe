"""The reproducer scripts of a conformance cell under ``jvp``, ``hvp`` or ``vmap``.

The adapter's snippet (``Impl.reproducer``) calls the framework op on ``x`` and its VJP on
``dy``; here its op call is taken out as a function ``pool_op`` of a framework tensor and driven by
the framework's own transform (PyTorch forward AD, double backward, ``torch.func.vmap``;
``tf.autodiff.ForwardAccumulator``, nested tapes, ``tf.vectorized_map``; ``jax.jvp``,
``jax.vjp`` of the VJP, ``jax.vmap``), as the adapters call them. The script prints the
framework's values beside symjac's exact ones (a raising transform prints its exception).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Each batched call on its own (one raising does not hide the others), five times (a batching rule
#: may differ from call to call); the sample's slot 0.
_EACH = ("got = {}\nfor name, run in runs.items():\n    try:\n"
         "        got[name] = [np.asarray(run())[0] for _ in range(5)]\n"
         "    except Exception as exc:  # the batching rule raised: that is the finding\n"
         "        print(f'{name}: {type(exc).__name__}: {exc}'.splitlines()[0])\n")
#: Per framework: the marker of its snippet, and the transform code run on ``pool_op`` (a tensor -> tensor).
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
             "xb, dyb, tb = (torch.tensor(batch(a)) for a in (x, dy, t))\n"
             "runs = {'y': lambda: func.vmap(f1)(xb),\n"
             "        'dx': lambda: func.vmap(lambda a, g: func.vjp(f1, a)[1](g)[0])(xb, dyb),\n"
             "        'jvp': lambda: func.vmap(lambda a, b: func.jvp(f1, (a,), (b,))[1])(xb, tb)}\n"
             + _EACH),
}
_TF = {
    "jvp": ("xt = tf.constant(x)\nwith tf.autodiff.ForwardAccumulator(xt, tf.constant(t)) as acc:\n"
            "    out = pool_op(xt)\ntangent = acc.jvp(out)\n"
            "got = {'jvp': np.zeros(out.shape) if tangent is None else tangent.numpy()}\n"),
    "hvp": ("xt, g = tf.constant(x), tf.constant(dy)\nwith tf.GradientTape() as outer:\n    outer.watch([xt, g])\n"
            "    with tf.GradientTape() as inner:\n        inner.watch(xt)\n        out = pool_op(xt)\n"
            "    dx = inner.gradient(out, xt, output_gradients=g)\n"
            "ddx, ddy = outer.gradient(dx, [xt, g], output_gradients=tf.constant(v))\n"
            "got = {'ddx': np.zeros_like(x) if ddx is None else ddx.numpy(), "
            "'ddy': np.zeros_like(dy) if ddy is None else ddy.numpy()}\n"),
    "vmap": ("def vjp(a, g):\n    with tf.GradientTape() as tape:\n        tape.watch(a)\n        out = pool_op(a)\n"
             "    return tape.gradient(out, a, output_gradients=g)\n\n\n"
             "def tangent(a, b):\n    with tf.autodiff.ForwardAccumulator(a, b) as acc:\n        out = pool_op(a)\n"
             "    return acc.jvp(out)\n\n\n"
             "def vmapped(f, *arrays):  # as the adapter calls it: one tf.function, no while-loop fallback\n"
             "    mapped = tf.function(lambda *e: tf.vectorized_map(lambda a: f(*a), e, fallback_to_while_loop=False))\n"
             "    return mapped(*(tf.constant(batch(a)) for a in arrays))\n\n\n"
             "runs = {'y': lambda: vmapped(pool_op, x), 'dx': lambda: vmapped(vjp, x, dy),\n"
             "        'jvp': lambda: vmapped(tangent, x, t)}\n" + _EACH),
}
_JAX = {
    "jvp": "got = {'jvp': np.asarray(jax.jvp(pool_op, (jnp.asarray(x),), (jnp.asarray(t),))[1])}\n",
    "hvp": ("vjp = lambda a, g: jax.vjp(pool_op, a)[1](g)[0]\n"
            "ddx, ddy = jax.vjp(vjp, jnp.asarray(x), jnp.asarray(dy))[1](jnp.asarray(v))\n"
            "got = {'ddx': np.asarray(ddx), 'ddy': np.asarray(ddy)}\n"),
    "vmap": ("xb, dyb, tb = (jnp.asarray(batch(a)) for a in (x, dy, t))\n"
             "runs = {'y': lambda: jax.vmap(pool_op)(xb),\n"
             "        'dx': lambda: jax.vmap(lambda a, g: jax.vjp(pool_op, a)[1](g)[0])(xb, dyb),\n"
             "        'jvp': lambda: jax.vmap(lambda a, b: jax.jvp(pool_op, (a,), (b,))[1])(xb, tb)}\n" + _EACH),
}
#: A batch of the sample and its companion (negated, reversed), as symjac.frameworks.conform._vmap builds it.
_BATCH = "def batch(a):\n    return np.stack([a, np.ascontiguousarray(-a.reshape(-1)[::-1].reshape(a.shape))])\n\n\n"
_FIRST = "def first(out):\n    return out[0] if isinstance(out, (tuple, list)) else out\n\n\n"


def _function(snippet: str) -> tuple[str, dict[str, str]] | None:
    """(the snippet's imports and set-up, then ``pool_op``; the framework's transform code), or None
    for a snippet of a form not known here (a user adapter's)."""
    lines = snippet.splitlines()
    if "torch.autograd.grad" in snippet and "xt = torch.tensor(x, requires_grad=True)" in lines:
        i = lines.index("xt = torch.tensor(x, requires_grad=True)")
        call = next((ln[4:] for ln in lines[i + 1:] if ln.startswith("y = ") and "xt" in ln), None)
        drivers = _TORCH
    elif "tf.GradientTape" in snippet and "xt = tf.constant(x)" in lines:
        i = lines.index("xt = tf.constant(x)")
        call = next((ln.strip()[4:] for ln in lines[i + 1:] if ln.strip().startswith("y = ")), None)
        drivers = _TF
    elif "jax.vjp(f," in snippet:
        i = next(k for k, ln in enumerate(lines) if ln.startswith("y, pullback = jax.vjp(f,"))
        call, drivers = "f(xt)", _JAX
    else:
        return None
    if call is None or "xt" not in call:
        return None
    head = "\n".join(lines[:i])
    return f"{head}\n\n\n{_FIRST}{_BATCH}def pool_op(xt):\n    return {call}\n\n\n", drivers


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

    transform, dt = r["config"]["transform"], r["dtype"]
    rng = np.random.default_rng(int(r["config"].get("seed", 0)) + 23)
    t = (rng.integers(-8, 9, x.shape) / 4).astype(x.dtype)  # quarter-integers: exact in every dtype
    x64, dy64, t64 = (np.asarray(a, dtype=np.float64) for a in (x, dy, t))
    expected: dict[str, np.ndarray | None]
    if transform == "jvp":
        expected = {"jvp": _exact(lambda: jvp(spec, x64, t64))}
    elif transform == "hvp":
        expected = {"ddx": _exact(lambda: hvp(spec, x64, dy64, t64)), "ddy": _exact(lambda: jvp(spec, x64, t64))}
    else:  # vmap: the sample's slot of the batched forward, VJP and JVP
        expected = {"y": _exact(lambda: forward(spec, x64)), "dx": _exact(lambda: vjp(spec, x64, dy64)),
                    "jvp": _exact(lambda: jvp(spec, x64, t64))}
    lines = [f"t = v = {array_text(t, dt)}  # the tangent / second-order direction", ""]
    built = _function(r.get("reproducer") or "")
    if built is None:
        lines += ["# (the adapter's snippet has no form symjac knows: call your op's "
                  f"{transform} here and set got = {{name: array}})", "got = {}"]
    else:
        head, drivers = built
        lines += [head + "try:", *("    " + ln for ln in drivers[transform].splitlines()),
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

