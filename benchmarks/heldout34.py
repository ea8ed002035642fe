"""Held-out corpus for issue 34: new buggy and correct implementations of the issue's bug classes,
each run through symjac at its defaults as a new user would, and scored against the target
("every planted defect flagged at symjac's defaults, 0 false alarms, the category named").

The implementations (``benchmarks/heldout34/``: NumPy, PyTorch ``autograd.Function`` classes, JAX
``custom_jvp``/``custom_vjp`` functions, one C kernel source with each planted defect behind a
compile flag, a C golden-data consumer) were written from the issue's descriptions of the bug
classes only, not from symjac's tests. Each entry records its route, its bug class, the verdict it
must get (``pass``/``fail``) and the categories a correct diagnosis may name: today's names where
they fit, and, for what has no name today (a write outside a buffer, a read of an unwritten value,
a NaN routing, an overflow), fragments a new category's name would contain (``stems``, matched
only against categories that do not exist today, :data:`BASELINE_CATEGORIES`). For the golden
route the "categories" are the quantities the consumer finds wrong (``y``, ``dx``).

Each entry runs in its own Python process with a timeout (a hang or a crash of that process is
``ERROR``/``TIMEOUT``; an exception out of symjac is ``ERROR``: a failure of symjac). An entry
meets the target when it is expected to fail and gets ``FAIL`` with a right category, or is
expected to pass and gets ``PASS`` with 0 findings.

Where the issue implies an API that does not exist yet (the public batched check, NaN inputs, an
object's every derivative), the entry uses the most natural spelling through one adapter function
below (``verify_object``, ``verify_batched``, ``verify_given_x``, ...): adjust the spelling there
once the API lands, and a missing API shows as ``ERROR`` until then.

Run: python benchmarks/heldout34.py [--only SUBSTR] [--json PATH] [--timeout SECONDS]
(C entries need a C compiler, ``cc`` or ``$CC``; without one they are skipped with a message.)

Before: main at 69ca868, ``python benchmarks/heldout34.py`` (87 entries, 6 min 22 s on the 2-core
machine shared with 7 other jobs). ``FAIL 2/3``: flagged in 2 of 3 runs of the same entry (the
late-thread entries run verify three times and count as flagged only when all three flag it; that
forward entry was flagged 1/3 in an earlier run). ERROR rows are exceptions out of symjac
(``SpecError`` for long kernels and upsampling, ``InputError`` for NaN inputs and huber/smooth_l1's
kink, ``TypeError`` for an object-dtype result and the not-yet-existing ``vmap=``):

    entry                                  route         class                                    exp   got       categories                                    target
    -------------------------------------  ------------  ---------------------------------------  ----  --------  --------------------------------------------  ------
    torch_fn_avg2d_jvp_weights             torch-object  jvp-rule                                 fail  PASS      -                                             NO
    torch_wrap_max1d_jvp_last_cell         torch-wrap    jvp-rule                                 fail  PASS      -                                             NO
    jax_custom_jvp_avg1d_first_window      jax-object    jvp-rule                                 fail  FAIL      missing_windows,not_fd_consistent             yes
    torch_fn_avg2d_second_x_dependent      torch-object  double-backward                          fail  PASS      -                                             NO
    jax_custom_vjp_l2_stop_gradient        jax-object    double-backward                          fail  PASS      -                                             NO
    torch_fn_avg2d_vmap_odd                torch-object  vmap-odd-batch                           fail  PASS      -                                             NO
    numpy_batched_max1d_odd                batched       vmap-odd-batch                           fail  ERROR     -                                             NO
    torch_fn_max1d_vmap_wide               torch-object  vmap-batch-above-2                       fail  PASS      -                                             NO
    numpy_batched_avg2d_wide               batched       vmap-batch-above-2                       fail  ERROR     -                                             NO
    torch_fn_avg2d_vmap_in_dims            torch-object  vmap-in/out-dims                         fail  PASS      -                                             NO
    torch_fn_max1d_vmap_out_dims           torch-object  vmap-in/out-dims                         fail  PASS      -                                             NO
    torch_fn_avg2d_correct                 torch-object  jvp-rule/vmap (correct)                  pass  PASS      -                                             yes
    torch_wrap_max1d_correct               torch-wrap    jvp-rule/vmap (correct)                  pass  PASS      -                                             yes
    torch_max_pool2d_correct               torch-object  double-backward (correct)                pass  PASS      -                                             yes
    jax_custom_jvp_avg1d_correct           jax-object    jvp-rule (correct)                       pass  PASS      -                                             yes
    jax_custom_vjp_l2_correct              jax-object    double-backward (correct)                pass  PASS      -                                             yes
    torch_fn_max1d_k2s2_correct            torch-object  vmap (correct)                           pass  PASS      -                                             yes
    torch_avg_pool2d_ceil_correct          torch-object  jvp-rule/double-backward/vmap (correct)  pass  PASS      -                                             yes
    jax_reduce_window_sum_correct          jax-object    jvp-rule/double-backward/vmap (correct)  pass  PASS      -                                             yes
    numpy_batched_avg2d_correct            batched       vmap (correct)                           pass  ERROR     -                                             NO
    numpy_batched_max1d_correct            batched       vmap (correct)                           pass  ERROR     -                                             NO
    torch_fn_jvp_aborts_isolated           torch-object  robustness: crash in jvp                 fail  PASS      -                                             NO
    thread_backward_scales_late            callable      late-thread-write                        fail  FAIL      result_changed_after_return,wrong_weights     yes
    thread_forward_zeroes_last             callable      late-thread-write                        fail  FAIL 2/3  result_changed_after_return                   NO
    thread_joined_correct                  callable      late-thread-write (correct)              pass  PASS      -                                             yes
    adaptive_max1d_fixed_width             callable      adaptive-window-rule                     fail  PASS      -                                             NO
    adaptive_avg2d_fixed_end               callable      adaptive-window-rule                     fail  PASS      -                                             NO
    adaptive_avg1d_correct                 callable      adaptive-window-rule (correct)           pass  PASS      -                                             yes
    adaptive_avg2d_correct                 callable      adaptive-window-rule (correct)           pass  PASS      -                                             yes
    adaptive_max2d_correct                 callable      adaptive-window-rule (correct)           pass  PASS      -                                             yes
    upsample_avg1d_nearest                 callable      adaptive-upsampling                      fail  ERROR     -                                             NO
    upsample_max2d_fixed_width             callable      adaptive-upsampling                      fail  ERROR     -                                             NO
    upsample_torch_adaptive_avg1d          torch-object  adaptive-upsampling (correct)            pass  ERROR     -                                             NO
    upsample_numpy_max2d_correct           callable      adaptive-upsampling (correct)            pass  ERROR     -                                             NO
    long_avg1024_last_cell                 callable      long-kernel                              fail  ERROR     -                                             NO
    long_max1000_ceil_last_window          callable      long-kernel                              fail  ERROR     -                                             NO
    long_avg1024_correct                   callable      long-kernel (correct)                    pass  ERROR     -                                             NO
    long_max1000_ceil_correct              callable      long-kernel (correct)                    pass  ERROR     -                                             NO
    long_max2d_2x1500_correct              callable      long-kernel (correct)                    pass  ERROR     -                                             NO
    lp1_jvp_zero_sum_relu                  callable      lp-jvp-zero-sum                          fail  FAIL      missing_windows                               yes
    lp1_jvp_zero_sum_mixed                 callable      lp-jvp-zero-sum                          fail  PASS      -                                             NO
    lp1_jvp_torch_lp_pool2d                torch-object  lp-jvp-zero-sum                          fail  FAIL      missing_windows                               yes
    lp1_jvp_correct                        callable      lp-jvp-zero-sum (correct)                pass  PASS      -                                             yes
    lp1_jvp_k4_correct                     callable      lp-jvp-zero-sum (correct)                pass  PASS      -                                             yes
    lp2_f32_square_first                   callable      extreme-magnitude                        fail  PASS      -                                             NO
    lp4_f32_power_first                    callable      extreme-magnitude                        fail  PASS      -                                             NO
    lp2_f32_scaled_correct                 callable      extreme-magnitude (correct)              pass  PASS      -                                             yes
    lp4_f32_scaled_correct                 callable      extreme-magnitude (correct)              pass  PASS      -                                             yes
    softmax_ce_unshifted                   loss          extreme-magnitude                        fail  PASS      -                                             NO
    softmax_ce_log_of_softmax_smoothing    loss          extreme-magnitude                        fail  PASS      -                                             NO
    sigmoid_ce_exp_ratio                   loss          extreme-magnitude                        fail  PASS      -                                             NO
    softmax_ce_stable_correct              loss          extreme-magnitude (correct)              pass  PASS      -                                             yes
    softmax_ce_sum_scale4_correct          loss          extreme-magnitude (correct)              pass  PASS      -                                             yes
    sigmoid_ce_stable_correct              loss          extreme-magnitude (correct)              pass  PASS      -                                             yes
    huber_delta2_correct                   loss          loss-kink-default (correct)              pass  ERROR     -                                             NO
    smooth_l1_beta2_correct                loss          loss-kink-default (correct)              pass  ERROR     -                                             NO
    huber_delta2_clip_at_one               loss          loss-kink-default                        fail  ERROR     -                                             NO
    smooth_l1_beta2_hvp_everywhere         loss          loss-kink-default                        fail  ERROR     -                                             NO
    nan_max1d_nanargmax                    callable      nan-input                                fail  PASS      -                                             NO
    nan_max2d_first_cell_given_x           callable      nan-input                                fail  ERROR     -                                             NO
    nan_max1d_first_nan_correct            callable      nan-input (correct)                      pass  PASS      -                                             yes
    nan_avg2d_correct                      callable      nan-input (correct)                      pass  PASS      -                                             yes
    nan_torch_max_pool2d_given_x           torch-object  nan-input (correct)                      pass  ERROR     -                                             NO
    object_dtype_backward                  callable      robustness: object dtype                 fail  ERROR     -                                             NO
    exec_cli_scratch_tail_avg1d            cli-exec      scratch-tail                             fail  PASS      -                                             NO
    exec_scratch_tail_max2d_f32            exec          scratch-tail                             fail  FAIL      wrong_cells,not_fd_consistent,tie_not_sub...  NO
    ctypes_write_past_avg2d                ctypes        write-outside-buffer                     fail  PASS      -                                             NO
    ctypes_write_before_max1d_isolated     ctypes        write-outside-buffer                     fail  FAIL      crashed                                       NO
    ctypes_unwritten_gaps_avg1d            ctypes        unwritten-output                         fail  PASS      -                                             NO
    exec_cli_unwritten_gaps_max2d          cli-exec      unwritten-output                         fail  PASS      -                                             NO
    exec_cli_avg2d_correct                 cli-exec      native (correct)                         pass  PASS      -                                             yes
    exec_cli_avg1d_k2s2_correct            cli-exec      native (correct)                         pass  PASS      -                                             yes
    exec_max2d_gaps_correct                exec          native (correct)                         pass  PASS      -                                             yes
    exec_avg1d_correct                     exec          native (correct)                         pass  PASS      -                                             yes
    ctypes_max1d_gaps_f32_correct          ctypes        native (correct)                         pass  PASS      -                                             yes
    ctypes_avg2d_f32_correct               ctypes        native (correct)                         pass  PASS      -                                             yes
    ctypes_avg1d_gaps_isolated_correct     ctypes        native (correct)                         pass  PASS      -                                             yes
    exec_cli_one_shot_max2d                cli-exec      one-request-per-run (correct)            pass  FAIL      bad_output                                    NO
    exec_one_shot_avg1d_f32                exec          one-request-per-run (correct)            pass  FAIL      bad_output                                    NO
    exec_one_shot_divisor_avg2d            exec          one-request-per-run                      fail  FAIL      bad_output,wrong_weights,forward_values       yes
    golden_f32_max2d_c_correct             golden        golden-float32 (correct)                 pass  FAIL      dx                                            NO
    golden_f32_max2d_c_assign              golden        golden-float32                           fail  FAIL      dx                                            yes
    golden_f32_max1d_numpy_correct         golden        golden-float32 (correct)                 pass  FAIL      dx                                            NO
    golden_f32_max1d_numpy_float16_argmax  golden        golden-float32                           fail  FAIL      dx                                            yes
    golden_f16_max1d_numpy_correct         golden        golden-float16 (correct)                 pass  FAIL      dx                                            NO
    golden_f16_avg1d_numpy_correct         golden        golden-float16 (correct)                 pass  PASS      -                                             yes
    golden_f16_avg1d_numpy_kernel_divisor  golden        golden-float16                           fail  FAIL      dx,y                                          yes

    planted defects flagged: 10/43; category named right: 8/43
    false alarms (FAIL on a correct implementation): 5/44; correct ones passed with 0 findings: 29/44
    ERROR/TIMEOUT: 20; UNSUPPORTED: 0; skipped: 0
    target met: 37/87
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "heldout34"
ROOT = Path(__file__).resolve().parents[1]
SPECS = HERE / "specs"

#: symjac's finding categories at the baseline (main, 69ca868): a category outside this list is
#: new, and matched by an entry's ``stems``.
BASELINE_CATEGORIES = (
    "forward_values", "missing_windows", "partial_windows", "wrong_cells", "wrong_weights", "tie_not_subgradient",
    "tie_beta_outside_clarke", "tie_policy", "wrong_second_derivative", "not_fd_consistent", "missing_scale",
    "wrong_scale", "wrong_values", "mutates_inputs", "result_changed_after_return", "nondeterministic", "bad_output",
    "timeout", "crashed", "forked")

#: the categories that name wrong derivative or forward values of a pool
VALUES = ("forward_values", "missing_windows", "partial_windows", "wrong_cells", "wrong_weights", "tie_not_subgradient")
#: what a new category for a write outside a buffer would be called
OUT_OF_BUFFER = ("out_of_bounds", "outside", "overflow", "overrun", "underrun", "guard", "canary", "past", "before",
                 "buffer")
#: what a new category for a read of an unwritten value would be called
UNWRITTEN = ("unwritten", "uninit", "poison", "garbage", "undefined", "not_written")
#: what a new category for a batched rule would be called
BATCHED = ("vmap", "batch")
#: what a new category for a non-finite or overflowing evaluation would be called
EXTREME = ("overflow", "extreme", "non_finite", "nonfinite", "magnitude", "inf", "nan")


# ------------------------------------------------------------------ adapters: the spelling of each call


def verify_object(spec: Any, obj: Any, **kwargs: Any) -> Any:
    """An implementation object (a ``torch.autograd.Function``, a wrap()ped op, an ``Impl``, a
    dict) at defaults: every derivative the object defines should be checked."""
    import symjac

    return symjac.verify(spec, obj, **kwargs)


def verify_batched(spec: Any, per_sample: Any, batched: Any) -> Any:
    """The public batched check (not on main yet): ``batched`` has ``forward(xs)`` and
    ``backward(xs, dys)`` over arrays with one more leading (vmapped) axis."""
    import symjac

    return symjac.verify(spec, per_sample, vmap=batched)


def verify_given_x(spec: Any, impl: Any, x: Any) -> Any:
    """A given input (one with NaN cells, where the issue's description requires one)."""
    import symjac

    return symjac.verify(spec, impl, x=x)


def verify_shape(spec: Any, impl: Any, input_shape: tuple[int, ...]) -> Any:
    """A given input shape (adaptive upsampling, where the description names the input length)."""
    import symjac

    return symjac.verify(spec, impl, input_shape=input_shape)


def verify_jvp(spec: Any, jvp: Any) -> Any:
    """A forward-mode rule alone (the JVP route)."""
    import symjac

    return symjac.verify(spec, jvp=jvp)


def verify_loss(loss: Any, impl: Any) -> Any:
    """A loss implementation at default inputs: its derivative, forward and (if any) HVP."""
    import symjac

    return symjac.verify_loss(loss, derivative=impl.derivative, forward=impl.forward, hvp=getattr(impl, "hvp", None))


def process_impl(program: Path, spec: Any) -> Any:
    import symjac.frameworks.process as sjp

    return sjp.impl(str(program), spec)


def ctypes_impl(library: Path, spec: Any) -> Any:
    import symjac.frameworks.ctypes as sjc

    return sjc.impl(str(library), spec)


def symjac_cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """The ``symjac`` command (``python -m symjac``: the interpreter and PYTHONPATH of this run)."""
    return subprocess.run([sys.executable, "-m", "symjac", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, check=False)


def cli_verify_exec(spec_file: Path, program: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """``symjac verify SPEC --exec PROGRAM --json`` (the process route from the command line)."""
    return symjac_cli("verify", str(spec_file), "--exec", str(program), "--json", timeout=timeout)


def golden_cover(spec_file: Path, out: Path, dtype: str, fmt: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``symjac golden SPEC --out DIR --cover --dtype D --format F``."""
    return symjac_cli("golden", str(spec_file), "--out", str(out), "--cover", "--dtype", dtype, "--format", fmt, "-q",
                      timeout=timeout)


# ------------------------------------------------------------------ the corpus


@dataclasses.dataclass(frozen=True)
class Entry:
    """One implementation and what symjac must say about it.

    Attributes:
      name, route, cls: its name, how symjac reaches it, the issue's bug class.
      expect: ``"fail"`` (a planted defect) or ``"pass"`` (a correct implementation).
      cats: today's categories a correct diagnosis may name (golden route: quantities).
      stems: fragments of a new category's name a correct diagnosis may name.
      needs: ``"torch"``, ``"jax"``, ``"cc"`` (a C compiler).
      run: ``run(build) -> outcome`` in the child process.
    """

    name: str
    route: str
    cls: str
    expect: str
    cats: tuple[str, ...]
    stems: tuple[str, ...]
    needs: tuple[str, ...]
    run: Callable[[Path], dict[str, Any]]


ENTRIES: list[Entry] = []


def entry(route: str, cls: str, expect: str, cats: tuple[str, ...] = (), stems: tuple[str, ...] = (),
          needs: tuple[str, ...] = ()) -> Callable[[Callable[[Path], dict[str, Any]]], Callable[[Path], dict[str, Any]]]:
    def add(fn: Callable[[Path], dict[str, Any]]) -> Callable[[Path], dict[str, Any]]:
        ENTRIES.append(Entry(fn.__name__, route, cls, expect, cats, stems, needs, fn))
        return fn

    return add


def outcome(report: Any) -> dict[str, Any]:
    return {"got": report.verdict, "categories": report.categories(), "findings": len(report.findings),
            "note": report.headline[:300]}


def _ni() -> Any:
    import numpy_impls

    return numpy_impls


def _pool(*args: Any, **kwargs: Any) -> Any:
    import symjac

    return symjac.Pool(*args, **kwargs)


# ---------------------------------------------------------------- objects: every derivative they define


@entry("torch-object", "jvp-rule", "fail", ("wrong_weights",), needs=("torch",))
def torch_fn_avg2d_jvp_weights(build: Path) -> dict[str, Any]:
    """A torch.autograd.Function whose forward-mode rule halves instead of quartering."""
    import torch_impls

    return outcome(verify_object(_pool("avg", 2, stride=2), torch_impls.avg2d(jvp_bug="weights")))


@entry("torch-wrap", "jvp-rule", "fail", ("wrong_cells", "tie_not_subgradient"), needs=("torch",))
def torch_wrap_max1d_jvp_last_cell(build: Path) -> dict[str, Any]:
    """symjac.frameworks.torch.wrap(F): a max pool whose JVP reads each window's last cell."""
    import symjac.frameworks.torch as st
    import torch_impls

    return outcome(verify_object(_pool("max", (3,), stride=2), st.wrap(torch_impls.max1d(3, 2, jvp_bug="last_cell"))))


@entry("jax-object", "jvp-rule", "fail", ("missing_windows",), needs=("jax",))
def jax_custom_jvp_avg1d_first_window(build: Path) -> dict[str, Any]:
    """A jax.custom_jvp average pool whose rule gives the first window no tangent."""
    import jax_impls
    import symjac.frameworks.jax as sj

    return outcome(verify_object(_pool("avg", (2,), stride=1), sj.wrap(jax_impls.avg1d_custom_jvp(first_window_bug=True))))


@entry("torch-object", "double-backward", "fail", ("wrong_second_derivative",), needs=("torch",))
def torch_fn_avg2d_second_x_dependent(build: Path) -> dict[str, Any]:
    """A Function whose backward is right in value but depends on x (ddx is not 0)."""
    import torch_impls

    return outcome(verify_object(_pool("avg", 2, stride=2), torch_impls.avg2d(second_bug=True)))


@entry("jax-object", "double-backward", "fail", ("wrong_second_derivative",), needs=("jax",))
def jax_custom_vjp_l2_stop_gradient(build: Path) -> dict[str, Any]:
    """A jax.custom_vjp L2 pool whose backward stops the gradient through y."""
    import jax_impls
    import symjac.frameworks.jax as sj

    return outcome(verify_object(_pool("lp", (2,), stride=2, p=2), sj.wrap(jax_impls.l2pool_custom_vjp(stop_gradient_bug=True))))


@entry("torch-object", "vmap-odd-batch", "fail", VALUES, BATCHED, needs=("torch",))
def torch_fn_avg2d_vmap_odd(build: Path) -> dict[str, Any]:
    """A Function whose vmap rule zero-fills an odd batch's last sample."""
    import torch_impls

    return outcome(verify_object(_pool("avg", 2, stride=2), torch_impls.avg2d(vmap_bug="odd")))


@entry("batched", "vmap-odd-batch", "fail", VALUES, BATCHED)
def numpy_batched_max1d_odd(build: Path) -> dict[str, Any]:
    """A NumPy batched rule (pairs of samples) that zero-fills an odd batch's last sample."""
    ni = _ni()
    pool = ni.Pool("max", [ni.strided(3, 1)])
    return outcome(verify_batched(_pool("max", (3,), stride=1), pool, ni.Batched(pool, odd_bug=True)))


@entry("torch-object", "vmap-batch-above-2", "fail", VALUES, BATCHED, needs=("torch",))
def torch_fn_max1d_vmap_wide(build: Path) -> dict[str, Any]:
    """A Function whose vmap rule repeats the second sample's result past a batch of 2."""
    import torch_impls

    return outcome(verify_object(_pool("max", (2,), stride=2), torch_impls.max1d(2, 2, vmap_bug="wide")))


@entry("batched", "vmap-batch-above-2", "fail", VALUES, BATCHED)
def numpy_batched_avg2d_wide(build: Path) -> dict[str, Any]:
    """A NumPy batched rule that repeats the second sample's result past a batch of 2."""
    ni = _ni()
    pool = ni.Pool("avg", [ni.strided(3, 2, 1, 1)] * 2)
    return outcome(verify_batched(_pool("avg", 3, stride=2, padding=1), pool, ni.Batched(pool, wide_bug=True)))


@entry("torch-object", "vmap-in/out-dims", "fail", VALUES + ("bad_output",), BATCHED, needs=("torch",))
def torch_fn_avg2d_vmap_in_dims(build: Path) -> dict[str, Any]:
    """A Function whose vmap rule ignores in_dims (right only when the batch is on axis 0)."""
    import torch_impls

    return outcome(verify_object(_pool("avg", 2, stride=2), torch_impls.avg2d(vmap_bug="in_dims")))


@entry("torch-object", "vmap-in/out-dims", "fail", VALUES + ("bad_output",), BATCHED, needs=("torch",))
def torch_fn_max1d_vmap_out_dims(build: Path) -> dict[str, Any]:
    """A Function whose vmap rule returns out_dims = in_dims for a result batched on axis 0."""
    import torch_impls

    return outcome(verify_object(_pool("max", (2,), stride=2), torch_impls.max1d(2, 2, vmap_bug="out_dims")))


@entry("torch-object", "jvp-rule/vmap (correct)", "pass", needs=("torch",))
def torch_fn_avg2d_correct(build: Path) -> dict[str, Any]:
    """A Function with right backward, JVP and vmap rules (in_dims honoured)."""
    import torch_impls

    return outcome(verify_object(_pool("avg", 2, stride=2), torch_impls.avg2d()))


@entry("torch-wrap", "jvp-rule/vmap (correct)", "pass", needs=("torch",))
def torch_wrap_max1d_correct(build: Path) -> dict[str, Any]:
    """wrap(F) of a right max pool Function (backward, JVP, vmap rule)."""
    import symjac.frameworks.torch as st
    import torch_impls

    return outcome(verify_object(_pool("max", (3,), stride=2), st.wrap(torch_impls.max1d(3, 2))))


@entry("torch-object", "double-backward (correct)", "pass", needs=("torch",))
def torch_max_pool2d_correct(build: Path) -> dict[str, Any]:
    """PyTorch's own max_pool2d (kernel 2, stride 1), ready-made: its JVP, double backward, vmap."""
    import symjac.frameworks.torch as st

    spec, impl = st.max_pool2d(2, 1)
    return outcome(verify_object(spec, impl))


@entry("jax-object", "jvp-rule (correct)", "pass", needs=("jax",))
def jax_custom_jvp_avg1d_correct(build: Path) -> dict[str, Any]:
    import jax_impls
    import symjac.frameworks.jax as sj

    return outcome(verify_object(_pool("avg", (2,), stride=1), sj.wrap(jax_impls.avg1d_custom_jvp())))


@entry("jax-object", "double-backward (correct)", "pass", needs=("jax",))
def jax_custom_vjp_l2_correct(build: Path) -> dict[str, Any]:
    """A right custom_vjp L2 pool: JAX has no forward mode for it (not a defect of the pool)."""
    import jax_impls
    import symjac.frameworks.jax as sj

    return outcome(verify_object(_pool("lp", (2,), stride=2, p=2), sj.wrap(jax_impls.l2pool_custom_vjp())))


@entry("torch-object", "vmap (correct)", "pass", needs=("torch",))
def torch_fn_max1d_k2s2_correct(build: Path) -> dict[str, Any]:
    """The max pool Function itself (not wrapped), batch rule honouring in_dims."""
    import torch_impls

    return outcome(verify_object(_pool("max", (2,), stride=2), torch_impls.max1d(2, 2)))


@entry("torch-object", "jvp-rule/double-backward/vmap (correct)", "pass", needs=("torch",))
def torch_avg_pool2d_ceil_correct(build: Path) -> dict[str, Any]:
    """PyTorch's own avg_pool2d(3, 2, 1, ceil_mode=True), count_include_pad, ready-made."""
    import symjac.frameworks.torch as st

    spec, impl = st.avg_pool2d(3, 2, 1, ceil_mode=True)
    return outcome(verify_object(spec, impl))


@entry("jax-object", "jvp-rule/double-backward/vmap (correct)", "pass", needs=("jax",))
def jax_reduce_window_sum_correct(build: Path) -> dict[str, Any]:
    """JAX's own lax.reduce_window sum pool (NHWC, 3x3, stride 2, SAME), ready-made."""
    import symjac.frameworks.jax as sj

    spec, impl = sj.reduce_window_sum((1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    return outcome(verify_object(spec, impl))


@entry("batched", "vmap (correct)", "pass")
def numpy_batched_avg2d_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    pool = ni.Pool("avg", [ni.strided(3, 2, 1, 1)] * 2)
    return outcome(verify_batched(_pool("avg", 3, stride=2, padding=1), pool, ni.Batched(pool)))


@entry("batched", "vmap (correct)", "pass")
def numpy_batched_max1d_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    pool = ni.Pool("max", [ni.strided(3, 1)])
    return outcome(verify_batched(_pool("max", (3,), stride=1), pool, ni.Batched(pool)))


@entry("torch-object", "robustness: crash in jvp", "fail", ("crashed",), needs=("torch",))
def torch_fn_jvp_aborts_isolated(build: Path) -> dict[str, Any]:
    """verify(..., isolate=True) of a Function whose JVP aborts: a crashed finding, the caller alive."""
    import torch_impls

    return outcome(verify_object(_pool("avg", 2, stride=2), torch_impls.avg2d(abort_in_jvp=True), isolate=True))


# ---------------------------------------------------------------- in process: a helper thread writing late


def _three_runs(make: Callable[[], Any], spec: Any) -> dict[str, Any]:
    """Three runs of verify: FAIL only when every run flags it (the issue measured 1 of 3)."""
    reports = [verify_object(spec, make()) for _ in range(3)]
    flagged = sum(not r.ok for r in reports)
    cats = list(dict.fromkeys(c for r in reports for c in r.categories()))
    got = "FAIL" if flagged == 3 else "PASS" if flagged == 0 else f"FAIL {flagged}/3"
    return {"got": got, "categories": cats, "findings": sum(len(r.findings) for r in reports),
            "note": f"flagged in {flagged} of 3 runs; " + reports[0].headline[:200]}


@entry("callable", "late-thread-write", "fail", ("result_changed_after_return",))
def thread_backward_scales_late(build: Path) -> dict[str, Any]:
    """A backward whose helper thread doubles dx 2 ms after returning it."""
    ni = _ni()
    return _three_runs(lambda: ni.LateWriter(ni.Pool("avg", [ni.strided(3, 2, 1, 1)] * 2), side="backward", delay=0.002),
                       _pool("avg", 3, stride=2, padding=1))


@entry("callable", "late-thread-write", "fail", ("result_changed_after_return",))
def thread_forward_zeroes_last(build: Path) -> dict[str, Any]:
    """A max-pool forward whose helper thread zeroes y's last element 10 ms after returning it."""
    ni = _ni()
    return _three_runs(lambda: ni.LateWriter(ni.Pool("max", [ni.strided(2, 1)]), side="forward", delay=0.01,
                                             zero_last=True), _pool("max", (2,), stride=1))


@entry("callable", "late-thread-write (correct)", "pass")
def thread_joined_correct(build: Path) -> dict[str, Any]:
    """A backward computed with a helper thread that is joined before the call returns."""
    ni = _ni()
    return _three_runs(lambda: ni.LateWriter(ni.Pool("avg", [ni.strided(3, 1, 1, 1)]), side="backward", delay=0.0,
                                             join=True), _pool("avg", (3,), stride=1, padding=1))


# ---------------------------------------------------------------- adaptive pooling and upsampling


def _adaptive(mode: str, size: tuple[int, ...]) -> Any:
    import symjac

    return symjac.AdaptivePool(mode, size)


@entry("callable", "adaptive-window-rule", "fail", VALUES)
def adaptive_max1d_fixed_width(build: Path) -> dict[str, Any]:
    """Adaptive max pooling to 4 with windows ceil(L/4) wide from floor(iL/4) (wrong at L = 7, 11)."""
    ni = _ni()
    return outcome(verify_object(_adaptive("max", (4,)), ni.Pool("max", [ni.adaptive_fixed_width(4)])))


@entry("callable", "adaptive-window-rule", "fail", VALUES)
def adaptive_avg2d_fixed_end(build: Path) -> dict[str, Any]:
    """Adaptive avg pooling to (3, 4) whose H windows are ceil(L/3) wide, ending at ceil((i+1)L/3)."""
    ni = _ni()
    return outcome(verify_object(_adaptive("avg", (3, 4)), ni.Pool("avg", [ni.adaptive_fixed_end(3), ni.adaptive(4)])))


@entry("callable", "adaptive-window-rule (correct)", "pass")
def adaptive_avg1d_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_object(_adaptive("avg", (5,)), ni.Pool("avg", [ni.adaptive(5)])))


@entry("callable", "adaptive-window-rule (correct)", "pass")
def adaptive_avg2d_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_object(_adaptive("avg", (3, 4)), ni.Pool("avg", [ni.adaptive(3), ni.adaptive(4)])))


@entry("callable", "adaptive-window-rule (correct)", "pass")
def adaptive_max2d_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_object(_adaptive("max", (2, 3)), ni.Pool("max", [ni.adaptive(2), ni.adaptive(3)])))


@entry("callable", "adaptive-upsampling", "fail", VALUES)
def upsample_avg1d_nearest(build: Path) -> dict[str, Any]:
    """Adaptive avg 3 -> 7 by nearest-neighbour indexing (the 2-cell windows get one cell)."""
    ni = _ni()
    return outcome(verify_shape(_adaptive("avg", (7,)), ni.Pool("avg", [ni.adaptive_nearest(7)]), (2, 3, 3)))


@entry("callable", "adaptive-upsampling", "fail", VALUES)
def upsample_max2d_fixed_width(build: Path) -> dict[str, Any]:
    """Adaptive max (3, 2) -> (5, 3) with one-cell-wide windows where the rule has two cells."""
    ni = _ni()
    pool = ni.Pool("max", [ni.adaptive_fixed_width(5), ni.adaptive_fixed_width(3)])
    return outcome(verify_shape(_adaptive("max", (5, 3)), pool, (2, 2, 3, 2)))


@entry("torch-object", "adaptive-upsampling (correct)", "pass", needs=("torch",))
def upsample_torch_adaptive_avg1d(build: Path) -> dict[str, Any]:
    """PyTorch's adaptive_avg_pool1d(7) on inputs of length 3 (PyTorch allows it)."""
    import symjac.frameworks.torch as st

    spec, impl = st.adaptive_avg_pool1d(7)
    return outcome(verify_shape(spec, impl, (2, 3, 3)))


@entry("callable", "adaptive-upsampling (correct)", "pass")
def upsample_numpy_max2d_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_shape(_adaptive("max", (5, 3)), ni.Pool("max", [ni.adaptive(5), ni.adaptive(3)]), (2, 2, 3, 2)))


# ---------------------------------------------------------------- long kernels


@entry("callable", "long-kernel", "fail", VALUES)
def long_avg1024_last_cell(build: Path) -> dict[str, Any]:
    """Average pooling, kernel 1024, stride 1024, whose backward forgets each window's last cell."""
    ni = _ni()
    return outcome(verify_object(_pool("avg", (1024,), stride=1024),
                                 ni.Pool("avg", [ni.strided(1024, 1024)], skip_last_cell=True)))


@entry("callable", "long-kernel", "fail", VALUES)
def long_max1000_ceil_last_window(build: Path) -> dict[str, Any]:
    """Max pooling, kernel 1000, stride 1000, ceil_mode, whose backward drops the partial last window."""
    ni = _ni()
    return outcome(verify_object(_pool("max", (1000,), stride=1000, ceil_mode=True),
                                 ni.Pool("max", [ni.strided(1000, 1000, ceil=True)], skip_last_window=True)))


@entry("callable", "long-kernel (correct)", "pass")
def long_avg1024_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_object(_pool("avg", (1024,), stride=1024), ni.Pool("avg", [ni.strided(1024, 1024)])))


@entry("callable", "long-kernel (correct)", "pass")
def long_max1000_ceil_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_object(_pool("max", (1000,), stride=1000, ceil_mode=True),
                                 ni.Pool("max", [ni.strided(1000, 1000, ceil=True)])))


