"""Fractional max pooling (issue 31, item 3): ``symjac.FractionalMaxPool``.

The windows come from PyTorch's ``generate_intervals`` (window i of an axis of length L, kernel k,
output size o: k cells from floor((i + u)·α) - floor(u·α), α = (L - k)/(o - 1), the last at L - k) or
TensorFlow's pooling sequences ([s_i, s_{i+1}), to s_{i+1} included when overlapping). The NumPy
references below are written from those descriptions (not from symjac's geometry); PyTorch's and
TensorFlow's own ops are the independent oracles. Each planted defect is one a fractional kernel
really has: another rounding of the interval formula, the pinned last window off by one, the
samples read in the other axis order, ``overlapping`` ignored, ties routed outside the Clarke set,
the upstream gradient ignored. All are caught at symjac's defaults (no shape, no input given).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import cli_runner
import symjac
from symjac.io._specwrite import dumps, operator_table


# ------------------------------------------------------------------ NumPy references


def torch_starts(length: int, k: int, o: int, u: Fraction, bug: str | None = None) -> list[int]:
    """PyTorch's generate_intervals as its source describes it (exact rationals)."""
    out = [length - k] * o
    if o > 1:
        alpha = Fraction(length - k, o - 1)
        rnd = math.ceil if bug == "ceil" else math.floor
        out[:-1] = [rnd((i + u) * alpha) - rnd(u * alpha) for i in range(o - 1)]
    if bug == "last" and o > 1 and length - k - 1 > out[-2]:
        out[-1] = length - k - 1  # the pinned last window one cell early
    return out


def torch_windows(spatial: tuple[int, ...], kernel: tuple[int, ...], out: tuple[int, ...], samples: tuple[Any, ...],
                  bug: str | None = None) -> list[list[range]]:
    return [[range(s, s + k) for s in torch_starts(n, k, o, Fraction(u), bug)]
            for n, k, o, u in zip(spatial, kernel, out, samples)]


def tf_windows(sequences: tuple[tuple[int, ...], ...], overlapping: bool) -> list[list[range]]:
    return [[range(a, min(b + int(overlapping), seq[-1])) for a, b in zip(seq, seq[1:])] for seq in sequences]


