"""Codec round trips, the int16 error bound of ProFe III-D, int8 per channel, sizes and
wire-spec validation."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from quant.codecs import (
    ALLOWED_DTYPES,
    CODECS,
    TensorSpec,
    check,
    decode,
    encode,
    payload_bounds,
)
from quant.errors import QuantizationError
from quant.int16 import BLOCK, dequantize_int16, quantize_int16

FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INT_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
BYTES_PER_ELEMENT = {"int16": 2, "fp16": 2, "fp32": 4}
FIXED_SIZE_CODECS = list(BYTES_PER_ELEMENT)  # int8 is deflated: its size depends on values


def _roundtrip(tensor: torch.Tensor, codec: str) -> tuple[TensorSpec, torch.Tensor]:
    """Encode then decode, as two peers would."""
    spec, data = encode("t", tensor, codec)
    return spec, decode(spec, data)


def _valid_wire() -> dict:
    """A wire spec that from_wire accepts."""
    return {
        "name": "layer.weight",
        "dtype": "float32",
        "shape": [2, 3],
        "codec": "int16",
        "scale": 0.5,
    }


def test_hand_computed_int16_example() -> None:
    x = torch.tensor([0.0, 1.0, -2.0, 0.5])
    spec, data = encode("w", x, "int16")
    delta = 2.0 / 32767
    assert spec.scale == pytest.approx(delta, rel=1e-15)
    # 1/Delta = 16383.5 -> floor(16384.0) ; 0.5/Delta = 8191.75 -> floor(8192.25)
    assert np.frombuffer(data, dtype="<i2").tolist() == [0, 16384, -32767, 8192]
    expected = torch.tensor([0.0, 16384 * delta, -2.0, 8192 * delta], dtype=torch.float32)
    assert torch.equal(decode(spec, data), expected)


def test_blockwise_int16_equals_the_whole_array_formula() -> None:
    """Tensors longer than one block (and not a multiple of it) get exactly the codes and
    values of the one-shot float64 formula of III-D."""
    x = torch.randn(3 * BLOCK + 17, generator=torch.Generator().manual_seed(4)) * 7
    spec, data = encode("w", x, "int16")
    values = x.numpy().astype(np.float64)
    delta = np.abs(values).max() / 32767
    codes = np.clip(np.floor(values / delta + 0.5), -32767, 32767).astype("<i2")
    assert spec.scale == delta
    assert np.array_equal(np.frombuffer(data, dtype="<i2"), codes)
    assert np.array_equal(decode(spec, data).numpy(), (codes * delta).astype(np.float32))


def test_a_subnormal_delta_still_keeps_codes_in_range() -> None:
    codes, delta = quantize_int16(np.array([1e-310, -3e-310, 5e-320]))
    assert delta < 1e-300 and codes.tolist()[1] == -32767
    assert np.all(np.abs(codes.astype(np.int32)) <= 32767)


def test_quantize_int16_is_floor_of_half_shift() -> None:
    codes, delta = quantize_int16(np.array([3.0, -1.5, 0.75, -0.0]))
    assert delta == 3.0 / 32767
    # -1.5/Delta = -16383.5 -> floor(-16383.0); 0.75/Delta = 8191.75 -> floor(8192.25)
    assert codes.dtype == np.dtype("<i2")
    assert codes.tolist() == [32767, -16383, 8192, 0]
    assert dequantize_int16(codes, delta).dtype == np.float32


@pytest.mark.parametrize("shape", [(7,), (4, 5), (2, 3, 4, 5), (1000,)])
@pytest.mark.parametrize("magnitude", [1e-6, 1.0, 1e4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_int16_error_is_at_most_half_delta(shape: tuple, magnitude: float, dtype) -> None:
    generator = torch.Generator().manual_seed(math.prod(shape))
    x = torch.randn(shape, generator=generator, dtype=dtype) * magnitude
    spec, decoded = _roundtrip(x, "int16")
    assert spec.scale == pytest.approx(x.abs().max().item() / 32767, rel=1e-6)
    error = (x.double() - decoded.double()).abs().max().item()
    # the float32 rounding of codes * Delta adds a relative ~6e-8 of max|x|
    assert error <= spec.scale / 2 * (1 + 1e-3)
    assert decoded.dtype == dtype and decoded.shape == x.shape


@pytest.mark.parametrize("codec", CODECS)
def test_all_zero_tensor_decodes_to_exact_zeros(codec: str) -> None:
    spec, decoded = _roundtrip(torch.zeros(3, 4), codec)
    assert spec.scale == 1.0
    assert torch.equal(decoded, torch.zeros(3, 4))


@pytest.mark.parametrize("value", [0.3, -7.25, 1e-3, 1234.5])
def test_constant_tensor_survives_int16(value: float) -> None:
    x = torch.full((5, 2), value)
    _, decoded = _roundtrip(x, "int16")
    torch.testing.assert_close(decoded, x, rtol=1e-6, atol=0.0)


def test_fp32_is_lossless_for_float32() -> None:
    x = torch.randn(6, 7, generator=torch.Generator().manual_seed(1))
    assert torch.equal(_roundtrip(x, "fp32")[1], x)


def test_fp16_matches_a_float16_cast() -> None:
    x = torch.randn(6, 7, generator=torch.Generator().manual_seed(2))
    spec, decoded = _roundtrip(x, "fp16")
    assert spec.scale == 1.0
    assert torch.equal(decoded, x.half().float())


def test_float64_through_fp32_restores_float64() -> None:
    x = torch.tensor([1.0 / 3.0, 2.0**-30, -5.5], dtype=torch.float64)
    _, decoded = _roundtrip(x, "fp32")
    assert decoded.dtype == torch.float64
    assert torch.equal(decoded, x.float().double())


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_float_dtype_and_shape_roundtrip(codec: str, dtype) -> None:
    x = torch.linspace(-2.0, 2.0, 12, dtype=dtype).reshape(3, 4)
    spec, decoded = _roundtrip(x, codec)
    assert (spec.dtype, spec.codec, spec.shape) == (str(dtype).split(".")[1], codec, (3, 4))
    assert decoded.dtype == dtype and decoded.shape == (3, 4)
    torch.testing.assert_close(decoded.float(), x.float(), rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_non_floating_tensors_travel_raw(codec: str, dtype) -> None:
    x = torch.tensor([[0, 1, 2], [3, 0, 1]]).to(dtype)
    spec, data = encode("counts", x, codec)
    assert spec.codec == "raw" and spec.scale == 1.0
    assert len(data) == x.numel() * x.element_size()
    decoded = decode(spec, data)
    assert decoded.dtype == dtype and torch.equal(decoded, x)


def test_raw_int64_is_little_endian() -> None:
    _, data = encode("n", torch.tensor([1, 256], dtype=torch.int64), "int16")
    assert data == b"\x01" + b"\x00" * 7 + b"\x00\x01" + b"\x00" * 6


@pytest.mark.parametrize("codec", FIXED_SIZE_CODECS)
def test_frame_sizes(codec: str) -> None:
    x = torch.randn(10, 3)
    spec, data = encode("w", x, codec)
    assert (len(data), len(data)) == payload_bounds(spec) == (30 * BYTES_PER_ELEMENT[codec],) * 2


def test_int16_frame_is_half_of_fp32() -> None:
    x = torch.randn(64)
    assert 2 * len(encode("w", x, "int16")[1]) == len(encode("w", x, "fp32")[1])


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (0, 4)])
def test_scalar_and_empty_tensors(codec: str, shape: tuple) -> None:
    x = torch.full(shape, 1.5)
    spec, data = encode("s", x, codec)
    if codec in BYTES_PER_ELEMENT:
        assert len(data) == math.prod(shape) * BYTES_PER_ELEMENT[codec]
    decoded = decode(spec, data)
    assert decoded.shape == x.shape and torch.equal(decoded, x)


@pytest.mark.parametrize("codec", FIXED_SIZE_CODECS)
def test_decode_rejects_wrong_length(codec: str) -> None:
    spec, data = encode("w", torch.ones(4), codec)
    for bad in (data[:-1], data + b"\x00", b""):
        with pytest.raises(QuantizationError, match="payload has"):
            decode(spec, bad)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
@pytest.mark.parametrize("codec", CODECS)
def test_decode_copies_the_buffer(dtype, codec: str) -> None:
    spec, data = encode("w", torch.arange(4).to(dtype), codec)
    buffer = bytearray(data)
    decoded = decode(spec, memoryview(buffer))
    buffer[:] = b"\x7f" * len(buffer)
    assert torch.equal(decoded, decode(spec, data))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("codec", CODECS)
def test_non_finite_input_raises_with_name(bad: float, codec: str) -> None:
    with pytest.raises(QuantizationError, match="'fc.bias'.*NaN or Inf"):
        encode("fc.bias", torch.tensor([1.0, bad]), codec)


def test_fp16_overflow_raises() -> None:
    with pytest.raises(QuantizationError, match="overflows fp16"):
        encode("big", torch.tensor([1e6]), "fp16")


@pytest.mark.parametrize("codec", ["int4", "raw", "FP32", ""])
def test_unknown_codec_lists_valid_ones(codec: str) -> None:
    with pytest.raises(QuantizationError,
                       match=f"unknown codec '{codec}'.*int16.*int8.*fp16.*fp32"):
        encode("w", torch.ones(2), codec)


def test_unsupported_dtype_raises() -> None:
    with pytest.raises(QuantizationError, match="complex64"):
        encode("z", torch.ones(2, dtype=torch.complex64), "fp32")


def test_quantize_int16_rejects_non_finite() -> None:
    with pytest.raises(QuantizationError):
        quantize_int16(np.array([0.0, np.nan]))


@pytest.mark.parametrize("codec", CODECS)
def test_wire_roundtrip(codec: str) -> None:
    spec, _ = encode("w", torch.randn(2, 3), codec)
    wire = spec.to_wire()
    assert wire["shape"] == [2, 3] and isinstance(wire["shape"], list)
    assert TensorSpec.from_wire(wire) == spec


def test_from_wire_accepts_raw_for_int_dtype() -> None:
    wire = _valid_wire() | {"dtype": "int64", "codec": "raw", "scale": 1}
    assert TensorSpec.from_wire(wire).scale == 1.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", ""),
        ("name", 7),
        ("name", "x" * 257),
        ("dtype", "complex64"),
        ("dtype", None),
        ("shape", "2,3"),
        ("shape", [2, -1]),
        ("shape", [2, 1.0]),
        ("shape", [True]),
        ("shape", [1] * 9),
        ("codec", "int4"),
        ("codec", 3),
        ("codec", "raw"),
        ("scale", -1.0),
        ("scale", float("nan")),
        ("scale", float("inf")),
        ("scale", "1.0"),
        ("scale", True),
    ],
)
def test_from_wire_rejects_bad_field(field: str, value: object) -> None:
    with pytest.raises(QuantizationError, match=f"field '{field}'"):
        TensorSpec.from_wire(_valid_wire() | {field: value})


def test_from_wire_rejects_float_codec_on_int_dtype() -> None:
    with pytest.raises(QuantizationError, match="field 'codec'"):
        TensorSpec.from_wire(_valid_wire() | {"dtype": "int32"})


@pytest.mark.parametrize(
    ("wire", "match"),
    [
        ([1, 2], "must be a dict"),
        ({k: v for k, v in _valid_wire().items() if k != "scale"}, "lacks field"),
        (_valid_wire() | {"extra": 1}, "unknown field"),
    ],
)
def test_from_wire_rejects_bad_structure(wire: object, match: str) -> None:
    with pytest.raises(QuantizationError, match=match):
        TensorSpec.from_wire(wire)


def test_decode_rejects_non_finite_payload() -> None:
    spec = TensorSpec("w", "float32", (1,), "fp16", 1.0)
    with pytest.raises(QuantizationError, match="NaN or Inf"):
        decode(spec, np.array([np.inf], dtype="<f2").tobytes())


def test_allowed_dtypes_cover_the_test_dtypes() -> None:
    names = {str(dtype).split(".")[1] for dtype in FLOAT_DTYPES + INT_DTYPES}
    assert names == set(ALLOWED_DTYPES)


def _outcome(call, spec: TensorSpec, data: bytes) -> str | None:
    """The message of the QuantizationError `call` raised, or None where it raised none."""
    try:
        call(spec, data)
    except QuantizationError as exc:
        return str(exc)
    return None


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from([*CODECS, "raw"]), data=st.data(),
       shape=st.lists(st.integers(0, 5), max_size=2).map(tuple),
       scale=st.sampled_from([1e-30, 1e-3, 1.0, 10.0, 1e4, 1e34, 1e300]))
def test_check_refuses_exactly_what_decode_refuses(codec, data, shape, scale) -> None:
    # a receiver checks each tensor at the door (check) and decodes only those it reads:
    # what it lets in must decode, with the same refusal where it must not
    dtypes = (["int64", "int16", "bool", "uint8"] if codec == "raw"
              else ["float32", "float64", "float16", "bfloat16"])
    spec = TensorSpec("w", data.draw(st.sampled_from(dtypes)), shape, codec,
                      1.0 if codec == "raw" else scale)
    low, high = payload_bounds(spec)
    size = data.draw(st.sampled_from([low, high, max(low - 1, 0), high + 1]))
    payload = data.draw(st.binary(min_size=size, max_size=size))
    if codec == "int8" and data.draw(st.booleans()):
        # a well-formed stream of random values, so that not every case is a zlib error
        values = torch.tensor(np.frombuffer(payload[:4 * (len(payload) // 4)] or b"\0" * 4,
                                            dtype="<f4").copy()).nan_to_num()
        payload = encode("w", values[:math.prod(shape)].reshape(shape)
                         if values.numel() >= math.prod(shape) else torch.zeros(shape),
                         "int8")[1]
    assert _outcome(check, spec, payload) == _outcome(decode, spec, payload)


def test_check_reads_an_int16_payloads_largest_code_for_overflow() -> None:
    # codes 32767 at Delta 10: 327,670, finite in float32, above float16's 65,504
    payload = np.array([1, -32767], dtype="<i2").tobytes()
    check(TensorSpec("w", "float32", (2,), "int16", 10.0), payload)
    with pytest.raises(QuantizationError, match="overflows its dtype float16"):
        check(TensorSpec("w", "float16", (2,), "int16", 10.0), payload)
    # at Delta 1e35 the value overflows float32 itself
    with pytest.raises(QuantizationError, match="decodes to NaN or Inf"):
        check(TensorSpec("w", "float32", (2,), "int16", 1e35), payload)


def test_a_scalar_bool_travels_raw() -> None:
    # a 0-d comparison is a numpy bool, not an array: decode must still build the tensor
    spec, payload = encode("flag", torch.tensor(True), "int16")
    assert spec.codec == "raw" and decode(spec, payload).item() is True


@pytest.mark.parametrize("codec, wire", [("fp16", "<f2"), ("fp32", "<f4")])
def test_a_float_payloads_largest_magnitude_is_read_from_its_bits(codec, wire) -> None:
    from quant.codecs import FLOAT_CODECS
    largest = FLOAT_CODECS[codec].largest

    def of(values):
        return largest((len(values),), 1.0, np.array(values, dtype=wire).tobytes())
    # the sign bit aside, magnitude orders as the integer of the bits: -3.5 beats 2
    assert of([-3.5, 2.0, -0.0]) == 3.5
    assert of([1.0, -np.inf, 2.0]) == math.inf
    assert math.isnan(of([np.inf, 1.0, -np.nan]))  # NaN's bits lie above Inf's
    assert of([]) == 0.0
    assert of([-65504.0]) == 65504.0


def test_int16s_largest_value_turns_infinite_exactly_where_float32_rounding_does() -> None:
    from quant.int16 import FLOAT32_OVERFLOW, Int16
    one = np.array([1], dtype="<i2").tobytes()
    below = float(np.nextafter(FLOAT32_OVERFLOW, 0.0))
    assert Int16().largest((1,), below, one) == float(np.finfo(np.float32).max)
    assert Int16().largest((1,), FLOAT32_OVERFLOW, one) == math.inf
    # and decode agrees, refusing without a warning (warnings are errors here)
    with pytest.raises(QuantizationError, match="NaN or Inf"):
        decode(TensorSpec("w", "float32", (1,), "int16", FLOAT32_OVERFLOW), one)
    assert decode(TensorSpec("w", "float32", (1,), "int16", below), one).item() == float(
        np.finfo(np.float32).max)