@entry("callable", "long-kernel (correct)", "pass")
def long_max2d_2x1500_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_object(_pool("max", (2, 1500), stride=(2, 1500)),
                                 ni.Pool("max", [ni.strided(2, 2), ni.strided(1500, 1500)])))


# ---------------------------------------------------------------- lp pooling's JVP at a zero-sum window


def _jvp_only(spec: Any, jvp: Any) -> dict[str, Any]:
    return outcome(verify_jvp(spec, jvp))


@entry("callable", "lp-jvp-zero-sum", "fail", ("missing_windows", "partial_windows", "wrong_weights"))
def lp1_jvp_zero_sum_relu(build: Path) -> dict[str, Any]:
    """lp pooling p = 1, kernel 3, stride 2: a JVP that is 0 wherever the window sums to 0."""
    return _jvp_only(_pool("lp", (3,), stride=2, p=1), _ni().lp1_jvp(3, 2, zero_sum_bug=True))


@entry("callable", "lp-jvp-zero-sum", "fail", ("missing_windows", "partial_windows", "wrong_weights"))
def lp1_jvp_zero_sum_mixed(build: Path) -> dict[str, Any]:
    """lp pooling p = 1, kernel 4, stride 1: a JVP that is 0 where nonzero cells sum to 0 (right at all-zero windows)."""
    return _jvp_only(_pool("lp", (4,), stride=1, p=1), _ni().lp1_jvp(4, 1, zero_sum_bug=True, mixed_only=True))


