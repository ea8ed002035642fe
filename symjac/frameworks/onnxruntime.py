"""ONNX Runtime adapter (forward only): a one-node ONNX model built with ``onnx.helper``, run by
``onnxruntime`` on CPU. ONNX Runtime has no autodiff, so every :class:`Impl` has ``backward=None``.

Mapping of the ONNX operator attributes (opset 22) to the symjac spec (layout N, C, D1, ..., Dn =
``channels_first``):

=================================  ======================================================
ONNX                               symjac
=================================  ======================================================
``kernel_shape=[k1, ..., kn]``     ``kernel=(k1, ..., kn)`` (rank n)
``strides`` (absent: 1 per axis)   ``stride``
``pads=[b1, ..., bn, e1, ..., en]``  ``padding=((b1, e1), ..., (bn, en))`` (all 0: ``"valid"``)
``auto_pad="VALID"``               ``"valid"``
``auto_pad="SAME_UPPER"``          ``"same"`` (extra cell at the end), pads sized from the
                                   dilated kernel: (out - 1)·s + (k - 1)·d + 1 - L
``auto_pad="SAME_LOWER"``          ``"same_lower"`` (extra cell at the beginning)
``ceil_mode=1``                    ``ceil_mode=True`` (a window starting in the end padding
                                   is ignored); with VALID the ONNX output formula is
                                   ambiguous (onnx/onnx#3314): :class:`Unsupported`
``count_include_pad=0`` (default)  ``divisor="exclude_pad"``; ``1`` → ``"include_pad"``
``dilations``                      ``dilation``
``GlobalMaxPool/GlobalAverage``    ``GlobalPool(mode, rank)``
=================================  ======================================================

ONNX Runtime's CPU provider has float16 and float32 kernels for all four ops and float64 for
``MaxPool`` only (see :func:`limitation`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Config, Impl, KnownDefect, Unsupported, generate, label, make as _make, require
from symjac.pool._spec import GlobalPool, Pool

FRAMEWORK = "onnxruntime"
OPSET = 22
IR_VERSION = 10  # what onnxruntime >= 1.20 reads; onnx.helper would write the newest IR it knows
_AUTO_PAD = {"NOTSET": None, "VALID": "valid", "SAME_UPPER": "same", "SAME_LOWER": "same_lower"}


def build_model(op: str, attributes: dict[str, Any], dtype: Any, ndim: int) -> bytes:
    """The serialized one-node ONNX model ``Y = op(X, **attributes)`` for ``ndim``-D input of ``dtype``."""
    onnx = require("onnx")
    helper = onnx.helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node(op, ["X"], ["Y"], **attributes)
    graph = helper.make_graph([node], f"symjac_{op}", [helper.make_tensor_value_info("X", elem, [None] * ndim)],
                              [helper.make_tensor_value_info("Y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return bytes(model.SerializeToString())


def run_node(op: str, attributes: dict[str, Any]) -> Callable[[np.ndarray], np.ndarray]:
    """``forward(x)``: one ONNX Runtime session per input dtype and rank (cached), CPU provider."""
    ort = require("onnxruntime")
    sessions: dict[tuple[str, int], Any] = {}

    def forward(x: np.ndarray) -> np.ndarray:
        key = (np.dtype(x.dtype).str, x.ndim)
        if key not in sessions:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1  # tiny inputs: threads only add overhead
            sessions[key] = ort.InferenceSession(build_model(op, attributes, x.dtype, x.ndim), options,
                                                 providers=["CPUExecutionProvider"])
        return np.asarray(sessions[key].run(None, {"X": np.ascontiguousarray(x)})[0])

    return forward


def _reproducer(op: str, attributes: dict[str, Any]) -> str:
    attrs = ", ".join(f"{k}={v!r}" for k, v in attributes.items())
    return ("import numpy as np\nimport onnxruntime as ort\nfrom onnx import helper\n"
            f"node = helper.make_node({op!r}, ['X'], ['Y']{', ' if attrs else ''}{attrs})\n"
            "elem = helper.np_dtype_to_tensor_dtype(x.dtype)\n"
            "graph = helper.make_graph([node], 'g', [helper.make_tensor_value_info('X', elem, list(x.shape))],\n"
            "                          [helper.make_tensor_value_info('Y', elem, None)])\n"
            f"model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', {OPSET})])\n"
            f"model.ir_version = {IR_VERSION}\n"
            "sess = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])\n"
            "y = sess.run(None, {'X': x})[0]\nprint('y =', y.shape, y)\n")


def wrap_node(op: str, **attributes: Any) -> Impl:
    """Any single-input ONNX operator as a forward-only :class:`Impl` (``backward=None``)."""
    return Impl(run_node(op, attributes), None, FRAMEWORK, op, dict(attributes), _reproducer(op, attributes))


def wrap(model: Any, *, name: str | None = None, input_name: str | None = None) -> Impl:
    """A whole ONNX model (path, bytes or ``onnx.ModelProto``) with one input and one output, forward only."""
    ort = require("onnxruntime")
    data = model.SerializeToString() if hasattr(model, "SerializeToString") else model
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feed = input_name or session.get_inputs()[0].name

    def forward(x: np.ndarray) -> np.ndarray:
        return np.asarray(session.run(None, {feed: np.ascontiguousarray(x)})[0])

    what = name or (model if isinstance(model, str) else "model")
    reproducer = (f"import onnxruntime as ort\nsess = ort.InferenceSession({what!r})  # your model\n"
                  f"y = sess.run(None, {{{feed!r}: x}})[0]\nprint('y =', y)\n")
    return Impl(forward, None, FRAMEWORK, str(what), {}, reproducer)


# ------------------------------------------------------------------ mapping


def _spec(mode: str, kernel_shape: Sequence[int], strides: Sequence[int] | None, pads: Sequence[int] | None,
          auto_pad: str, ceil_mode: int, dilations: Sequence[int] | None, divisor: str = "exclude_pad") -> Pool:
    kernel = tuple(int(k) for k in kernel_shape)
    rank = len(kernel)
    if auto_pad not in _AUTO_PAD:
        raise Unsupported(f"auto_pad={auto_pad!r}: give one of {', '.join(map(repr, _AUTO_PAD))}")
    padding: Any = _AUTO_PAD[auto_pad]
    if padding is None:
        p = [0] * (2 * rank) if pads is None else [int(v) for v in pads]
        if len(p) != 2 * rank:
            raise Unsupported(f"pads={pads!r}: give {2 * rank} ints [x1_begin, ..., x{rank}_begin, x1_end, ...]")
        padding = tuple((p[i], p[i + rank]) for i in range(rank)) if any(p) else "valid"
    elif ceil_mode and padding == "valid":
        raise Unsupported("ceil_mode=1 with auto_pad='VALID': the ONNX output-shape formula for this case is "
                          "ambiguous (onnx/onnx#3314); use auto_pad='NOTSET' with pads")
    # With SAME_* the output size is ceil(L / stride) whatever ceil_mode says (the ONNX formula).
    ceil = bool(ceil_mode) and padding not in ("same", "same_lower")
    return Pool(mode, kernel, stride=(1,) * rank if strides is None else tuple(int(s) for s in strides),
                padding=padding, dilation=(1,) * rank if dilations is None else tuple(int(d) for d in dilations),
                ceil_mode=ceil, divisor=divisor)


def _attributes(**attributes: Any) -> dict[str, Any]:
    """ONNX attributes as given, dropping the ones left at ``None`` (absent from the node)."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in attributes.items() if v is not None}


