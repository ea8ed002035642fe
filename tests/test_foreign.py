"""Other libraries' argument names in a pooling spec (issue 24): ``Pool(kernel_size=3)`` is a
SpecError naming symjac's spelling, in Python's words for the API and in TOML's for a spec file,
whose booleans are spelled ``true``/``false``."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

import symjac
from symjac.io._specfile import load


@pytest.mark.parametrize("kwargs, expected", [
    ({"kernel_size": 3}, "kernel_size is PyTorch's name: symjac's is kernel=3"),
    ({"count_include_pad": True}, "symjac's is divisor='include_pad'"),
    ({"count_include_pad": False}, "symjac's is divisor='exclude_pad'"),
    ({"divisor_override": 4}, "symjac's is divisor=4"),
    ({"pool_size": (2, 2)}, "pool_size is Keras' name: symjac's is kernel=(2, 2)"),
    ({"strides": 2}, "symjac's is stride=2"),
    ({"data_format": "NHWC"}, "symjac's is layout='channels_last'"),
    ({"data_format": "channels_first"}, "symjac's is layout='channels_first'"),
    ({"window_strides": (1, 1)}, "jax.lax's name: symjac's is stride=(1, 1)"),
    ({"dilations": 2}, "ONNX's name: symjac's is dilation=2"),
    ({"strid": 2}, "did you mean 'stride'?"),
])
def test_a_foreign_argument_name_is_a_spec_error_naming_symjacs(kwargs, expected):
    with pytest.raises(symjac.SpecError, match="Pool\\(\\) has no argument") as info:
        symjac.Pool("avg", 2, **kwargs)
    assert expected in str(info.value)


def test_adaptive_and_global_pools_name_their_own_fields():
    with pytest.raises(symjac.SpecError, match="did you mean 'output_size'"):
        symjac.AdaptivePool("max", 2, output_shape=2)
    with pytest.raises(symjac.SpecError, match="data_format is TensorFlow/Keras' name: symjac's is layout='channels_last'"):
        symjac.GlobalPool("avg", data_format="channels_last")
    # a foreign name for a field the spec does not have gets no pointer to it
    with pytest.raises(symjac.SpecError) as info:
        symjac.AdaptivePool("avg", 2, count_include_pad=True)
    assert "divisor" not in str(info.value)


def test_the_constructor_still_builds_replaces_and_pickles_specs():
    spec = symjac.Pool("max", 3, stride=2, padding=1)
    assert dataclasses.replace(spec, ceil_mode=True).ceil_mode is True
    assert pickle.loads(pickle.dumps(spec)) == spec


def _spec_file(tmp_path, body: str) -> str:
    path = tmp_path / "case.toml"
    path.write_text('[operator]\nkind = "pool"\nmode = "avg"\nkernel = [3, 3]\n' + body)
    return str(path)


def test_a_spec_files_count_include_pad_points_to_divisor_in_toml(tmp_path):
    with pytest.raises(symjac.SpecError, match="unknown key 'count_include_pad'; count_include_pad is PyTorch/ONNX's "
                                               "name: symjac's is divisor = \"include_pad\""):
        load(_spec_file(tmp_path, "padding = 1\ncount_include_pad = true\n"))


def test_a_spec_files_boolean_message_uses_tomls_spelling(tmp_path):
    with pytest.raises(symjac.SpecError, match="give true or false") as info:
        load(_spec_file(tmp_path, 'ceil_mode = "true"\n'))
    assert "True" not in str(info.value)