@entry("torch-object", "lp-jvp-zero-sum", "fail", ("missing_windows", "partial_windows", "wrong_weights"),
       needs=("torch",))
def lp1_jvp_torch_lp_pool2d(build: Path) -> dict[str, Any]:
    """PyTorch's own lp_pool2d(x, 1, 2): forward mode through relu(|s|) gives 0 where a 2x2 window sums to 0."""
    import symjac.frameworks.torch as st

    spec, impl = st.lp_pool2d(1, 2)
    return _jvp_only(spec, impl.jvp)


@entry("callable", "lp-jvp-zero-sum (correct)", "pass")
def lp1_jvp_correct(build: Path) -> dict[str, Any]:
    return _jvp_only(_pool("lp", (3,), stride=2, p=1), _ni().lp1_jvp(3, 2, zero_sum_bug=False))


@entry("callable", "lp-jvp-zero-sum (correct)", "pass")
def lp1_jvp_k4_correct(build: Path) -> dict[str, Any]:
    return _jvp_only(_pool("lp", (4,), stride=1, p=1), _ni().lp1_jvp(4, 1, zero_sum_bug=False))


# ---------------------------------------------------------------- extreme magnitudes


LP_EXTREME = ("forward_values", "bad_output", "missing_windows", "partial_windows", "wrong_weights", "wrong_cells")