def max_pool(kernel_shape: Sequence[int], strides: Sequence[int] | None = None, pads: Sequence[int] | None = None,
             auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: Sequence[int] | None = None,
             storage_order: int = 0) -> tuple[Pool, Impl]:
    """ONNX ``MaxPool`` run by ONNX Runtime, and its spec."""
    spec = _spec("max", kernel_shape, strides, pads, auto_pad, ceil_mode, dilations)
    return spec, wrap_node("MaxPool", **_attributes(kernel_shape=kernel_shape, strides=strides, pads=pads,
                                                    auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations,
                                                    storage_order=storage_order))


def average_pool(kernel_shape: Sequence[int], strides: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 auto_pad: str = "NOTSET", ceil_mode: int = 0, count_include_pad: int = 0,
                 dilations: Sequence[int] | None = None) -> tuple[Pool, Impl]:
    """ONNX ``AveragePool`` run by ONNX Runtime, and its spec (``count_include_pad=0`` → ``exclude_pad``)."""
    divisor = "include_pad" if count_include_pad else "exclude_pad"
    spec = _spec("avg", kernel_shape, strides, pads, auto_pad, ceil_mode, dilations, divisor)
    return spec, wrap_node("AveragePool", **_attributes(kernel_shape=kernel_shape, strides=strides, pads=pads,
                                                        auto_pad=auto_pad, ceil_mode=ceil_mode,
                                                        count_include_pad=count_include_pad, dilations=dilations))


def global_max_pool(rank: int = 2) -> tuple[GlobalPool, Impl]:
    """ONNX ``GlobalMaxPool`` (``rank`` spatial dims, symjac's: ONNX takes it from the input)."""
    return GlobalPool("max", rank=rank), wrap_node("GlobalMaxPool")


def global_average_pool(rank: int = 2) -> tuple[GlobalPool, Impl]:
    """ONNX ``GlobalAveragePool`` and its spec."""
    return GlobalPool("avg", rank=rank), wrap_node("GlobalAveragePool")


def make(config: Config) -> tuple[Any, Impl]:
    """``(spec, impl)`` of one configuration."""
    return _make(sys.modules[__name__], config)