def reference(windows_of: Any, bug: str | None = None) -> dict[str, Any]:
    """forward and backward of max pooling over the windows ``windows_of(spatial)`` gives, channels
    first; the first maximal cell (row-major) wins, as PyTorch's and TensorFlow's kernels route."""

    def table(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        axes = windows_of(x.shape[2:])
        flat = x.reshape(x.shape[:2] + (-1,))
        cells, width = [], max(math.prod(len(w) for w in combo) for combo in _products(axes))
        for combo in _products(axes):
            idx = np.ravel_multi_index(np.meshgrid(*combo, indexing="ij"), x.shape[2:]).reshape(-1)
            cells.append(np.pad(idx, (0, width - idx.size), constant_values=-1))
        c = np.array(cells)  # (windows, width), -1 padded
        vals = np.where(c >= 0, flat[..., np.maximum(c, 0)], -np.inf)
        pick = vals.argmax(axis=-1)
        if bug == "tie_last":
            pick = vals.shape[-1] - 1 - vals[..., ::-1].argmax(axis=-1)
        return c, pick

    def forward(x: np.ndarray) -> np.ndarray:
        c, pick = table(x)
        flat = x.reshape(x.shape[:2] + (-1,))
        y = np.take_along_axis(flat, c[np.arange(c.shape[0]), pick], axis=-1)
        return y.reshape(x.shape[:2] + tuple(len(a) for a in windows_of(x.shape[2:])))

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        c, pick = table(x)
        flat = x.reshape(x.shape[:2] + (-1,))
        g = dy.reshape(dy.shape[:2] + (-1,))
        if bug == "no_upstream":
            g = np.ones_like(g)
        dx = np.zeros((*flat.shape[:2], flat.shape[2] + 1), dtype=x.dtype)  # a last column for padded slots
        n, ch = (a[..., None] for a in np.indices(flat.shape[:2]))
        if bug == "tie_all":  # the whole gradient to every maximal cell: outside the Clarke set at a tie
            vals = np.where(c >= 0, flat[..., np.maximum(c, 0)], -np.inf)
            top = vals.max(axis=-1, keepdims=True)
            share = np.where(vals == top, g[..., None], 0)
            np.add.at(dx, (n[..., None], ch[..., None], c), share)
        else:
            np.add.at(dx, (n, ch, c[np.arange(c.shape[0]), pick]), g)
        return dx[..., :-1].reshape(x.shape)

    return {"forward": forward, "backward": backward}


def _products(axes: list[list[range]]) -> list[tuple[range, ...]]:
    combos: list[tuple[range, ...]] = [()]
    for windows in axes:
        combos = [c + (w,) for c in combos for w in windows]
    return combos


TORCH_SPEC = symjac.FractionalMaxPool((2, 3), (3, 4))  # default samples (1/4, 5/8)
TF_SPEC = symjac.FractionalMaxPool(sequences=((0, 2, 3, 5, 7), (0, 1, 3, 4, 6)), overlapping=True)
#: for defects that do not depend on the windows (ties, the upstream gradient): a 1-D spec, a short plan
LINE_SPEC = symjac.FractionalMaxPool((3,), (4,))


def torch_reference(spec: Any = TORCH_SPEC, samples: Any = None, bug: str | None = None) -> dict[str, Any]:
    samples = spec.samples if samples is None else samples
    return reference(lambda sp: torch_windows(sp, spec.kernel, spec.output_size, samples, bug), bug)


def tf_reference(spec: Any = TF_SPEC, overlapping: bool | None = None, bug: str | None = None) -> dict[str, Any]:
    flag = spec.overlapping if overlapping is None else overlapping
    return reference(lambda sp: tf_windows(spec.sequences, flag), bug)


# ------------------------------------------------------------------ spec and windows


def test_the_windows_are_pytorch_generate_intervals() -> None:
    # L = 7, k = 2, o = 3, u = 1/4: α = 5/2, floor(u·α) = floor(5/8) = 0; start_0 = floor(5/8) = 0,
    # start_1 = floor(5/4 · 5/2) = floor(25/8) = 3, the last L - k = 5 (derived by hand).
    g = symjac.resolve(symjac.FractionalMaxPool((2,), (3,), samples=("1/4",)), (1, 1, 7))
    assert g.axes[0].starts.tolist() == [0, 3, 5]
    assert g.axes[0].sizes.tolist() == [2, 2, 2]
    # TensorFlow: s = (0, 2, 3, 5), overlapping: [0, 2], [2, 3], [3, 4] (the last clamped to L - 1 = 4)
    g = symjac.resolve(symjac.FractionalMaxPool(sequences=((0, 2, 3, 5),), overlapping=True), (1, 1, 5))
    assert [list(range(s, s + n)) for s, n in zip(g.axes[0].starts, g.axes[0].sizes)] == [[0, 1, 2], [2, 3], [3, 4]]


@pytest.mark.parametrize("kwargs, words", [
    ({"kernel": 2, "output_size": 3, "sequences": ((0, 1, 2),)}, "not both"),
    ({"kernel": 2, "output_size": 3, "samples": (1, 0)}, "outside [0, 1)"),
    ({"kernel": 2, "output_size": 3, "samples": (float("nan"), 0)}, "give a number u in [0, 1)"),
    ({"kernel": 2, "output_size": 3, "samples": (None, 0)}, "give a number u in [0, 1)"),
    ({"kernel": 2, "output_size": 3, "samples": (0.5,)}, "one u in [0, 1) per spatial axis"),
    ({"kernel": 2, "output_size": 3, "overlapping": True}, "TensorFlow's"),
    ({"kernel": 2}, "give kernel and output_size"),
    ({"sequences": ((1, 2, 3),)}, "starts at 0 and strictly increases"),
    ({"sequences": ((0, 2, 2),)}, "strictly increases"),
    ({"kernel_size": 2, "output_size": 3}, "symjac's is kernel=2"),
])
def test_a_bad_spec_is_a_spec_error_naming_what_is_valid(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(symjac.SpecError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        symjac.FractionalMaxPool(**kwargs)


def test_a_shape_the_windows_do_not_fit_is_a_spec_error() -> None:
    with pytest.raises(symjac.SpecError, match=r"o \+ k - 1 = 4"):
        symjac.resolve(symjac.FractionalMaxPool(2, 3), (1, 1, 3, 5))
    with pytest.raises(symjac.SpecError, match="sequence ends at 5 but the input length is 6"):
        symjac.resolve(symjac.FractionalMaxPool(sequences=((0, 2, 5),)), (1, 1, 6))


def test_the_coverage_plan_reaches_both_gaps_overlapping_abutting_and_skipping_windows() -> None:
    spec = symjac.FractionalMaxPool(2, 4)
    seen = set()
    for shape in symjac.cover(spec):
        for ax, k in zip(symjac.resolve(spec, shape).axes, spec.kernel):
            gaps = np.diff(ax.starts[:-1]).tolist()
            seen |= {("overlap" if g < k else "abut" if g == k else "skip") for g in gaps}
            seen |= {"both gaps"} if len(set(gaps)) == 2 else set()
    assert seen == {"overlap", "abut", "skip", "both gaps"}


def test_the_spec_file_form_reads_back() -> None:
    for spec in (TORCH_SPEC, TF_SPEC):
        text = dumps("case", "", operator_table(spec), {"shape": [1, 1, 7, 6]})
        import tomllib

        from symjac.io._specfile import operator_table as reader

        table = tomllib.loads(text)["operator"]
        args = {k: tuple(tuple(i) if isinstance(i, list) else i for i in v) if isinstance(v, list) else v
                for k, v in table.items() if k != "kind"}
        assert reader(table, "[operator]").build(args, "[operator]") == spec


# ------------------------------------------------------------------ verify: 0 false alarms, defects caught


def test_a_correct_reference_passes_at_the_defaults() -> None:
    for spec, impl in ((TORCH_SPEC, torch_reference()), (TF_SPEC, tf_reference()), (LINE_SPEC, torch_reference(LINE_SPEC))):
        report = symjac.verify(spec, impl)
        assert report.ok, report
        assert report.stats["tie_policy"] == "first"


def test_a_tie_policy_inside_the_clarke_set_passes() -> None:
    report = symjac.verify(LINE_SPEC, torch_reference(LINE_SPEC, bug="tie_last"))
    assert report.ok, report
    assert report.stats["tie_policy"] == "last"


@pytest.mark.parametrize("spec, impl, expected", [
    (TORCH_SPEC, torch_reference(bug="ceil"), "forward_values"),  # ceil for floor in the interval formula
    (TORCH_SPEC, torch_reference(bug="last"), "forward_values"),  # the last window not pinned at L - k
    (TORCH_SPEC, torch_reference(samples=TORCH_SPEC.samples[::-1]), "forward_values"),  # samples in the other axis order
    (TF_SPEC, tf_reference(overlapping=False), "forward_values"),  # overlapping ignored
    (LINE_SPEC, torch_reference(LINE_SPEC, bug="tie_all"), "tie_not_subgradient"),  # ties outside the Clarke set
    (LINE_SPEC, torch_reference(LINE_SPEC, bug="no_upstream"), "wrong_cells"),  # the upstream gradient ignored
], ids=["interval-ceil", "last-window", "axis-order", "overlapping-ignored", "tie-outside-clarke", "no-upstream"])
def test_a_planted_defect_is_caught_at_the_defaults(spec: Any, impl: dict[str, Any], expected: str) -> None:
    report = symjac.verify(spec, impl)
    assert not report.ok
    assert expected in report.categories(), report


@pytest.mark.parametrize("spec, impl, shape, hint", [
    (TORCH_SPEC, torch_reference(samples=TORCH_SPEC.samples[::-1]), (2, 3, 5, 10), "match samples=('5/8', '1/4') exactly"),
    (TF_SPEC, tf_reference(overlapping=False), (2, 3, 7, 6), "match overlapping=False exactly"),
], ids=["axis-order", "overlapping-ignored"])
def test_the_report_names_the_convention_a_wrong_kernel_follows(spec: Any, impl: dict[str, Any], shape: Any,
                                                                hint: str) -> None:
    report = symjac.verify(spec, impl, input_shape=shape)
    assert hint in str(report).splitlines()[0], report


def test_a_backward_alone_with_a_wrong_window_is_caught() -> None:
    # without the forward, the probes find the moved window by its cells
    report = symjac.verify(TF_SPEC, backward=tf_reference(overlapping=False)["backward"])
    assert not report.ok and {"missing_windows", "partial_windows", "wrong_cells"} & set(report.categories()), report


# ------------------------------------------------------------------ PyTorch, the independent oracle


@pytest.mark.parametrize("rank, kernel, out, samples, shape", [
    (2, (2, 3), (3, 4), ("1/4", "5/8"), (2, 3, 7, 9)),
    (2, (3, 2), (4, 5), ("1/2", "1/8"), (1, 2, 10, 8)),
    (3, (2, 2, 3), (3, 4, 2), ("1/4", "5/8", "3/8"), (1, 2, 6, 7, 8)),
])
def test_the_exact_forward_and_gradient_are_pytorchs(rank: int, kernel: Any, out: Any, samples: Any,
                                                     shape: tuple[int, ...]) -> None:
    torch = pytest.importorskip("torch")
    spec = symjac.FractionalMaxPool(kernel, out, samples=samples)
    x = np.random.default_rng(0).permutation(math.prod(shape)).reshape(shape).astype(np.float64)
    dy = np.random.default_rng(1).integers(-4, 5, size=shape[:2] + tuple(out)).astype(np.float64)
    given = [float(Fraction(u)) for u in samples]
    given = given[::-1] if rank == 2 else given  # PyTorch's 2-D op reads a plane's samples (W, H)
    xt = torch.tensor(x, requires_grad=True)
    fn = getattr(torch.nn.functional, f"fractional_max_pool{rank}d")
    y = fn(xt, kernel, output_size=out, _random_samples=torch.tensor(given, dtype=xt.dtype).expand(*shape[:2], rank))
    (dx,) = torch.autograd.grad(y, xt, torch.tensor(dy))
    assert np.array_equal(np.array(symjac.forward(spec, x), dtype=float), y.detach().numpy())
    assert np.array_equal(np.array(symjac.vjp(spec, x, dy), dtype=float), dx.numpy())


@pytest.mark.parametrize("op, args, shape", [
    ("fractional_max_pool2d", ((2, 3), (3, 4)), (2, 3, 7, 9)),
    ("fractional_max_pool3d", ((2, 2, 3), (2, 3, 2), ("1/2", "1/4", "3/4")), (1, 2, 5, 6, 7)),
])
def test_pytorchs_op_passes_every_derivative(op: str, args: Any, shape: tuple[int, ...]) -> None:
    pytest.importorskip("torch")
    from symjac.frameworks import torch as adapter

    spec, impl = getattr(adapter, op)(*args)
    # every derivative torch defines: VJP, JVP, double backward, vmap (the nonfinite family's transform passes
    # read x exactly on main for every max pool: left out here, the VJP's nonfinite pass runs below)
    report = symjac.verify(spec, impl, input_shape=shape, families=("near_ties", "orders", "extreme"))
    assert report.ok, report
    report = symjac.verify(spec, impl, input_shape=shape, transforms=("vjp",))
    assert report.ok, report


@pytest.mark.slow
def test_pytorchs_2d_op_passes_at_the_coverage_plan() -> None:
    pytest.importorskip("torch")
    from symjac.frameworks import torch as adapter

    spec, impl = adapter.fractional_max_pool2d((2, 3), (3, 4))
    assert symjac.verify(spec, impl, transforms=("vjp",)).ok


# ------------------------------------------------------------------ TensorFlow


@pytest.mark.slow
@pytest.mark.parametrize("overlapping", [False, True])
def test_tensorflows_op_passes_and_its_nonfinite_defect_is_found(overlapping: bool) -> None:
    pytest.importorskip("tensorflow")
    from symjac.frameworks import tensorflow as adapter

    spec, impl = adapter.fractional_max_pool((2, 9, 11, 3), [1, 1.44, 1.73, 1], overlapping=overlapping, seed=7)
    assert spec.overlapping is overlapping and spec.sequences[0][-1] == 9
    report = symjac.verify(spec, impl, families=("near_ties", "orders", "extreme"))
    assert report.ok, report
    assert set(report.stats["transforms"]) >= {"jvp"}  # named as not checked: TensorFlow defines none
    # TensorFlow's documented defect (symjac.frameworks.tensorflow.known_defect): a window of -inf only is
    # the dtype's lowest finite value, and the gradient raises where the output holds NaN
    found = symjac.verify(spec, impl, families=("nonfinite",), transforms=("vjp",))
    assert {"forward_values", "bad_output"} & set(found.categories()), found


# ------------------------------------------------------------------ golden data


def test_golden_data_holds_pytorchs_values(tmp_path: Any) -> None:
    torch = pytest.importorskip("torch")
    from symjac.io.golden._write import write_golden

    (tmp_path / "frac.toml").write_text(dumps("frac", "", operator_table(TORCH_SPEC), {"shape": [1, 2, 7, 11]}))
    case = symjac.load_spec_file(tmp_path / "frac.toml").cases[0]
    (path,) = [p for p in write_golden([case], tmp_path / "out", ["json"], ["float64"]) if p.suffix == ".json"]
    golden = __import__("json").loads(path.read_text())
    assert golden["operator"]["operator"] == "fractional_max_pool" and golden["operator"]["samples"] == ["1/4", "5/8"]
    arrays = golden["arrays"]
    x, dy = (np.array(arrays[k]["float64"]).reshape(arrays[k]["shape"]) for k in ("x", "dy"))
    xt = torch.tensor(x, requires_grad=True)
    given = torch.tensor([5 / 8, 1 / 4], dtype=xt.dtype).expand(1, 2, 2)  # PyTorch's (W, H) order
    y = torch.nn.functional.fractional_max_pool2d(xt, (2, 3), output_size=(3, 4), _random_samples=given)
    (dx,) = torch.autograd.grad(y, xt, torch.tensor(dy))
    assert np.array_equal(np.array(arrays["y"]["float64"]).reshape(y.shape), y.detach().numpy())
    assert np.array_equal(np.array(arrays["dx"]["float64"]).reshape(x.shape), dx.numpy())


@pytest.mark.slow
def test_golden_cover_writes_its_extreme_family_without_overflow_notes(tmp_path: Any) -> None:
    # the extreme family holds each dtype's largest finite value; rounding it to float32/float16 asked
    # nextafter for its upper neighbour, inf, and the command line printed numpy's overflow warning as a note
    import json
    from pathlib import Path

    spec = tmp_path / "frac.toml"
    spec.write_text('[operator]\nkind = "fractional_max_pool"\nkernel = [2, 2]\noutput_size = [3, 3]\n'
                    'samples = ["1/4", "5/8"]\n[input]\nshape = [1, 1, 6, 6]\n')
    r = cli_runner.symjac("golden", str(spec), "--out", str(tmp_path / "out"), "--cover", "--format", "json",
                          "--dtype", "float32", cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0 and "overflow" not in r.stderr and "note:" not in r.stderr, r.stderr
    largest = [max(abs(v) for v in json.loads(p.read_text())["arrays"]["x"]["float32"])
               for p in (tmp_path / "out").glob("*extreme*.json")]
    assert largest and max(largest) == float(np.finfo(np.float32).max)  # the largest float32 value, kept
