"""Coverage pictures: the title fits, the slice is named, colour bar, wrong cells marked,
exact fractions, reproducible SVG."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEED000 = ROOT / "specs/seeds/nntrainer_avgpool_same_2x2.toml"
CHANNELS_LAST = ROOT / "specs/conventions/channels_last.toml"

pytest.importorskip("matplotlib")
sys.path.insert(0, str(ROOT / "examples"))


@pytest.fixture
def drawn(monkeypatch):
    """Draw with write_graph and keep the figure (instead of closing it)."""
    import matplotlib.pyplot as plt

    from symjac.io._picture import write_graph
    from symjac.io._specfile import load

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)

    def draw(spec, out, impl=None, slice_nc=None):
        case = load(spec).cases[0]
        fns = None if impl is None else {"backward": impl.backward, "forward": impl.forward}
        messages, report = write_graph(case, out, fns, slice_nc=slice_nc)
        verdict = "PASS" if report is None else report.verdict
        fig = figures[-1]
        fig.canvas.draw()
        return fig, messages, verdict

    return draw


def _texts(fig):
    return [t for ax in fig.axes for t in ax.texts]


def test_title_is_never_clipped(drawn, tmp_path):
    import nntrainer_pool

    for impl in (None, nntrainer_pool.buggy):
        fig, _, _ = drawn(SEED000, tmp_path / "g.png", impl)
        box = fig._suptitle.get_window_extent()
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, (box, fig.bbox)
        title = fig._suptitle.get_text()
        assert "nntrainer_avgpool_same_2x2: Pool('avg', kernel=2x2, stride=1x1, padding=same)" in title.replace("\n", " ")


def test_exact_fractions_colour_bar_and_wrong_cells(drawn, tmp_path):
    import nntrainer_pool

    fig, messages, verdict = drawn(SEED000, tmp_path / "g.png", nntrainer_pool.buggy)
    assert verdict == "FAIL" and messages[-1] == f"wrote {tmp_path / 'g.png'}"
    exact_panel, impl_panel, colour_bar = fig.axes
    # Seed 000: the exact gradient at dy = 1 is [[1/4, 3/4], [3/4, 9/4]]; the buggy backward gives 1/4 everywhere.
    assert sorted(t.get_text() for t in exact_panel.texts) == ["1/4", "3/4", "3/4", "9/4"]
    cells = [t for t in impl_panel.texts if t.get_text() == "1/4"]
    red = [t for t in cells if t.get_color() == "#d62728"]
    assert len(cells) == 4 and len(red) == 3  # (0,1), (1,0), (1,1) are wrong, (0,0) is right
    assert colour_bar.get_ylabel() == "input gradient"
    assert "FAIL (float64): backward visits 1 of 4" in fig._suptitle.get_text().replace("\n", " ")


def test_batched_slice_is_named_and_chosen(drawn, tmp_path):
    from symjac._errors import InputError

    fig, messages, _ = drawn(CHANNELS_LAST, tmp_path / "g.png", slice_nc=(0, 2))
    assert "drew slice N=0, C=2 of input (1, 4, 4, 3)" in messages
    assert "slice N=0, C=2 of input (1, 4, 4, 3)" in fig._suptitle.get_text().replace("\n", " ")
    # channels_last max pool 2x2 stride 2: each window routes its 1 to one cell, so the picture
    # of any slice holds four 1s and twelve 0s.
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["0"] * 12 + ["1"] * 4
    with pytest.raises(InputError, match="outside the input"):
        drawn(CHANNELS_LAST, tmp_path / "g.png", slice_nc=(0, 3))


def test_svg_is_reproducible(tmp_path):
    from symjac.io._picture import write_graph
    from symjac.io._specfile import load

    case = load(SEED000).cases[0]
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    write_graph(case, a, None)
    write_graph(case, b, None)
    assert a.read_bytes() == b.read_bytes()
    assert b"<dc:date>" not in a.read_bytes()


def test_bfloat16_picture_draws(tmp_path):
    # np.finfo has no bfloat16: the picture's tolerance comes from check._rounding.
    pytest.importorskip("ml_dtypes")
    import nntrainer_pool

    from symjac.io._picture import write_graph
    from symjac.io._specfile import load

    case = load(SEED000).cases[0]
    fns = {"backward": nntrainer_pool.fixed.backward, "forward": nntrainer_pool.fixed.forward}
    messages, report = write_graph(case, tmp_path / "g.png", fns, dtype="bfloat16")
    assert report.verdict == "PASS" and (tmp_path / "g.png").exists(), messages


class _AllTies:
    """3x3 stride-2 max pooling whose backward sends dy to every maximum of a window: right where
    maxima are unique, wrong at ties (issue 33 item 6's reproducer, in NumPy)."""

    @staticmethod
    def _windows(x):
        n, c, h, w = x.shape
        for i in range((h - 3) // 2 + 1):
            for j in range((w - 3) // 2 + 1):
                yield i, j, (slice(None), slice(None), slice(2 * i, 2 * i + 3), slice(2 * j, 2 * j + 3))

    def forward(self, x):
        import numpy as np

        out = np.empty(x.shape[:2] + ((x.shape[2] - 3) // 2 + 1, (x.shape[3] - 3) // 2 + 1), dtype=x.dtype)
        for i, j, win in self._windows(x):
            out[:, :, i, j] = x[win].max(axis=(2, 3))
        return out

    def backward(self, x, dy):
        import numpy as np

        dx = np.zeros_like(x)
        for i, j, win in self._windows(x):
            top = x[win].max(axis=(2, 3), keepdims=True)
            dx[win] += (x[win] == top) * dy[:, :, i:i + 1, j:j + 1]
        return dx


def test_a_failure_at_ties_is_drawn_at_the_tied_input(drawn, tmp_path):
    # issue 33 item 6: without [input] the picture was drawn at the plan shape's distinct input, where
    # this backward is right: both panes equal under a FAIL title
    spec = tmp_path / "mp.toml"
    spec.write_text('name = "mp"\n[operator]\nkind = "pool"\nmode = "max"\nkernel = 3\nstride = 2\n')
    fig, messages, verdict = drawn(spec, tmp_path / "mp.png", _AllTies())
    assert verdict == "FAIL"
    assert any("tied input, where the check failed" in m for m in messages)
    exact, implementation = ([float(t.get_text()) for t in ax.texts] for ax in fig.axes[:2])
    # the plan's shape is 3x3 (one window: the whole input); at dy = 1 the exact gradient of max
    # is one-hot (sum 1), this backward gives 1 to each tied maximum: at a tied input, more than one
    assert sum(exact) == 1 and sum(implementation) > 1 and exact != implementation


def test_cell_text_is_the_short_fraction_a_float_rounds_from():
    # (issue 33 item 7b) Python's 1/9 is by definition the float64 nearest 1/9, so the cell says 1/9
    # (the old code said 0.1111: Fraction(float) is short for dyadic values only); np.float32(1/9)
    # is float32's nearest. The float next to it is no fraction of denominator <= 64 (their spacing,
    # >= 1/64^2, dwarfs one ulp): the decimal.
    import numpy as np

    from symjac.io._picture import _cell_text, _short_fraction

    for v in (1 / 9, np.float64(1 / 9), np.float32(1 / 9)):
        assert _cell_text(_short_fraction(v), float(v)) == "1/9"
    assert _cell_text(_short_fraction(0.25), 0.25) == "1/4"
    assert _cell_text(_short_fraction(2 / 3), 2 / 3) == "2/3"
    beside = np.nextafter(1 / 9, 1.0)
    assert _short_fraction(beside) is None and _cell_text(None, beside) == "0.1111"
    assert _short_fraction(float("nan")) is None