@entry("callable", "extreme-magnitude", "fail", LP_EXTREME, EXTREME)
def lp2_f32_square_first(build: Path) -> dict[str, Any]:
    """float32 L2 pooling 2x2 as sqrt(sum x^2): x^2 overflows past ~1.8e19."""
    ni = _ni()
    return outcome(verify_object(_pool("lp", 2, stride=2, p=2), ni.Pool("lp", [ni.strided(2, 2)] * 2, p=2),
                                 dtype="float32"))


@entry("callable", "extreme-magnitude", "fail", LP_EXTREME, EXTREME)
def lp4_f32_power_first(build: Path) -> dict[str, Any]:
    """float32 lp pooling p = 4, 1-D, as (sum x^4)^(1/4): x^4 overflows past ~4.3e9."""
    ni = _ni()
    return outcome(verify_object(_pool("lp", (2,), stride=2, p=4), ni.Pool("lp", [ni.strided(2, 2)], p=4),
                                 dtype="float32"))


@entry("callable", "extreme-magnitude (correct)", "pass")
def lp2_f32_scaled_correct(build: Path) -> dict[str, Any]:
    """float32 L2 pooling that scales by the window's largest magnitude before squaring."""
    ni = _ni()
    return outcome(verify_object(_pool("lp", 2, stride=2, p=2), ni.Pool("lp", [ni.strided(2, 2)] * 2, p=2, scaled=True),
                                 dtype="float32"))


