"""The int8 codec: per-row scales, the Delta_r / 2 error bound, DEFLATE, hostile payloads."""

import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from node.errors import ProtocolError
from node.net.message import decode_message, encode_message
from quant.codecs import TensorSpec, decode, encode, expanded_size, payload_bounds
from quant.errors import QuantizationError
from quant.int8 import dequantize_rows, quantize_rows, raw_size, rows_of


def _payload(deltas: list[float], codes: list, level: int = 6) -> bytes:
    """A payload made by hand: float64 scales then int8 codes, deflated."""
    raw = np.array(deltas, dtype="<f8").tobytes() + np.array(codes, dtype=np.int8).tobytes()
    return zlib.compress(raw, level)


def test_hand_computed_rows() -> None:
    x = np.array([[1.0, -0.5, 0.25], [0.0, 0.0, 0.0], [-254.0, 127.0, 1.5]])
    codes, deltas = quantize_rows(x)
    assert deltas.tolist() == [1.0 / 127, 1.0, 2.0]
    # row 0: 127, -63.5 -> floor(-63.0), 31.75 -> floor(32.25); row 2: -127, 63.5 -> 64, 0.75 -> 1
    assert codes.tolist() == [[127, -63, 32], [0, 0, 0], [-127, 64, 1]]
    expected = np.array([[1.0, -63 / 127, 32 / 127], [0, 0, 0], [-254.0, 128.0, 2.0]])
    assert np.array_equal(dequantize_rows(codes, deltas), expected.astype(np.float32))


def test_vectors_and_scalars_are_one_row() -> None:
    assert [rows_of(s) for s in [(), (5,), (4, 3), (8, 2, 3, 3)]] == [1, 1, 4, 8]
    codes, deltas = quantize_rows(np.array([2.0, -1.0]))
    # -1 / Delta = -63.5 -> floor(-63.0)
    assert deltas.tolist() == [2.0 / 127] and codes.tolist() == [127, -63]


def test_encode_carries_one_scale_per_output_channel() -> None:
    weight = torch.tensor([[0.2, -0.3], [30.0, 10.0]])
    spec, data = encode("fc.weight", weight, "int8")
    assert (spec.codec, spec.scale) == ("int8", 1.0)
    raw = zlib.decompress(data)
    assert len(raw) == raw_size((2, 2)) == 2 * 8 + 4
    assert np.frombuffer(raw[:16], "<f8").tolist() == [
        float(np.float32(0.3)) / 127, 30.0 / 127]
    # 0.2 / Delta_0 = 84.67 -> floor(85.17); 10 / Delta_1 = 42.33 -> floor(42.83)
    assert np.frombuffer(raw[16:], np.int8).tolist() == [85, -127, 127, 42]


@settings(max_examples=200, deadline=None)
@given(arrays(np.float32, st.tuples(st.integers(1, 6), st.integers(1, 40)),
              elements=st.floats(-1e6, 1e6, width=32)))
def test_error_is_at_most_half_the_row_delta(x: np.ndarray) -> None:
    spec, data = encode("w", torch.from_numpy(x.copy()), "int8")
    decoded = decode(spec, data).double().numpy()
    peaks = np.abs(x.astype(np.float64)).max(axis=1)
    deltas = np.where(peaks > 0, peaks / 127, 1.0)
    error = np.abs(decoded - x.astype(np.float64)).max(axis=1)
    # + the float32 rounding of the decoded value (relative 2**-24 of at most the peak)
    assert np.all(error <= deltas / 2 + peaks * 2.0**-23)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_dtype_and_shape_survive(dtype) -> None:
    x = torch.linspace(-3, 3, 24, dtype=dtype).reshape(2, 3, 4)
    decoded = decode(*encode("w", x, "int8"))
    assert decoded.dtype == dtype and decoded.shape == x.shape
    torch.testing.assert_close(decoded.float(), x.float(), rtol=0, atol=3 / 127 / 2 + 0.02)


def test_a_subnormal_peak_keeps_codes_in_range() -> None:
    codes, deltas = quantize_rows(np.array([1e-310, -3e-310, 5e-320]))
    assert 0 < deltas[0] < 1e-300 and codes.tolist()[1] == -127
    assert np.all(np.abs(codes.astype(np.int32)) <= 127)


def test_model_weights_shrink_below_a_quarter_of_fp32() -> None:
    weights = torch.randn(128, 784, generator=torch.Generator().manual_seed(0)) * 0.05
    _, data = encode("embed.weight", weights, "int8")
    assert len(data) < weights.numel()  # under one byte per weight after DEFLATE


def test_bounds_follow_the_shape() -> None:
    spec = TensorSpec("w", "float32", (4, 5), "int8", 1.0)
    assert expanded_size(spec) == 4 * 8 + 20
    low, high = payload_bounds(spec)
    assert low == 1 and high >= expanded_size(spec) + 5


@pytest.mark.parametrize(("payload", "match"), [
    (b"not zlib at all", "not a valid zlib stream"),
    (_payload([1.0, 1.0], [1, 2, 3]), "inflates to other than the 20 bytes"),
    (_payload([1.0, 1.0], [1, 2, 3, 4, 5]), "inflates to other than"),
    (_payload([1.0, 1.0], [1, 2, 3, 4]) + b"\x00", "inflates to other than"),
    (_payload([1.0, 1.0], [1, 2, 3, 4])[:-3], "inflates to other than"),
    (_payload([1.0, float("nan")], [1, 2, 3, 4]), "finite and positive"),
    (_payload([1.0, -2.0], [1, 2, 3, 4]), "finite and positive"),
    (_payload([0.0, 1.0], [1, 2, 3, 4]), "finite and positive"),
    (_payload([1e308, 1.0], [127, 2, 3, 4]), "NaN or Inf"),
])
def test_malformed_payloads_are_refused(payload: bytes, match: str) -> None:
    spec = TensorSpec("w", "float32", (2, 2), "int8", 1.0)
    with pytest.raises(QuantizationError, match=match):
        decode(spec, payload)


def test_minus_128_from_a_peer_decodes_within_its_row() -> None:
    """Our encoder never writes -128, but the code is valid int8 and stays bounded."""
    spec = TensorSpec("w", "float32", (2,), "int8", 1.0)
    assert decode(spec, _payload([0.5], [-128, 127])).tolist() == [-64.0, 63.5]


def test_a_deflate_bomb_is_refused_before_it_is_inflated() -> None:
    """A tiny frame that claims a huge tensor is refused by the message cap."""
    claimed = (4096, 4096)  # 16 MiB of codes from ~16 kB of zeros
    bomb = zlib.compress(b"\x00" * raw_size(claimed), 9)
    header = {"name": "w", "dtype": "float32", "shape": list(claimed), "codec": "int8",
              "scale": 1.0}
    import msgpack
    frames = [msgpack.packb({"v": 1, "sender": 1, "round": 0, "kind": "model", "meta": {},
                             "tensors": [header]}), bomb]
    assert len(bomb) < 1 << 20
    with pytest.raises(ProtocolError, match="expands beyond the cap of 1048576"):
        decode_message(frames, max_bytes=1 << 20)


def test_messages_round_trip_through_int8() -> None:
    tensors = {"a.weight": torch.randn(3, 4), "a.bias": torch.randn(3),
               "steps": torch.tensor([7])}
    frames = encode_message(2, 5, "model", tensors, codec="int8")
    message = decode_message(frames, max_bytes=1 << 20)
    assert message.tensors["steps"].tolist() == [7]
    for name in ("a.weight", "a.bias"):
        torch.testing.assert_close(message.tensors[name], tensors[name], rtol=0, atol=0.03)
