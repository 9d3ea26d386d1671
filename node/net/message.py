"""Wire messages: a msgpack header plus one raw frame per tensor, validated on the way in.

Frame 0 is the header ``{"v", "sender", "round", "kind", "meta", "tensors"}`` where every
tensor spec names its dtype, shape, codec and scale; frames 1..n carry the tensor bytes in
spec order. Nothing received is ever unpickled: only msgpack and fixed-size numeric buffers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import msgpack
import torch

from node.errors import ProtocolError
from node.net.kinds import KINDS
from quant.codecs import TensorSpec, check, decode, encode, expanded_size
from quant.errors import QuantizationError

PROTOCOL_VERSION = 1
HEADER_KEYS = frozenset({"v", "sender", "round", "kind", "meta", "tensors"})
MAX_HEADER_BYTES = 1024 * 1024
MAX_TENSORS = 4096
MAX_META_ENTRIES = 64
# A meta entry is an integer or a list of them (a model's class counts), at most this long.
MAX_META_LIST = MAX_TENSORS
MetaValue = int | list[int]


class WireTensors(Mapping[str, torch.Tensor]):
    """A received message's tensors kept in their wire form until read: each lookup decodes
    a new tensor. A node holds a round's messages from every in-neighbour while it waits,
    and int16 on the wire is half of float32 in memory."""

    __slots__ = ("_frames", "_specs")

    def __init__(self, specs: dict[str, TensorSpec],
                 frames: dict[str, bytes | memoryview]) -> None:
        self._specs, self._frames = specs, frames

    def __getitem__(self, name: str) -> torch.Tensor:
        return decode(self._specs[name], self._frames[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)


@dataclass(frozen=True)
class Message:
    """One checked message from a peer; its tensors decode when read."""

    sender: int
    round: int
    kind: str
    tensors: Mapping[str, torch.Tensor] = field(default_factory=dict)
    meta: dict[str, MetaValue] = field(default_factory=dict)


def encode_message(sender: int, round_: int, kind: str,
                   tensors: Mapping[str, torch.Tensor] | None = None, codec: str = "fp32",
                   meta: Mapping[str, MetaValue] | None = None) -> list[bytes]:
    """Frames for one message: the msgpack header, then each tensor through `codec`."""
    specs, payload = [], []
    for name, tensor in (tensors or {}).items():
        spec, data = encode(name, tensor, codec)
        specs.append(spec.to_wire())
        payload.append(data)
    header = {"v": PROTOCOL_VERSION, "sender": sender, "round": round_, "kind": kind,
              "meta": dict(meta or {}), "tensors": specs}
    return [msgpack.packb(header, use_bin_type=True), *payload]


def decode_message(frames: Sequence[bytes] | Sequence[memoryview], *, max_bytes: int) -> Message:
    """Parse and check every field of a received message; raise ProtocolError on any fault."""
    if not frames:
        raise ProtocolError("empty message")
    total = sum(len(frame) for frame in frames)
    if total > max_bytes:
        raise ProtocolError(f"message of {total} bytes exceeds the cap of {max_bytes}")
    header = _unpack_header(frames[0])
    sender = _int_field(header, "sender", 0)
    round_ = _int_field(header, "round", 0)
    kind = header["kind"]
    if kind not in KINDS:
        raise ProtocolError(f"unknown kind {kind!r}")
    meta = header["meta"]
    if not isinstance(meta, dict) or len(meta) > MAX_META_ENTRIES or not all(
            isinstance(k, str) and _meta_value(v) for k, v in meta.items()):
        raise ProtocolError("meta must be a small map of names to integers or lists of "
                            f"at most {MAX_META_LIST} integers")
    raw_specs = header["tensors"]
    if not isinstance(raw_specs, list) or len(raw_specs) > MAX_TENSORS:
        raise ProtocolError("tensors must be a list of specs")
    if len(raw_specs) != len(frames) - 1:
        raise ProtocolError(f"header lists {len(raw_specs)} tensors but {len(frames) - 1} "
                            "data frames arrived")
    specs: dict[str, TensorSpec] = {}
    kept: dict[str, bytes | memoryview] = {}
    expanded = 0
    for raw_spec, data in zip(raw_specs, frames[1:]):
        try:
            spec = TensorSpec.from_wire(raw_spec)
            # a compressed frame must not stand for more than the cap allows on the wire
            expanded += expanded_size(spec)
            if expanded > max_bytes:
                raise ProtocolError(f"tensor {spec.name!r}: the message expands beyond the "
                                    f"cap of {max_bytes} bytes")
            if spec.name in specs:
                raise ProtocolError(f"tensor {spec.name!r} appears twice")
            check(spec, data)  # what decoding it later would refuse, refused now
            specs[spec.name], kept[spec.name] = spec, data
        except QuantizationError as exc:
            raise ProtocolError(f"bad tensor spec: {exc}") from None
        except (ValueError, TypeError, OverflowError, MemoryError) as exc:
            # a spec the checks above let through but numpy or torch cannot lay out
            raise ProtocolError(f"tensor cannot be decoded: {exc}") from None
    return Message(sender=sender, round=round_, kind=kind, tensors=WireTensors(specs, kept),
                   meta=dict(meta))


def _unpack_header(frame: bytes) -> dict:
    if len(frame) > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {len(frame)} bytes exceeds {MAX_HEADER_BYTES}")
    try:
        header = msgpack.unpackb(frame, raw=False, strict_map_key=True,
                                 max_str_len=4096, max_bin_len=0, max_array_len=MAX_TENSORS,
                                 max_map_len=MAX_TENSORS, max_ext_len=0)
    except Exception as exc:  # noqa: BLE001 - msgpack raises many unrelated types on garbage
        raise ProtocolError(f"header is not valid msgpack: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a map")
    if set(header) != HEADER_KEYS:
        missing = sorted(HEADER_KEYS - set(header))
        extra = sorted(set(header) - HEADER_KEYS, key=str)
        raise ProtocolError(f"header keys wrong (missing {missing}, unexpected {extra})")
    if header["v"] != PROTOCOL_VERSION or type(header["v"]) is not int:
        raise ProtocolError(f"protocol version {header['v']!r}, expected {PROTOCOL_VERSION}")
    return header


def _meta_value(value: object) -> bool:
    """Whether `value` may stand in a message's meta: an integer or a short list of them."""
    if type(value) is int:
        return True
    return (type(value) is list and len(value) <= MAX_META_LIST
            and all(type(v) is int for v in value))


def _int_field(header: dict, key: str, minimum: int) -> int:
    value = header[key]
    if type(value) is not int or value < minimum:
        raise ProtocolError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def frame_bytes(frames: Sequence[bytes] | Sequence[memoryview]) -> int:
    """Bytes of a message as handed to (or received from) ZeroMQ: the sum of its frames."""
    return sum(len(frame) for frame in frames)