@entry("callable", "extreme-magnitude (correct)", "pass")
def lp4_f32_scaled_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_object(_pool("lp", (2,), stride=2, p=4), ni.Pool("lp", [ni.strided(2, 2)], p=4, scaled=True),
                                 dtype="float32"))


def _loss(kind: str, **kwargs: Any) -> Any:
    import symjac

    return symjac.Loss(kind, **kwargs)


LOSS_EXTREME = ("bad_output", "wrong_values", "forward_values")


@entry("loss", "extreme-magnitude", "fail", LOSS_EXTREME, EXTREME)
def softmax_ce_unshifted(build: Path) -> dict[str, Any]:
    """softmax CE (sum, S = 4) exponentiating logits without subtracting the row maximum."""
    ni = _ni()
    return outcome(verify_loss(_loss("softmax_ce", reduction="sum", scale=4),
                               ni.SoftmaxCE(scale=4, reduction="sum", unshifted=True)))


@entry("loss", "extreme-magnitude", "fail", LOSS_EXTREME, EXTREME)
def softmax_ce_log_of_softmax_smoothing(build: Path) -> dict[str, Any]:
    """softmax CE with label smoothing 0.1 whose forward takes log(softmax(z)) (log 0 at extreme logits)."""
    ni = _ni()
    return outcome(verify_loss(_loss("softmax_ce", label_smoothing=Fraction(1, 10)), ni.SoftmaxCE(eps=0.1, log_of_softmax=True)))


@entry("loss", "extreme-magnitude", "fail", LOSS_EXTREME, EXTREME)
def sigmoid_ce_exp_ratio(build: Path) -> dict[str, Any]:
    """sigmoid CE whose derivative is exp(z) / (1 + exp(z)) - y (NaN past z ~ 710)."""
    ni = _ni()
    return outcome(verify_loss(_loss("sigmoid_ce"), ni.SigmoidCE(exp_ratio=True)))


@entry("loss", "extreme-magnitude (correct)", "pass")
def softmax_ce_stable_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_loss(_loss("softmax_ce", label_smoothing=Fraction(1, 10), scale=8),
                               ni.SoftmaxCE(eps=0.1, scale=8)))


@entry("loss", "extreme-magnitude (correct)", "pass")
def softmax_ce_sum_scale4_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_loss(_loss("softmax_ce", reduction="sum", scale=4), ni.SoftmaxCE(scale=4, reduction="sum")))


@entry("loss", "extreme-magnitude (correct)", "pass")
def sigmoid_ce_stable_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_loss(_loss("sigmoid_ce"), ni.SigmoidCE()))


# ---------------------------------------------------------------- loss defaults at the spec's own kink


@entry("loss", "loss-kink-default (correct)", "pass")
def huber_delta2_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_loss(_loss("huber", delta=2), ni.Huber("huber", 2.0)))


@entry("loss", "loss-kink-default (correct)", "pass")
def smooth_l1_beta2_correct(build: Path) -> dict[str, Any]:
    ni = _ni()
    return outcome(verify_loss(_loss("smooth_l1", delta=2), ni.Huber("smooth_l1", 2.0)))