def limitation(config: Config, dtype: Any) -> str | None:
    """Why ONNX Runtime cannot run ``config`` in ``dtype`` (a kernel or case it rejects), or None."""
    if np.dtype(dtype).name == "bfloat16":  # its MaxPool(22) etc. raise NOT_IMPLEMENTED for bfloat16
        return "ONNX Runtime's CPU provider has no bfloat16 kernel for MaxPool, AveragePool, GlobalMaxPool, " \
               "GlobalAveragePool"
    if np.dtype(dtype) == np.float64 and config.op != "max_pool":
        return "ONNX Runtime's CPU provider has no float64 kernel for AveragePool, GlobalMaxPool, GlobalAveragePool"
    kw = config.kwargs
    if str(kw.get("auto_pad", "")).startswith("SAME"):
        spatial = config.input_shape[2:]
        for n, k, s, d in zip(spatial, kw["kernel_shape"], kw.get("strides") or [1] * len(spatial),
                              kw.get("dilations") or [1] * len(spatial)):
            if (-(-n // s) - 1) * s + (k - 1) * d + 1 - n < 0:
                return ("the ONNX SAME formula gives a negative total pad here (stride > dilated kernel); ONNX "
                        "Runtime raises 'padding values must be non-negative' (symjac, like TensorFlow, clamps "
                        "it to 0)")
    return None


def known_defect(config: Config) -> KnownDefect | None:
    """A known ONNX Runtime defect ``config`` runs into (symjac reports it: a wrong output shape), or None."""
    kw = config.kwargs
    if str(kw.get("auto_pad", "NOTSET")).startswith("SAME") and max(kw.get("dilations") or [1]) > 1:
        return KnownDefect("ONNX Runtime sizes SAME_UPPER/SAME_LOWER padding from the undilated kernel when "
                           "dilations > 1 (the ONNX spec and ORT's own shape inference use the dilated one)",
                           ("bad_output",))
    return None


# ------------------------------------------------------------------ configurations

_SIDES = {1: (3, 10), 2: (3, 7), 3: (2, 5)}


def _pool_family(op: str, rank: int, same_dilated: bool = False) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        lo, hi = _SIDES[rank]
        shape = (1, int(rng.integers(1, 3)), *(int(v) for v in rng.integers(lo, hi + 1, rank)))
        k = [int(v) for v in rng.integers(1, 4, rank)]
        kwargs: dict[str, Any] = {"kernel_shape": k}
        if rng.random() < 0.7:
            kwargs["strides"] = [int(v) for v in rng.integers(1, 4, rank)]
        d = [int(v) for v in rng.integers(1, 3, rank)] if rng.random() < 0.4 else None
        r = rng.random()
        auto_pad = "NOTSET" if r < 0.55 else "VALID" if r < 0.7 else "SAME_UPPER" if r < 0.85 else "SAME_LOWER"
        if same_dilated:
            auto_pad, d = ("SAME_UPPER" if r < 0.5 else "SAME_LOWER"), [int(v) for v in rng.integers(2, 4, rank)]
        elif auto_pad.startswith("SAME"):
            d = None  # SAME with dilations > 1 is a known ORT defect: see known_defect
        if auto_pad == "NOTSET":
            # ONNX Runtime: each pad smaller than the kernel.
            kwargs["pads"] = [int(rng.integers(0, k[i % rank])) for i in range(2 * rank)]
            kwargs["ceil_mode"] = int(rng.random() < 0.4)
        else:
            kwargs["auto_pad"] = auto_pad
        if d is not None:
            kwargs["dilations"] = d
        if op == "average_pool":
            kwargs["count_include_pad"] = int(rng.random() < 0.5)
        parts = {"k": tuple(k), "s": tuple(kwargs.get("strides", ())) or None, "d": tuple(d) if d else None,
                 "pads": tuple(kwargs["pads"]) if "pads" in kwargs else None,
                 "auto": auto_pad if auto_pad != "NOTSET" else None, "ceil": bool(kwargs.get("ceil_mode")),
                 "include_pad": bool(kwargs.get("count_include_pad"))}
        return Config(op, kwargs, shape, label("MaxPool" if op == "max_pool" else "AveragePool", **parts))

    return draw


def _global_family(op: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        lo, hi = _SIDES[rank]
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 3)), *(int(v) for v in rng.integers(lo, hi + 1, rank)))
        name = "GlobalMaxPool" if op == "global_max_pool" else "GlobalAveragePool"
        return Config(op, {"rank": rank}, shape, label(name, rank=rank))

    return draw


def configurations(grid: str = "small", *, include_known_defects: bool = False) -> Iterator[Config]:
    """ONNX MaxPool/AveragePool over 1/2/3-D (explicit asymmetric pads, VALID, SAME_UPPER/LOWER, ceil_mode,
    count_include_pad, dilations) and the global pools, twice the common grid size with MaxPool half of it (the only op with
    a float64 kernel). ``include_known_defects`` adds SAME with dilations > 1 (see :func:`known_defect`)."""
    families = [_pool_family("max_pool", r) for r in (1, 2, 3)] * 3
    families += [_pool_family("average_pool", r) for r in (1, 2, 3)]
    families += [_global_family(op, r) for op in ("global_max_pool", "global_average_pool") for r in (1, 2, 3)]
    if include_known_defects:
        families += [_pool_family(op, r, same_dilated=True) for op in ("max_pool", "average_pool") for r in (1, 2)]
    yield from generate(grid, families, make, scale=2)
