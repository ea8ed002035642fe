"""Specs: construction, normalisation, hashing and the bad-spec table."""

import dataclasses

import pytest

import symjac
from symjac import AdaptivePool, GlobalPool, Pool, SpecError


def test_normalises_ints_and_defaults():
    p = Pool("avg", 3)
    assert p.kernel == (3, 3) and p.stride == (3, 3) and p.dilation == (1, 1)
    assert Pool("max", (2,)).rank == 1 and Pool("max", (2, 2, 2), stride=1).stride == (1, 1, 1)
    assert Pool("avg", (2, 3), padding=1).padding == ((1, 1), (1, 1))
    assert Pool("avg", (2, 3), padding=(1, (0, 2))).padding == ((1, 1), (0, 2))


def test_specs_are_frozen_and_hashable():
    a = Pool("avg", 2, stride=1, padding="same")
    b = Pool("avg", (2, 2), stride=(1, 1), padding="same")
    assert a == b and hash(a) == hash(b)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.mode = "max"  # type: ignore[misc]
    assert dataclasses.replace(a, mode="max").mode == "max"


def test_spec_error_is_a_value_error():
    assert issubclass(SpecError, ValueError) and issubclass(SpecError, symjac.SymjacError)


BAD_SPECS = [
    (lambda: Pool("avg", 0), r"kernel=0 is not valid: 0 < 1"),
    (lambda: Pool("avg", 2, stride=-1), r"stride=-1 is not valid: -1 < 1"),
    (lambda: Pool("avg", (2, 2, 2, 2)), r"kernel=\(2, 2, 2, 2\) has 4 spatial dimensions; symjac supports 1, 2 or 3"),
    (lambda: Pool("avg", 2.5), r"kernel=2.5 is not valid: give an integer >= 1"),
    (lambda: Pool("avg", (2, 2.0)), r"kernel=\(2, 2.0\) is not valid: 2.0 is not an integer"),
    (lambda: Pool("avg", 2, padding="full"), r"padding='full' is not valid: give one of 'valid', 'same', 'same_lower'"),
    (lambda: Pool("avg", 2, padding=-1), r"padding=-1 is not valid: padding must be >= 0"),
    (lambda: Pool("avg", 2, padding=((1, 2, 3), 0)), r"padding=.* each of the 2 entries must be"),
    (lambda: Pool("avg", 2, stride=(1, 1, 1)), r"stride=\(1, 1, 1\) has 3 entries but the pool has 2 spatial"),
    (lambda: Pool("mean", 2), r"mode='mean' is not valid \(did you mean 'avg'\?\): give one of 'max', 'avg'"),
    (lambda: Pool("average", 2), r"mode='average' is not valid \(did you mean 'avg'\?\)"),
    (lambda: Pool("avg", 2, padding="sane"), r"padding='sane' is not valid \(did you mean 'same'\?\)"),
    (lambda: Pool("avg", 2, divisor=0), r"divisor=0 is not valid: an integer divisor must be >= 1"),
    (lambda: Pool("avg", 2, divisor="valid_only"), r"divisor='valid_only' is not valid: give one of 'exclude_pad', 'include_pad'"),
    (lambda: Pool("max", 2, divisor="include_pad"), r"divisor='include_pad' is only meaningful for mode='avg'"),
    (lambda: Pool("avg", 2, layout="NHWC"),
     r"layout='NHWC' is not valid \(did you mean 'channels_last'\?\): give one of 'channels_first', 'channels_last'"),
    (lambda: symjac.Loss("cross_entropy"), r"kind='cross_entropy' is not valid \(did you mean 'softmax_ce'\?\)"),
    (lambda: symjac.Loss("mse", reduction="batchmean"), r"reduction='batchmean' is not valid \(did you mean 'batch_mean'\?\)"),
    (lambda: Pool("avg", 2, ceil_mode=1), r"ceil_mode=1 is not valid: give True or False"),
    (lambda: Pool("avg", 2, padding="same", ceil_mode=True), r"ceil_mode=True has no meaning with padding='same'"),
    (lambda: AdaptivePool("avg", 0), r"output_size=0 is not valid: 0 < 1"),
    (lambda: GlobalPool("avg", rank=4), r"rank=4 is not valid: give 1, 2 or 3"),
]