@entry("loss", "loss-kink-default", "fail", ("wrong_values", "wrong_scale"))
def huber_delta2_clip_at_one(build: Path) -> dict[str, Any]:
    """huber with delta = 2 whose derivative clips d at +-1 (delta forgotten)."""
    ni = _ni()
    return outcome(verify_loss(_loss("huber", delta=2), ni.Huber("huber", 2.0, clip_at_one=True)))


@entry("loss", "loss-kink-default", "fail", ("wrong_second_derivative", "wrong_values"))
def smooth_l1_beta2_hvp_everywhere(build: Path) -> dict[str, Any]:
    """smooth_l1 with beta = 2 whose HVP applies the quadratic branch's 1/beta on the linear branch too."""
    ni = _ni()
    return outcome(verify_loss(_loss("smooth_l1", delta=2), ni.Huber("smooth_l1", 2.0, hvp_everywhere=True)))


# ---------------------------------------------------------------- NaN inputs


NAN_ROUTING = ("wrong_cells", "tie_not_subgradient", "partial_windows", "missing_windows", "tie_policy")


@entry("callable", "nan-input", "fail", NAN_ROUTING, ("nan",))
def nan_max1d_nanargmax(build: Path) -> dict[str, Any]:
    """Max pooling k=3 s=2 whose forward propagates NaN but whose backward routes a NaN window's
    gradient to its largest non-NaN cell (np.nanargmax); at defaults."""
    ni = _ni()
    return outcome(verify_object(_pool("max", (3,), stride=2), ni.Pool("max", [ni.strided(3, 2)], route="nanargmax")))


@entry("callable", "nan-input", "fail", NAN_ROUTING, ("nan",))
def nan_max2d_first_cell_given_x(build: Path) -> dict[str, Any]:
    """2x2 max pooling that sends a NaN window's gradient to the window's first cell, at an input with NaNs."""
    ni = _ni()
    x = ni.nan_input((1, 2, 4, 6), [(0, 0, 1, 1), (0, 1, 2, 5), (0, 1, 3, 2)])
    return outcome(verify_given_x(_pool("max", 2, stride=2), ni.Pool("max", [ni.strided(2, 2)] * 2, route="first_cell"), x))


@entry("callable", "nan-input (correct)", "pass")
def nan_max1d_first_nan_correct(build: Path) -> dict[str, Any]:
    """Max pooling k=3 s=2 routing a NaN window's gradient to its (first) NaN cell, as PyTorch; at defaults."""
    ni = _ni()
    return outcome(verify_object(_pool("max", (3,), stride=2), ni.Pool("max", [ni.strided(3, 2)])))


@entry("callable", "nan-input (correct)", "pass")
def nan_avg2d_correct(build: Path) -> dict[str, Any]:
    """Average pooling 2x2 stride 1 (its gradient does not depend on x: NaN inputs change nothing); at defaults."""
    ni = _ni()
    return outcome(verify_object(_pool("avg", 2, stride=1), ni.Pool("avg", [ni.strided(2, 1)] * 2)))


@entry("torch-object", "nan-input (correct)", "pass", needs=("torch",))
def nan_torch_max_pool2d_given_x(build: Path) -> dict[str, Any]:
    """PyTorch's max_pool2d (2, 2) at an input with NaNs (its convention: the NaN cell gets the gradient)."""
    import symjac.frameworks.torch as st

    spec, impl = st.max_pool2d(2, 2)
    return outcome(verify_given_x(spec, impl, _ni().nan_input((1, 2, 4, 6), [(0, 0, 1, 1), (0, 1, 2, 5)])))


@entry("callable", "robustness: object dtype", "fail", ("bad_output",))
def object_dtype_backward(build: Path) -> dict[str, Any]:
    """A backward returning its right values as an object-dtype array."""
    ni = _ni()
    return outcome(verify_object(_pool("avg", 3, stride=2, padding=1), ni.object_dtype(ni.Pool("avg", [ni.strided(3, 2, 1, 1)] * 2))))


# ---------------------------------------------------------------- native kernels: C through a process and ctypes

#: program or library name -> compile flags (``.so``: a shared library for ctypes)
NATIVE = {
    "pool": (), "pool_scratch": ("-DBUG_SCRATCH_TAIL",), "pool_unwritten": ("-DBUG_UNWRITTEN",),
    "pool_one_shot": ("-DONE_SHOT",), "pool_one_shot_divisor": ("-DONE_SHOT", "-DBUG_DIVISOR"),
    "libpool.so": (), "libpool_past.so": ("-DBUG_WRITE_PAST",), "libpool_before.so": ("-DBUG_WRITE_BEFORE",),
    "libpool_unwritten.so": ("-DBUG_UNWRITTEN",),
    "golden_consumer": (), "golden_consumer_assign": ("-DBUG_ASSIGN",),
}


