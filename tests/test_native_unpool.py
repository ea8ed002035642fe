"""Max unpooling through the native routes (issue 31): the indices reach the kernel as an int64 input
array, after x. contrib/examples/unpool.c (max unpooling in C99, both index conventions and both
write orders) runs through ``--exec``, the process route, ctypes and probes/check.

Independent expected values: the forward is compared with the definition written out below in
NumPy (``y = 0``, then ``y[plane, index[i]] = x[i]`` in row-major order of the input, the last write
kept; ONNX's tensor-flat indices count the whole output), and, where PyTorch is installed, with
``torch.nn.functional.max_unpool1d/2d`` on one thread (sequential: the last write wins).
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import cli_runner
import symjac
import symjac.frameworks.native.ctypes as sjc
import symjac.frameworks.native.process as sjp
from native_kernels import CC, ROOT, build, deadline, needs_cc  # noqa: F401 - deadline: a fixture
from symjac.cli._select import select_cases
from symjac.frameworks.native._offline import answer, run_offline
from symjac.frameworks.native._wire import settings
from symjac.io._case import verify_case

pytestmark = [needs_cc, pytest.mark.usefixtures("deadline")]

SPECS = [symjac.MaxUnpool(2), symjac.MaxUnpool((3,), stride=2), symjac.MaxUnpool((3, 3), stride=2, padding=1),
         symjac.MaxUnpool((3,), stride=2, write="first"), symjac.MaxUnpool((2, 2), flat="tensor"),
         symjac.MaxUnpool((3,), stride=2, output_size=(6,))]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if CC is None:
        pytest.skip("no C compiler (cc or gcc) on PATH")
    out = tmp_path_factory.mktemp("unpool")
    return {"unpool": str(build(out, "unpool.c")), "lib": str(build(out, "unpool.c", shared=True)),
            "gather": str(build(out, "unpool.c", "-DUNPOOL_GATHER_BACKWARD")),
            "no_zero": str(build(out, "unpool.c", "-DUNPOOL_NO_ZERO"))}


def _unpool(x: np.ndarray, index: np.ndarray, out_spatial: tuple[int, ...], tensor: bool = False) -> np.ndarray:
    """The definition: zeros, then each input written at its index in row-major order (the last write kept)."""
    n, c = x.shape[:2]
    plane = int(np.prod(out_spatial))
    y = np.zeros(n * c * plane, dtype=x.dtype)
    per_in = x[0, 0].size
    for i, (v, t) in enumerate(zip(x.reshape(-1), index.reshape(-1))):
        y[t if tensor else i // per_in * plane + t] = v
    return y.reshape((n, c, *out_spatial))


def test_settings_leave_the_indices_to_the_input_array() -> None:
    """Given indices are an input of every call, not a setting; rank and the pooling's pads are said."""
    from symjac.frameworks.native._calls import ScatterCalls

    spec = symjac.MaxUnpool((3,), stride=2, padding=1, indices=[[[0, 2, 2]]])
    lines = ScatterCalls(lambda *a: np.zeros(0), spec).lines
    assert lines == ["operator max_unpool", "kernel 3", "stride 2", "padding 1 1", "flat plane", "write last",
                     "rank 1", "pads 1 1"]
    assert "indices" in " ".join(settings(spec))  # the spec's own fields would carry them


def test_kernel_forward_equals_the_definition(kernels) -> None:
    """A repeated index (inputs 0 and 1 both to cell 1: the later wins), both conventions, float32."""
    x = np.array([[[5.0, 7.0, 2.0]], [[1.0, 3.0, 4.0]]], dtype=np.float32)  # (N, C, L) = (2, 1, 3)
    index = np.array([[[1, 1, 6]], [[0, 4, 5]]], dtype=np.int64)
    plane = sjp.impl(kernels["unpool"], symjac.MaxUnpool((3,), stride=2))
    np.testing.assert_array_equal(plane.forward(x, index), _unpool(x, index, (7,)))
    assert plane.forward(x, index)[0, 0].tolist() == [0, 7, 0, 0, 0, 0, 2]  # derived by hand: 7 overwrote 5
    tensor = sjc.impl(kernels["lib"], symjac.MaxUnpool((3,), stride=2, flat="tensor"))
    index_t = np.array([[[1, 1, 6]], [[7, 11, 13]]], dtype=np.int64)
    np.testing.assert_array_equal(tensor.forward(x, index_t), _unpool(x, index_t, (7,), tensor=True))


def test_kernel_forward_equals_pytorch(kernels) -> None:
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: PyTorch's writes in order, the last one kept
    try:
        rng = np.random.default_rng(3)
        x = rng.integers(-9, 9, size=(2, 3, 3, 3)).astype(np.float64)
        index = rng.integers(0, 36, size=x.shape).astype(np.int64)  # repeats, as overlapping windows give
        got = sjp.impl(kernels["unpool"], symjac.MaxUnpool((2, 2), stride=2)).forward(x, index)
        expected = torch.nn.functional.max_unpool2d(torch.tensor(x), torch.tensor(index), 2, 2).numpy()
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_correct_kernel_passes_on_both_routes(kernels, spec) -> None:
    """symjac's defaults (no shape, no indices given: the coverage plan, repeated indices included)."""
    on_process = symjac.verify(spec, sjp.impl(kernels["unpool"], spec))
    assert on_process.ok, on_process
    assert symjac.verify(spec, sjc.impl(kernels["lib"], spec)).headline == on_process.headline


def test_gathering_backward_fails_named_by_the_repeated_index(kernels) -> None:
    spec = symjac.MaxUnpool((3,), stride=2)
    report = symjac.verify(spec, sjp.impl(kernels["gather"], spec))
    assert report.categories() == ["wrong_cells"], report
    assert "an overwritten value gets a gradient" in report.details() and "a repeated index" in report.details()


def test_forward_that_never_zeroes_leaves_output_unwritten(kernels) -> None:
    spec = symjac.MaxUnpool((3,), stride=2)
    report = symjac.verify(spec, sjp.impl(kernels["no_zero"], spec))
    assert "unwritten_output" in report.categories() and "elements of y unwritten" in report.details()


def test_exec_and_offline(kernels, tmp_path: pathlib.Path) -> None:
    (tmp_path / "unpool.toml").write_text('[operator]\nkind = "max_unpool"\nkernel = [3]\nstride = [2]\n')
    for kernel, code in (("unpool", 0), ("gather", 1)):
        run = cli_runner.symjac("verify", str(tmp_path / "unpool.toml"), "--exec", kernels[kernel])
        assert run.returncode == code, run.stdout + run.stderr
    case = select_cases([str(tmp_path / "unpool.toml")], (), None)[0]
    while isinstance(got := run_offline(case, tmp_path / "dir"), int):
        assert answer(tmp_path / "dir", exec=kernels["gather"]) == got
    online = verify_case(case, sjp.impl(kernels["gather"], case.operator), "float64")
    assert got.to_dict() == online.to_dict() and not got.ok
