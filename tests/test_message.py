"""Wire messages: round trips, and every header field wrong in turn is refused."""

import msgpack
import pytest
import torch

from node.errors import ProtocolError
from node.net.message import decode_message, encode_message, frame_bytes

CAP = 1 << 20


def valid_header(**changes):
    header = {"v": 1, "sender": 2, "round": 3, "kind": "model", "meta": {"samples": 10},
              "tensors": [{"name": "w", "dtype": "float32", "shape": [2], "codec": "fp32",
                           "scale": 1.0}]}
    header.update(changes)
    return header


def frames_for(header, data=b"\x00" * 8):
    return [msgpack.packb(header, use_bin_type=True), data]


def test_round_trip_with_every_codec_and_an_int_tensor():
    tensors = {"w": torch.randn(3, 4), "counts": torch.tensor([3, 0, 7])}
    for codec, tolerance in (("fp32", 0.0), ("fp16", 1e-2), ("int16", 1e-3)):
        frames = encode_message(4, 2, "prototypes", tensors, codec, {"samples": 12})
        message = decode_message(frames, max_bytes=CAP)
        assert (message.sender, message.round, message.kind) == (4, 2, "prototypes")
        assert message.meta == {"samples": 12}
        assert torch.allclose(message.tensors["w"], tensors["w"], atol=tolerance)
        assert torch.equal(message.tensors["counts"], tensors["counts"])


def test_a_meta_entry_may_be_a_list_of_integers_up_to_the_tensor_cap():
    from node.net.message import MAX_META_LIST
    frames = encode_message(4, 2, "model", {"w": torch.ones(2)}, "fp32",
                            {"samples": 3, "classes": [1, 0, 2]})
    assert decode_message(frames, max_bytes=CAP).meta == {"samples": 3, "classes": [1, 0, 2]}
    longest = encode_message(4, 2, "model", {"w": torch.ones(2)}, "fp32",
                             {"classes": [0] * MAX_META_LIST})
    assert len(decode_message(longest, max_bytes=CAP).meta["classes"]) == MAX_META_LIST
    with pytest.raises(ProtocolError):  # msgpack's own array cap, or ours
        decode_message(encode_message(4, 2, "model", {"w": torch.ones(2)}, "fp32",
                                      {"classes": [0] * (MAX_META_LIST + 1)}), max_bytes=CAP)


def test_int16_model_frames_are_half_of_fp32():
    tensors = {"w": torch.randn(1000)}
    fp32 = encode_message(0, 1, "model", tensors, "fp32")
    int16 = encode_message(0, 1, "model", tensors, "int16")
    assert len(int16[1]) * 2 == len(fp32[1]) == 4000
    assert frame_bytes(fp32) == sum(len(f) for f in fp32)


def test_control_message_has_only_a_header():
    frames = encode_message(1, 0, "hello")
    assert len(frames) == 1
    assert decode_message(frames, max_bytes=CAP).kind == "hello"


def test_valid_fixture_decodes():
    assert decode_message(frames_for(valid_header()), max_bytes=CAP).round == 3


@pytest.mark.parametrize("changes, needle", [
    ({"v": 2}, "version"),
    ({"v": "1"}, "version"),
    ({"sender": -1}, "sender"),
    ({"sender": "2"}, "sender"),
    ({"round": -5}, "round"),
    ({"round": 1.5}, "round"),
    ({"kind": "pickle"}, "kind"),
    ({"meta": {"samples": "ten"}}, "meta"),
    ({"meta": [1, 2]}, "meta"),
    ({"meta": {"classes": [1, "2"]}}, "meta"),
    ({"meta": {"classes": [1, 2.5]}}, "meta"),
    ({"meta": {"classes": [[1]]}}, "meta"),
    ({"meta": {"classes": [True, 1]}}, "meta"),
    ({"tensors": {"w": 1}}, "tensors"),
    ({"tensors": []}, "tensors"),
    ({"tensors": [{"name": "w", "dtype": "object", "shape": [2], "codec": "fp32", "scale": 1.0}]},
     "dtype"),
    ({"tensors": [{"name": "w", "dtype": "float32", "shape": [3], "codec": "fp32", "scale": 1.0}]},
     "bytes"),
    ({"tensors": [{"name": "w", "dtype": "float32", "shape": [-2], "codec": "fp32", "scale": 1}]},
     "shape"),
    ({"tensors": [{"name": "w", "dtype": "float32", "shape": [4], "codec": "zip", "scale": 1.0}]},
     "codec"),
    ({"tensors": [{"name": "w", "dtype": "float32", "shape": [4], "codec": "int16",
                   "scale": float("nan")}]}, "scale"),
    ({"tensors": [{"name": "", "dtype": "float32", "shape": [2], "codec": "fp32", "scale": 1.0}]},
     "name"),
])
def test_each_bad_field_is_refused(changes, needle):
    with pytest.raises(ProtocolError, match=needle):
        decode_message(frames_for(valid_header(**changes)), max_bytes=CAP)


def test_missing_and_extra_keys_are_refused():
    header = valid_header()
    del header["round"]
    with pytest.raises(ProtocolError, match="missing"):
        decode_message(frames_for(header), max_bytes=CAP)
    with pytest.raises(ProtocolError, match="unexpected"):
        decode_message(frames_for(valid_header(extra=1)), max_bytes=CAP)


@pytest.mark.parametrize("frames", [
    [],
    [b"\xc1garbage"],
    [msgpack.packb([1, 2, 3])],
    [msgpack.packb(valid_header())],  # a tensor announced, no frame
    [msgpack.packb(valid_header()), b"\x00" * 8, b"\x00" * 8],  # one frame too many
    [b"\x80\x01" + b"\x00" * 10],  # a pickle stream is not msgpack we accept
])
def test_malformed_frames_are_refused(frames):
    with pytest.raises(ProtocolError):
        decode_message(frames, max_bytes=CAP)


def test_duplicate_tensor_names_are_refused():
    spec = valid_header()["tensors"][0]
    header = valid_header(tensors=[spec, spec])
    with pytest.raises(ProtocolError, match="twice"):
        decode_message([msgpack.packb(header), b"\x00" * 8, b"\x00" * 8], max_bytes=CAP)


def test_size_cap():
    frames = encode_message(0, 1, "model", {"w": torch.zeros(1000)}, "fp32")
    with pytest.raises(ProtocolError, match="cap"):
        decode_message(frames, max_bytes=1000)