def build_native(out: Path) -> str | None:
    """Compile :data:`NATIVE` into ``out``; the reason when there is no C compiler or a build fails."""
    cc = next((found for name in (os.environ.get("CC", ""), "cc", "gcc") if name and (found := shutil.which(name))),
              None)
    if cc is None:
        return "no C compiler (cc, gcc or $CC)"
    for name, flags in NATIVE.items():
        source = HERE / ("golden_consumer.c" if name.startswith("golden") else "pool_kernel.c")
        shared = ["-shared", "-fPIC", "-DSYMJAC_SHARED"] if name.endswith(".so") else []
        cmd = [cc, "-std=c99", "-O2", "-I", str(ROOT / "contrib"), *shared, *flags, "-o", str(out / name), str(source),
               "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            return f"{' '.join(cmd)} failed: {done.stderr.strip()[:300]}"
    return None


NATIVE_CC = ("cc",)


@entry("cli-exec", "scratch-tail", "fail", ("bad_output",), UNWRITTEN, NATIVE_CC)
def exec_cli_scratch_tail_avg1d(build: Path) -> dict[str, Any]:
    """`symjac verify --exec`: avg 1-D k=2 s=2 whose backward copies out a malloc'd scratch plane
    cleared only up to the last window (the odd length's last cell is heap garbage)."""
    return _cli(SPECS / "avg1d_k2s2.toml", build / "pool_scratch")


@entry("exec", "scratch-tail", "fail", ("bad_output",), UNWRITTEN, NATIVE_CC)
def exec_scratch_tail_max2d_f32(build: Path) -> dict[str, Any]:
    """The process route from Python: 2x2 max pooling in float32, the same scratch-plane defect."""
    spec = _pool("max", 2, stride=2)
    return outcome(verify_object(spec, process_impl(build / "pool_scratch", spec), dtype="float32"))


@entry("ctypes", "write-outside-buffer", "fail", ("bad_output",), OUT_OF_BUFFER, NATIVE_CC)
def ctypes_write_past_avg2d(build: Path) -> dict[str, Any]:
    """ctypes: right values, then one element written past the end of the output buffer."""
    spec = _pool("avg", 3, stride=2, padding=1)
    return outcome(verify_object(spec, ctypes_impl(build / "libpool_past.so", spec)))


@entry("ctypes", "write-outside-buffer", "fail", ("bad_output",), OUT_OF_BUFFER, NATIVE_CC)
def ctypes_write_before_max1d_isolated(build: Path) -> dict[str, Any]:
    """ctypes with isolate=True (the docs' advice for a risky kernel): one element written before the output buffer."""
    spec = _pool("max", (2,), stride=2)
    return outcome(verify_object(spec, ctypes_impl(build / "libpool_before.so", spec), isolate=True))


@entry("ctypes", "unwritten-output", "fail", ("bad_output",), UNWRITTEN, NATIVE_CC)
def ctypes_unwritten_gaps_avg1d(build: Path) -> dict[str, Any]:
    """ctypes: avg 1-D k=2 s=3 whose backward never writes the cells between windows."""
    spec = _pool("avg", (2,), stride=3)
    return outcome(verify_object(spec, ctypes_impl(build / "libpool_unwritten.so", spec)))


@entry("cli-exec", "unwritten-output", "fail", ("bad_output",), UNWRITTEN, NATIVE_CC)
def exec_cli_unwritten_gaps_max2d(build: Path) -> dict[str, Any]:
    """`symjac verify --exec`: 2x2 max pooling with stride 3 whose backward never writes the gaps."""
    return _cli(SPECS / "max2d_k2s3.toml", build / "pool_unwritten")


@entry("cli-exec", "native (correct)", "pass", needs=NATIVE_CC)
def exec_cli_avg2d_correct(build: Path) -> dict[str, Any]:
    return _cli(SPECS / "avg2d_k3s2p1.toml", build / "pool")


@entry("cli-exec", "native (correct)", "pass", needs=NATIVE_CC)
def exec_cli_avg1d_k2s2_correct(build: Path) -> dict[str, Any]:
    return _cli(SPECS / "avg1d_k2s2.toml", build / "pool")


@entry("exec", "native (correct)", "pass", needs=NATIVE_CC)
def exec_max2d_gaps_correct(build: Path) -> dict[str, Any]:
    """The process route from Python: 2x2 max pooling, stride 3, every dx cell written."""
    spec = _pool("max", 2, stride=3)
    return outcome(verify_object(spec, process_impl(build / "pool", spec)))


@entry("exec", "native (correct)", "pass", needs=NATIVE_CC)
def exec_avg1d_correct(build: Path) -> dict[str, Any]:
    spec = _pool("avg", (2,), stride=2)
    return outcome(verify_object(spec, process_impl(build / "pool", spec)))


@entry("ctypes", "native (correct)", "pass", needs=NATIVE_CC)
def ctypes_max1d_gaps_f32_correct(build: Path) -> dict[str, Any]:
    """ctypes: max 1-D k=2 s=3 in float32, every dx cell written (the gaps 0)."""
    spec = _pool("max", (2,), stride=3)
    return outcome(verify_object(spec, ctypes_impl(build / "libpool.so", spec), dtype="float32"))


@entry("ctypes", "native (correct)", "pass", needs=NATIVE_CC)
def ctypes_avg2d_f32_correct(build: Path) -> dict[str, Any]:
    spec = _pool("avg", 3, stride=2, padding=1)
    return outcome(verify_object(spec, ctypes_impl(build / "libpool.so", spec), dtype="float32"))


@entry("ctypes", "native (correct)", "pass", needs=NATIVE_CC)
def ctypes_avg1d_gaps_isolated_correct(build: Path) -> dict[str, Any]:
    """ctypes with isolate=True: avg 1-D k=2 s=3, every dx cell written."""
    spec = _pool("avg", (2,), stride=3)
    return outcome(verify_object(spec, ctypes_impl(build / "libpool.so", spec), isolate=True))


@entry("cli-exec", "one-request-per-run (correct)", "pass", needs=NATIVE_CC)
def exec_cli_one_shot_max2d(build: Path) -> dict[str, Any]:
    """`symjac verify --exec`: a kernel that answers one request per run and exits 0."""
    return _cli(SPECS / "max2d_k2s2.toml", build / "pool_one_shot")


@entry("exec", "one-request-per-run (correct)", "pass", needs=NATIVE_CC)
def exec_one_shot_avg1d_f32(build: Path) -> dict[str, Any]:
    spec = _pool("avg", (3,), stride=2, padding=1)
    return outcome(verify_object(spec, process_impl(build / "pool_one_shot", spec), dtype="float32"))


@entry("exec", "one-request-per-run", "fail", ("wrong_weights", "forward_values"), needs=NATIVE_CC)
def exec_one_shot_divisor_avg2d(build: Path) -> dict[str, Any]:
    """A one-request-per-run kernel whose average divides by the kernel's area at padded windows."""
    spec = _pool("avg", 3, stride=2, padding=1)
    return outcome(verify_object(spec, process_impl(build / "pool_one_shot_divisor", spec)))


def _cli(spec_file: Path, program: Path) -> dict[str, Any]:
    done = cli_verify_exec(spec_file, program, timeout=0.9 * float(os.environ.get("HELDOUT34_TIMEOUT", "120")))
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"got": "ERROR", "categories": [], "findings": 0, "note": f"exit {done.returncode}: {tail[:250]}"}
    doc = doc[0] if isinstance(doc, list) else doc
    roots = [f for f in doc.get("findings", []) if not f.get("consequence_of")]
    cats = list(dict.fromkeys(f["category"] for f in roots))
    got = "FAIL" if doc.get("findings") else "UNSUPPORTED" if doc.get("unsupported") else "PASS"
    if (done.returncode == 0) != (got == "PASS"):
        got = f"{got} (exit {done.returncode})"
    return {"got": got, "categories": cats, "findings": len(doc.get("findings", [])),
            "note": f"exit {done.returncode}: {str(doc.get('summary', ''))[:250]}"}


# ---------------------------------------------------------------- golden data consumers


def _golden(spec_file: Path, dtype: str, fmt: str) -> tuple[Path, dict[str, Any] | None]:
    out = Path(tempfile.mkdtemp(prefix="golden_", dir=os.environ["HELDOUT34_SCRATCH"]))
    done = golden_cover(spec_file, out, dtype, fmt, timeout=0.5 * float(os.environ.get("HELDOUT34_TIMEOUT", "120")))
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return out, {"got": "ERROR", "categories": [], "findings": 0, "note": f"golden exit {done.returncode}: {tail[:250]}"}
    return out, None


def _golden_outcome(results: dict[str, set[str]]) -> dict[str, Any]:
    """Per case the quantities the consumer found wrong: FAIL with their union, PASS when none."""
    bad = {case: q for case, q in results.items() if q}
    cats = sorted(set().union(*bad.values())) if bad else []
    first = next(iter(bad), "")
    return {"got": "FAIL" if bad else "PASS", "categories": cats, "findings": len(bad),
            "note": f"{len(bad)} of {len(results)} golden cases fail the consumer" + (f"; first {first}" if bad else "")}


def _c_consumer(spec_file: Path, consumer: Path) -> dict[str, Any]:
    out, error = _golden(spec_file, "float32", "bin")
    if error:
        return error
    folders = sorted(str(p.parent) for p in out.glob("*/index.json"))
    done = subprocess.run([str(consumer), *folders], capture_output=True, text=True, check=False,
                          timeout=0.4 * float(os.environ.get("HELDOUT34_TIMEOUT", "120")))
    results: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():  # "FOLDER: ok" or "FOLDER: FAIL y dx (counts)"
        folder, _, verdict = line.partition(": ")
        if verdict == "ok" or verdict.startswith("FAIL"):
            results[Path(folder).name] = set(verdict[4:].split("(")[0].split()) if verdict.startswith("FAIL") else set()
    if done.returncode == 2 or not results:
        return {"got": "ERROR", "categories": [], "findings": 0, "note": f"consumer: {done.stdout[-250:]}"}
    return _golden_outcome(results)


def _off(z: Any, name: str, got: Any) -> bool:
    """Whether ``got`` is outside golden array ``name``'s bounds (False when the case has no such array)."""
    import numpy as np

    return name in z.files and not np.all(np.abs(got.astype(np.float64) - z[name].astype(np.float64))
                                          <= z[f"{name}.max_abs_error"])


