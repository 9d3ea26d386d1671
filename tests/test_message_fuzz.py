"""Property-based fuzzing of the wire decoder: any bytes a peer sends either decode into a
checked message or raise ProtocolError; nothing else escapes."""

import msgpack
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.errors import ProtocolError
from node.net.message import decode_message, encode_message

MAX_BYTES = 1 << 20
FUZZ = settings(max_examples=250, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def decodes_or_refuses(frames):
    try:
        message = decode_message(frames, max_bytes=MAX_BYTES)
    except ProtocolError:
        return None
    for tensor in message.tensors.values():
        if tensor.is_floating_point():
            assert bool(torch.isfinite(tensor).all())
    return message


@FUZZ
@given(st.lists(st.binary(max_size=256), min_size=0, max_size=4))
def test_random_frames(frames):
    decodes_or_refuses(frames)


wire_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**64 - 1)
    | st.floats() | st.text(max_size=12) | st.binary(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)

dims = st.one_of(st.integers(min_value=-2, max_value=4), st.sampled_from(
    [2**31 - 1, 2**31, 2**32, 2**62, 2**63, 2**64 - 1]))
specs = st.fixed_dictionaries({
    "name": st.one_of(st.text(min_size=0, max_size=6), wire_values),
    "dtype": st.sampled_from(["float32", "float16", "int64", "bool", "uint8", "complex64", "x"]),
    "shape": st.one_of(st.lists(dims, max_size=4), wire_values),
    "codec": st.sampled_from(["int16", "fp16", "fp32", "raw", "zip"]),
    "scale": st.one_of(st.floats(), st.integers(min_value=-5, max_value=2**64 - 1), wire_values)})


@FUZZ
@given(sender=st.one_of(st.integers(min_value=-3, max_value=2**64 - 1), wire_values),
       round_=st.one_of(st.integers(min_value=-3, max_value=2**64 - 1), wire_values),
       kind=st.one_of(st.sampled_from(["model", "prototypes", "hello", "ack", "bye", "x"]),
                      wire_values),
       meta=st.one_of(st.dictionaries(st.text(max_size=6), st.integers(min_value=-2**63, max_value=2**64 - 1), max_size=3),
                      wire_values),
       tensor_specs=st.lists(specs, max_size=3),
       payloads=st.lists(st.binary(max_size=64), max_size=3))
def test_structured_headers_with_hostile_fields(sender, round_, kind, meta, tensor_specs,
                                                payloads):
    header = {"v": 1, "sender": sender, "round": round_, "kind": kind, "meta": meta,
              "tensors": tensor_specs}
    frames = [msgpack.packb(header, use_bin_type=True), *payloads]
    decodes_or_refuses(frames)


@FUZZ
@given(st.data())
def test_mutations_of_a_valid_message(data):
    frames = encode_message(1, 2, "prototypes", {
        "prototypes": torch.randn(3, 4), "classes": torch.tensor([0, 2, 5]),
        "counts": torch.tensor([4, 1, 9])}, codec="int16")
    index = data.draw(st.integers(min_value=0, max_value=len(frames) - 1))
    frame = bytearray(frames[index])
    for _ in range(data.draw(st.integers(min_value=1, max_value=8))):
        if not frame:
            break
        position = data.draw(st.integers(min_value=0, max_value=len(frame) - 1))
        frame[position] = data.draw(st.integers(min_value=0, max_value=255))
    frames[index] = bytes(frame)
    decodes_or_refuses(frames)


def test_the_zero_element_shape_overflow_is_refused():
    """A spec of shape [0, 2**63] has no bytes but numpy cannot lay it out."""
    header = {"v": 1, "sender": 1, "round": 1, "kind": "model", "meta": {},
              "tensors": [{"name": "w", "dtype": "float32", "shape": [0, 2**63],
                           "codec": "fp32", "scale": 1.0}]}
    try:
        decode_message([msgpack.packb(header), b""], max_bytes=MAX_BYTES)
    except ProtocolError as exc:
        assert "shape" in str(exc)
    else:
        raise AssertionError("the overflowing shape was accepted")