@pytest.mark.parametrize("tf, ours", [("SAME", "same"), ("VALID", "valid"), ("SAME_UPPER", "same"),
                                      ("SAME_LOWER", "same_lower")])
def test_tf_and_onnx_padding_spellings_are_aliases(tf, ours):
    # TF/Keras write padding="SAME"/"VALID", ONNX auto_pad="SAME_UPPER"/"SAME_LOWER": the same specs as ours.
    assert Pool("avg", 2, stride=1, padding=tf) == Pool("avg", 2, stride=1, padding=ours)
    assert Pool("avg", 2, stride=1, padding=tf).padding == ours


@pytest.mark.parametrize("make, message", BAD_SPECS)
def test_bad_specs_name_the_field(make, message):
    with pytest.raises(SpecError, match=message):
        make()


BAD_SHAPES = [
    # kernel 3 on L=2 with no padding: no window fits.
    (Pool("avg", 3), (1, 1, 2, 5),
     r"along axis 0 \(H\) the window extent 3 \(kernel 3, dilation 1\) exceeds the padded input length 2"),
    # dilation 2 makes the extent 2*(3-1)+1 = 5 > 4.
    (Pool("max", 3, dilation=2), (4, 4), r"window extent 5 \(kernel 3, dilation 2\) exceeds"),
    # padding (3, 0) with kernel 2: the first window covers cells -3, -2 only.
    (Pool("avg", (2,), stride=1, padding=((3, 0),)), (1, 1, 4),
     r"window 0 reads only padding \(cells \[-3, -2\] all lie outside \[0, 4\)\)"),
    (Pool("avg", 2), (1, 1, 1, 4, 4), r"input_shape=\(1, 1, 1, 4, 4\) has 5 dimensions; a 2-D channels_first"),
    (Pool("avg", 2), (4, 2.0), r"every size must be an integer >= 1"),
]


@pytest.mark.parametrize("spec, shape, message", BAD_SHAPES)
def test_shapes_that_leave_no_window_raise(spec, shape, message):
    with pytest.raises(SpecError, match=message):
        symjac.resolve(spec, shape)


def test_not_a_spec():
    with pytest.raises(SpecError, match=r"spec='avg' is not a pooling spec"):
        symjac.forward("avg", [[1.0]])


def test_public_api_is_importable():
    for name in symjac.__all__:
        assert getattr(symjac, name) is not None


# -- issue 10: no silent wrong operator -------------------------------------------------
import numpy as np  # noqa: E402


@pytest.mark.parametrize("make, field", [
    (lambda: Pool(np.array(["avg"]), 2), "mode"),                      # was accepted and computed max pooling
    (lambda: Pool("avg", 2, layout=np.array(["channels_last"])), "layout"),
    (lambda: Pool("avg", 2, divisor=np.array(["include_pad"])), "divisor"),
    (lambda: AdaptivePool(np.array(["max"]), 2), "mode"),
    (lambda: GlobalPool(np.array(["avg"])), "mode"),
])
def test_string_fields_take_strings_only(make, field):
    with pytest.raises(SpecError, match=rf"{field}=array\(.*\) is not valid \(ndarray, not str\): give one of"):
        make()


def test_numpy_integers_are_accepted_wherever_ints_are():
    i = np.int64
    p = Pool("avg", i(2), stride=i(1), padding=i(1), dilation=np.int32(1), divisor=i(3))
    assert p == Pool("avg", 2, stride=1, padding=1, dilation=1, divisor=3)
    assert type(p.divisor) is int and all(type(k) is int for k in p.kernel)
    assert Pool("avg", (2,), padding=((i(1), i(0)),)).padding == ((1, 0),)
    assert Pool("max", 2, ceil_mode=np.bool_(True)).ceil_mode is True
    assert AdaptivePool("avg", (i(3),)).output_size == (3,)
    assert GlobalPool("avg", rank=i(3)) == GlobalPool("avg", rank=3)


@pytest.mark.parametrize("make", [
    lambda: Pool("avg", 2**31), lambda: Pool("avg", 2, padding=2**40), lambda: Pool("avg", 2, divisor=2**63),
])
def test_sizes_beyond_int32_are_refused(make):
    with pytest.raises(SpecError, match=r"give sizes <= 2\^31 - 1"):
        make()