def _numpy_consumer(spec_file: Path, dtype: str, pool_of: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """Each case of ``golden --cover --format npz``: the layer built from its operator object, run in
    ``dtype`` on the case's input, compared with y and dx within their bounds (dx: or any tie policy's)."""
    import numpy as np

    out, error = _golden(spec_file, dtype, "npz")
    if error:
        return error
    results: dict[str, set[str]] = {}
    for path in sorted(out.glob("*.npz")):
        z = np.load(path)
        layer = pool_of(json.loads(z["operator.json"].item()))
        x, dy = z[f"x.{dtype}"], z[f"dy.{dtype}"]
        dx = layer.backward(x, dy)
        wrong = {"y"} if _off(z, f"y.{dtype}", layer.forward(x)) else set()
        policies = [f"dx_{policy}.{dtype}" for policy in ("first", "last", "split")]
        if _off(z, f"dx.{dtype}", dx) and not any(p in z.files and not _off(z, p, dx) for p in policies):
            wrong.add("dx")
        results[path.stem] = wrong
    if not results:
        return {"got": "ERROR", "categories": [], "findings": 0, "note": "golden wrote no npz case"}
    return _golden_outcome(results)


def _strided_layer(mode: str, **kwargs: Any) -> Callable[[dict[str, Any]], Any]:
    """The layer a consumer builds from a case's operator object (kernel, stride, resolved pads)."""
    import math

    ni = _ni()

    def make(op: dict[str, Any]) -> Any:
        rules = [ni.strided(k, s, lo, hi) for k, s, (lo, hi) in zip(op["kernel"], op["stride"], op["pads"])]
        return ni.Pool(mode, rules, kernel=math.prod(op["kernel"]), **kwargs)

    return make


@entry("golden", "golden-float32 (correct)", "pass", needs=NATIVE_CC)
def golden_f32_max2d_c_correct(build: Path) -> dict[str, Any]:
    """A C float32 max-pool layer (first maximum) on `golden --cover --dtype float32` data."""
    return _c_consumer(SPECS / "golden_max2d_f32.toml", build / "golden_consumer")


@entry("golden", "golden-float32", "fail", ("dx",), needs=NATIVE_CC)
def golden_f32_max2d_c_assign(build: Path) -> dict[str, Any]:
    """The C float32 max-pool layer whose backward assigns (=) each window's dy instead of adding it."""
    return _c_consumer(SPECS / "golden_max2d_f32.toml", build / "golden_consumer_assign")


@entry("golden", "golden-float32 (correct)", "pass")
def golden_f32_max1d_numpy_correct(build: Path) -> dict[str, Any]:
    return _numpy_consumer(SPECS / "golden_max1d.toml", "float32", _strided_layer("max"))


@entry("golden", "golden-float32", "fail", ("dx",))
def golden_f32_max1d_numpy_float16_argmax(build: Path) -> dict[str, Any]:
    """A float32 max-pool layer whose backward routes by the argmax of a float16 copy of the window."""
    return _numpy_consumer(SPECS / "golden_max1d.toml", "float32", _strided_layer("max", route="float16"))


@entry("golden", "golden-float16 (correct)", "pass")
def golden_f16_max1d_numpy_correct(build: Path) -> dict[str, Any]:
    """A float16 max-pool layer (first maximum, float16 comparisons) on `golden --cover --dtype float16` data."""
    return _numpy_consumer(SPECS / "golden_max1d.toml", "float16", _strided_layer("max"))


@entry("golden", "golden-float16 (correct)", "pass")
def golden_f16_avg1d_numpy_correct(build: Path) -> dict[str, Any]:
    return _numpy_consumer(SPECS / "golden_avg1d.toml", "float16", _strided_layer("avg"))


@entry("golden", "golden-float16", "fail", ("y", "dx"))
def golden_f16_avg1d_numpy_kernel_divisor(build: Path) -> dict[str, Any]:
    """A float16 average-pool layer dividing padded windows by the kernel's size (the spec excludes padding)."""
    return _numpy_consumer(SPECS / "golden_avg1d.toml", "float16", _strided_layer("avg", divisor="kernel"))


# ------------------------------------------------------------------ running and scoring


def run_child(name: str, build: Path, result: Path) -> None:
    """Run one entry in this process and write its outcome as JSON."""
    sys.path.insert(0, str(HERE))
    found = next(e for e in ENTRIES if e.name == name)
    try:
        out = found.run(build)
    except Exception as exc:  # noqa: BLE001 - an exception out of symjac is the entry's outcome
        frames = traceback.extract_tb(exc.__traceback__)
        where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(frames) if "symjac" in f.filename), "")
        out = {"got": "ERROR", "categories": [], "findings": 0,
               "note": f"{type(exc).__name__}: {str(exc).splitlines()[0][:240] if str(exc) else ''} {where}".strip()}
    result.write_text(json.dumps(out))


def run_entry(e: Entry, build: Path, scratch: Path, timeout: float) -> dict[str, Any]:
    """One entry in a fresh interpreter (its own process group), killed at ``timeout``."""
    result = scratch / f"{e.name}.json"
    env = {**os.environ, "HELDOUT34_SCRATCH": str(scratch), "HELDOUT34_TIMEOUT": str(timeout)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", e.name, "--build", str(build), "--result", str(result)]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"got": "TIMEOUT", "categories": [], "findings": 0, "note": f"no answer within {timeout:.0f} s",
                "seconds": round(time.monotonic() - start, 1)}
    seconds = round(time.monotonic() - start, 1)
    if not result.exists():
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        tail = (err.strip().splitlines() or [""])[-1][:200]
        return {"got": "ERROR", "categories": [], "findings": 0, "note": f"the process died ({how}): {tail}",
                "seconds": seconds}
    return {**json.loads(result.read_text()), "seconds": seconds}


def named_right(e: Entry, categories: list[str]) -> bool:
    return any(c in e.cats or (c not in BASELINE_CATEGORIES and any(s in c for s in e.stems)) for c in categories)


def score(e: Entry, out: dict[str, Any]) -> dict[str, Any]:
    flagged = out["got"] == "FAIL"
    if e.expect == "fail":
        named = flagged and named_right(e, out["categories"])
        return {"flagged": flagged, "named": named, "meets": named}
    clean = out["got"] == "PASS" and out["findings"] == 0
    return {"flagged": out["got"].startswith("FAIL"), "named": None, "meets": clean}


def missing(e: Entry, have: dict[str, bool], cc_reason: str | None) -> str | None:
    for need in e.needs:
        if need == "cc" and cc_reason:
            return cc_reason
        if need != "cc" and not have[need]:
            return f"{need} is not installed"
    return None


def table(rows: list[dict[str, Any]]) -> str:
    head = ("entry", "route", "class", "exp", "got", "categories", "target")
    lines = [[r["name"], r["route"], r["cls"], r["expect"], r["got"], ",".join(r["categories"]) or "-",
              "yes" if r["meets"] else "skipped" if r["got"] == "SKIPPED" else "NO"] for r in rows]
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(head)]
    widths[5] = min(widths[5], 44)
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*(cell if len(cell) <= widths[i] else cell[:widths[i] - 3] + "..." for i, cell in enumerate(line)))
            for line in lines]
    return "\n".join(out)


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ran = [r for r in rows if r["got"] != "SKIPPED"]
    buggy = [r for r in ran if r["expect"] == "fail"]
    good = [r for r in ran if r["expect"] == "pass"]
    return {
        "planted_flagged": sum(r["flagged"] for r in buggy), "planted": len(buggy),
        "named_right": sum(bool(r["named"]) for r in buggy),
        "false_alarms": sum(r["flagged"] for r in good), "correct": len(good),
        "correct_clean": sum(r["meets"] for r in good),
        "errors": sum(r["got"] in ("ERROR", "TIMEOUT") for r in ran),
        "unsupported": sum(r["got"] == "UNSUPPORTED" for r in ran),
        "meets": sum(r["meets"] for r in ran), "ran": len(ran), "skipped": len(rows) - len(ran),
    }


def totals_text(t: dict[str, Any]) -> str:
    return (f"planted defects flagged: {t['planted_flagged']}/{t['planted']}; category named right: "
            f"{t['named_right']}/{t['planted']}\n"
            f"false alarms (FAIL on a correct implementation): {t['false_alarms']}/{t['correct']}; correct ones "
            f"passed with 0 findings: {t['correct_clean']}/{t['correct']}\n"
            f"ERROR/TIMEOUT: {t['errors']}; UNSUPPORTED: {t['unsupported']}; skipped: {t['skipped']}\n"
            f"target met: {t['meets']}/{t['ran']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run the entries whose name, route or class contains this text")
    parser.add_argument("--json", help="write every entry's outcome and the totals to this file")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per entry (default 150)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--build", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run_child(args.child, Path(args.build), Path(args.result))
        return 0
    import importlib.util

    selected = [e for e in ENTRIES if not args.only or any(args.only in s for s in (e.name, e.route, e.cls))]
    have = {m: importlib.util.find_spec(m) is not None for m in ("torch", "jax")}
    rows = []
    with tempfile.TemporaryDirectory(prefix="heldout34_") as tmp:
        scratch, build = Path(tmp), Path(tmp) / "build"
        build.mkdir()
        cc_reason = build_native(build) if any("cc" in e.needs for e in selected) else None
        if cc_reason:
            print(f"note: C entries skipped: {cc_reason}", file=sys.stderr)
        for e in selected:
            why = missing(e, have, cc_reason)
            out = ({"got": "SKIPPED", "categories": [], "findings": 0, "note": why, "seconds": 0.0} if why
                   else run_entry(e, build, scratch, args.timeout))
            row = {"name": e.name, "route": e.route, "cls": e.cls, "expect": e.expect, **out,
                   **(score(e, out) if not why else {"flagged": False, "named": None, "meets": False})}
            rows.append(row)
            print(f"  {e.name}: {row['got']} {','.join(row['categories'])} ({row['seconds']} s)", file=sys.stderr)
    t = totals(rows)
    print(table(rows))
    print()
    print(totals_text(t))
    misses = [r for r in rows if not r["meets"] and r["got"] != "SKIPPED"]
    if misses:
        print("\nwhat symjac said where the target is missed:")
        for r in misses:
            print(f"  {r['name']}: {r['note']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"entries": rows, "totals": t}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
