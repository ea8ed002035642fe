"""PyTorch's lp_pool1d/2d in the torch adapter: the spec mapping, the grid's lp configurations
verified (slow), and the PyTorch defects they find, each reproduced with torch and a closed form.

PyTorch 2.13's ``F.lp_pool1d(x, p, k)`` computes S = k·avg_pool(x^p) (the window's power sum), then
``(sign(S)·relu(|S|))^(1/p)``; for p = 1 that is S itself, Σx over the window (signed), which is
symjac's ``Pool("lp", p=1)``: y = Σ x, ∂y/∂x_i = 1 everywhere."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import symjac  # noqa: E402
import symjac.frameworks.torch as sjt  # noqa: E402
from framework_checks import check_configurations, runnable  # noqa: E402
from symjac.frameworks import Config, KnownDefect  # noqa: E402

F = torch.nn.functional
pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py


def test_lp_pool_maps_to_the_lp_spec():
    # torch's documentation: norm_type is p; stride defaults to kernel_size; no padding or dilation
    assert sjt.lp_pool2d(2, 3)[0] == symjac.Pool("lp", (3, 3), stride=(3, 3), p=2)
    assert sjt.lp_pool1d(3.0, 2, 1)[0] == symjac.Pool("lp", (2,), stride=(1,), p=3)
    with pytest.raises(symjac.frameworks.Unsupported, match="integer power"):
        sjt.lp_pool1d(1.5, 2)
    # ceil_mode with an overhanging last window: (k/valid · Σx^p)^(1/p) in PyTorch, no lp spec
    overhang = Config("lp_pool1d", {"norm_type": 2, "kernel_size": 2, "stride": None, "ceil_mode": True}, (1, 1, 5))
    assert "no lp norm" in sjt.limitation(overhang, np.float32)
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0, 2.0]]], dtype=torch.float64)
    # the last window holds the one cell 2: an lp norm gives 2; PyTorch (2/1 · 2²)^(1/2) = 2√2
    assert F.lp_pool1d(x, 2, 2, ceil_mode=True)[0, 0, -1].item() == pytest.approx(2 * math.sqrt(2), rel=1e-15)
    assert sjt.limitation(Config("lp_pool1d", {**overhang.kwargs}, (1, 1, 6)), np.float32) is None


def test_p1_gradient_is_zero_where_the_window_sums_to_zero():
    # y = Σ x over the window (p = 1: linear), so dy/dx_i = 1 at every cell, the window summing to 0 too
    x = torch.tensor([[[1.0, -1.0, 2.0, 3.0]]], dtype=torch.float64, requires_grad=True)
    y = F.lp_pool1d(x, 1, 2)
    np.testing.assert_array_equal(y.detach().numpy(), [[[0.0, 5.0]]])  # 1 - 1, 2 + 3
    (dx,) = torch.autograd.grad(y, x, torch.ones_like(y))
    exact = np.ones(4)
    np.testing.assert_array_equal(dx.numpy()[0, 0], [0.0, 0.0, 1.0, 1.0])  # the defect: 0 where S = 0
    assert (dx.numpy()[0, 0] != exact).sum() == 2


def test_p2_double_backward_ddy_is_nan_at_an_all_zero_window():
    # ddy of ⟨v, J(x)ᵀdy⟩ is J(x)·v, J PyTorch's own backward's Jacobian: its row at the all-zero window
    # is 0 (torch's documented convention), so ddy there is 0; at (1, 2) the row is x/‖x‖, ddy = 3/√5
    x = torch.tensor([[[0.0, 0.0, 1.0, 2.0]]], dtype=torch.float64, requires_grad=True)
    dy = torch.ones(1, 1, 2, dtype=torch.float64, requires_grad=True)
    (dx,) = torch.autograd.grad(F.lp_pool1d(x, 2, 2), x, dy, create_graph=True)
    np.testing.assert_array_equal(dx.detach().numpy()[0, 0, :2], [0.0, 0.0])
    _, ddy = torch.autograd.grad(dx, (x, dy), torch.ones_like(x))
    assert math.isnan(ddy[0, 0, 0].item())  # the defect: NaN where the exact J·v is 0
    assert ddy[0, 0, 1].item() == pytest.approx(3 / math.sqrt(5), rel=1e-15)


@pytest.mark.parametrize("p", [2, 3])
def test_forward_ad_is_nan_at_an_all_zero_window(p):
    # J·t at the all-zero window: its row is the backward's 0, so 0 (the jvp of lp_pool2d, as in
    # tests/test_transforms_pool.py; here 1-D)
    x, t = torch.zeros(1, 1, 2, dtype=torch.float64), torch.ones(1, 1, 2, dtype=torch.float64)
    _, jt = torch.func.jvp(lambda a: F.lp_pool1d(a, p, 2), (x,), (t,))
    assert math.isnan(jt.item())


def _adapter(tmp_path):
    path = tmp_path / "lp_adapter.py"
    path.write_text(
        "import symjac.frameworks.torch as sjt\nfrom symjac.frameworks import Config\n"
        "make, known_defect, limitation = sjt.make, sjt.known_defect, sjt.limitation\n"
        "def configurations(grid='small'):\n"
        "    kw = {'kernel_size': 2, 'stride': 1, 'ceil_mode': False}\n"
        "    return [Config('lp_pool1d', {'norm_type': p, **kw}, (1, 1, 6), f'lp p{p}') for p in (1, 2)]\n")
    return f"{path}:"


def test_conform_shows_the_lp_defects_as_known_with_their_categories(tmp_path):
    result = symjac.conform(_adapter(tmp_path), dtypes=("float64",), transforms=("vjp", "jvp", "hvp"), isolate=False)
    cells = {(r["config"]["label"], r["config"].get("transform", "vjp")): r for r in result.results}
    assert result.ok and not result.findings
    # p = 2's VJP: its unscaled power sum overflows at the extreme family (inf forward, 0 gradient)
    for transform in ("vjp", "jvp", "hvp"):
        assert (cells["lp p2", transform]["status"], cells["lp p2", transform]["category"]) == \
            ("known_defect", "bad_output")
    for transform in ("vjp", "jvp", "hvp"):
        assert (cells["lp p1", transform]["status"], cells["lp p1", transform]["category"]) == \
            ("known_defect", "missing_windows")
    written = {p.name: p for p in result.write_reproducers(tmp_path / "rep")}
    scripts = [written[f"lp_adapter-lp_pool1d-known_{c}.py"] for c in ("missing_windows", "hvp_bad_output")]
    code = "import runpy, sys\nfor path in sys.argv[1:]:\n    runpy.run_path(path, run_name='__main__')\n"
    out = subprocess.run([sys.executable, "-c", code, *map(str, scripts)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # p = 1: the script's x has windows summing to 0, where torch's dx misses the exact 1·dy
    dx = next(ln for ln in lines if ln.startswith("dx: max |difference|"))
    assert float(dx.split()[3].rstrip(";")) > 0
    # p = 2: the tie input's all-zero windows, where ddy is NaN
    assert "NaN" in next(ln for ln in lines if ln.startswith("ddy: "))


def test_the_known_defects_have_categories():
    kw = {"kernel_size": 2, "stride": 1, "ceil_mode": False}
    p1 = sjt.known_defect(Config("lp_pool1d", {"norm_type": 1, **kw}, (1, 1, 6)), "vjp")
    p2 = sjt.known_defect(Config("lp_pool1d", {"norm_type": 2, **kw}, (1, 1, 6)), "jvp")
    assert isinstance(p1, KnownDefect) and p1.categories == ("missing_windows", "not_fd_consistent")
    assert isinstance(p2, KnownDefect) and p2.categories == ("bad_output", "missing_windows")
    overflow = sjt.known_defect(Config("lp_pool1d", {"norm_type": 2, **kw}, (1, 1, 6)), "vjp")
    assert isinstance(overflow, KnownDefect) and overflow.categories == ("bad_output", "missing_windows")
    assert "unscaled" in overflow and "unscaled" in p2


def _lp_only(transform):
    return [(c, d) for c, d in runnable(sjt, "full", transform) if c.op.startswith("lp_pool")]


@pytest.mark.slow
@pytest.mark.parametrize("transform", ["vjp", "jvp", "hvp", "vmap"])
def test_the_lp_configurations_verify(transform):
    configs = _lp_only(transform)
    checked = check_configurations(sjt, "full", transform, configs)
    # vjp: p >= 2 (p = 1 is a known defect); the others have none left (their all-zero-window NaN)
    assert (min(checked.values()) >= 40) if transform == "vjp" else not configs


@pytest.mark.slow
@pytest.mark.parametrize("transform", ["jvp", "hvp", "vmap"])
def test_lp_transforms_are_right_away_from_the_all_zero_windows(transform):
    """The p >= 2 configurations the NaN defect keeps out of the grid, at x with no all-zero window:
    every finding is the tie pass's bad_output (verify's own all-zero windows), none at x."""
    from symjac.verifiers.pool._inputs import distinct_input
    from symjac.frameworks.conform._transforms import verify_transform

    checked = 0
    for config in sjt.configurations("full"):
        if not config.op.startswith("lp_pool") or config.kwargs["norm_type"] == 1 or sjt.limitation(config, "f"):
            continue
        spec, impl = sjt.make(config)
        g = symjac.resolve(spec, config.input_shape)
        for dtype in ("float32", "float64"):
            x = np.abs(distinct_input(g, dtype)) + 1  # small integers: every power sum > 0
            report = verify_transform(spec, impl, transform, np.dtype(dtype), x=x)
            # besides those, only the documented overflow of Σ x^p at the extreme family (cells whose p-th
            # power passes the dtype's range: inf; tests/test_extreme.py derives it)
            found = {(f.family, f.category) for f in report.findings}
            assert found - {("extreme", "bad_output"), ("extreme", "missing_windows")} <= {("ties", "bad_output")}, \
                f"{config.label} {dtype}: {report.summary()}"
            checked += 1
    assert checked >= 80  # 40+ configurations x 2 dtypes
