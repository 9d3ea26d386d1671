"""Encode tensors to little-endian bytes and back: int16 (ProFe section III-D), int8 per
channel with DEFLATE (quant/int8.py), fp16, fp32, raw.

Floating tensors use the configured codec. Non-floating tensors (int counts, bool masks) are
never quantized: whatever codec was asked, they travel raw in their own dtype and the spec
records codec "raw". Decoding always restores the original dtype and shape.
"""

import logging
import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from quant.arrays import peak
from quant.errors import QuantizationError
from quant.floats import FP16, FP32
from quant.int8 import Int8
from quant.int16 import Int16
from quant.names import CODECS, RAW, WIRE_CODECS

logger = logging.getLogger(__name__)


class FloatCodec(Protocol):
    """How floating tensors travel: one module per codec (quant/int16.py, int8.py, ...)."""

    name: str

    def encode(self, name: str, tensor: torch.Tensor, peak: float) -> tuple[bytes, float]:
        """The payload and scale of a finite CPU tensor whose max |x| is `peak`."""

    def decode(self, shape: tuple[int, ...], scale: float,
               data: bytes | memoryview) -> tuple[np.ndarray, bool]:
        """float32 values of a payload of the right size, and whether all are known finite."""

    def largest(self, shape: tuple[int, ...], scale: float, data: bytes | memoryview) -> float:
        """max |x| of the float32 values a payload of the right size decodes to (NaN or Inf
        where any is not finite), without decoding it where the codec allows."""

    def payload_bounds(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """Smallest and largest byte length of a payload for `shape`."""

    def expanded_size(self, shape: tuple[int, ...]) -> int:
        """Bytes the payload stands for once any compression is undone."""


# Each codec of quant.names.CODECS; a new codec is a module with a class like these, its name
# there and a line here.
FLOAT_CODECS: dict[str, FloatCodec] = {codec.name: codec
                                       for codec in (Int16(), Int8(), FP16, FP32)}

MAX_RANK = 8
MAX_NAME_LEN = 256
MAX_ELEMENTS = 2**31 - 1  # per tensor; far above any model here, far below numpy's limits

_FLOAT_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
# Wire layout of the non-floating dtypes; bool travels as one byte 0/1.
_RAW_DTYPES = {
    "int64": (torch.int64, "<i8"),
    "int32": (torch.int32, "<i4"),
    "int16": (torch.int16, "<i2"),
    "int8": (torch.int8, "<i1"),
    "uint8": (torch.uint8, "<u1"),
    "bool": (torch.bool, "<u1"),
}
ALLOWED_DTYPES = frozenset(_FLOAT_DTYPES) | frozenset(_RAW_DTYPES)
"""Original torch dtypes (without the "torch." prefix) a tensor may have to be exchanged."""

_WIRE_KEYS = ("name", "dtype", "shape", "codec", "scale")


@dataclass(frozen=True)
class TensorSpec:
    """What a receiver needs to rebuild one tensor from its bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    codec: str
    scale: float

    def to_wire(self) -> dict:
        """Plain msgpack-able dict of this spec."""
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "codec": self.codec,
            "scale": float(self.scale),
        }

    @classmethod
    def from_wire(cls, d: object) -> "TensorSpec":
        """Rebuild a spec from untrusted wire data, raising QuantizationError on any bad field."""
        if not isinstance(d, dict):
            raise QuantizationError(f"tensor spec must be a dict, got {type(d).__name__}")
        missing = [key for key in _WIRE_KEYS if key not in d]
        if missing:
            raise QuantizationError(f"tensor spec lacks field(s) {missing}")
        extra = sorted(str(key) for key in d if key not in _WIRE_KEYS)
        if extra:
            raise QuantizationError(f"tensor spec has unknown field(s) {extra}")
        name = _check_name(d["name"])
        dtype = _check_dtype(d["dtype"])
        shape = _check_shape(d["shape"])
        codec = _check_codec(d["codec"], dtype)
        scale = _check_scale(d["scale"])
        return cls(name=name, dtype=dtype, shape=shape, codec=codec, scale=scale)


def _field_error(field: str, problem: str) -> QuantizationError:
    """An error naming the spec field at fault."""
    return QuantizationError(f"tensor spec field {field!r}: {problem}")


def _check_name(name: object) -> str:
    """A non-empty str of at most MAX_NAME_LEN characters."""
    if not isinstance(name, str):
        raise _field_error("name", f"must be a str, got {type(name).__name__}")
    if not 0 < len(name) <= MAX_NAME_LEN:
        raise _field_error("name", f"length must be 1..{MAX_NAME_LEN}, got {len(name)}")
    return name


def _check_dtype(dtype: object) -> str:
    """One of ALLOWED_DTYPES."""
    if not isinstance(dtype, str) or dtype not in ALLOWED_DTYPES:
        raise _field_error("dtype", f"{dtype!r} is not one of {sorted(ALLOWED_DTYPES)}")
    return dtype


def _check_shape(shape: object) -> tuple[int, ...]:
    """At most MAX_RANK non-negative ints, each and their product at most MAX_ELEMENTS.

    Each dimension is bounded on its own too: [0, 2**63] has no elements but cannot be
    laid out by numpy.
    """
    if not isinstance(shape, list | tuple):
        raise _field_error("shape", f"must be a list, got {type(shape).__name__}")
    if len(shape) > MAX_RANK:
        raise _field_error("shape", f"rank {len(shape)} exceeds the maximum {MAX_RANK}")
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim <= MAX_ELEMENTS:
            raise _field_error("shape", f"dimensions must be ints in 0..{MAX_ELEMENTS}, "
                                        f"got {dim!r}")
    if math.prod(shape) > MAX_ELEMENTS:
        raise _field_error("shape", f"{list(shape)} has more than {MAX_ELEMENTS} elements")
    return tuple(shape)


def _check_codec(codec: object, dtype: str) -> str:
    """A wire codec consistent with the dtype: "raw" exactly for non-floating dtypes."""
    if not isinstance(codec, str) or codec not in WIRE_CODECS:
        raise _field_error("codec", f"{codec!r} is not one of {list(WIRE_CODECS)}")
    if (codec == RAW) != (dtype in _RAW_DTYPES):
        raise _field_error("codec", f"{codec!r} cannot carry dtype {dtype!r}")
    return codec


def _check_scale(scale: object) -> float:
    """A finite, non-negative number."""
    if isinstance(scale, bool) or not isinstance(scale, int | float):
        raise _field_error("scale", f"must be a number, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale < 0:
        raise _field_error("scale", f"must be finite and non-negative, got {scale!r}")
    return float(scale)


def _check_user_codec(codec: str) -> None:
    """Reject a codec a user may not configure."""
    if codec not in CODECS:
        raise QuantizationError(f"unknown codec {codec!r}; valid codecs are {list(CODECS)}")


def _dtype_name(tensor: torch.Tensor, name: str) -> str:
    """The tensor's dtype as named in ALLOWED_DTYPES."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in ALLOWED_DTYPES:
        raise QuantizationError(
            f"tensor {name!r} has dtype {dtype}, not one of {sorted(ALLOWED_DTYPES)}"
        )
    return dtype


def encode(name: str, tensor: torch.Tensor, codec: str) -> tuple[TensorSpec, bytes]:
    """Spec and little-endian payload of one tensor; non-floating tensors travel raw."""
    _check_user_codec(codec)
    _check_name(name)
    dtype = _dtype_name(tensor, name)
    shape = _check_shape(tuple(tensor.shape))
    values = tensor.detach().cpu()
    if dtype in _RAW_DTYPES:
        logger.debug("tensor %r has dtype %s: sent raw instead of %s", name, dtype, codec)
        payload = values.numpy().astype(_RAW_DTYPES[dtype][1]).tobytes()
        return TensorSpec(name, dtype, shape, RAW, 1.0), payload
    largest = peak(values)  # one pass: NaN or Inf anywhere makes it non-finite
    if not math.isfinite(largest):
        raise QuantizationError(f"tensor {name!r} contains NaN or Inf and cannot be encoded")
    payload, scale = FLOAT_CODECS[codec].encode(name, values, largest)
    return TensorSpec(name, dtype, shape, codec, scale), payload


def _raw_wire(spec: TensorSpec) -> np.dtype:
    """The numpy dtype a raw payload is laid out in."""
    return np.dtype(_RAW_DTYPES[spec.dtype][1])


def expanded_size(spec: TensorSpec) -> int:
    """Bytes the payload of `spec` stands for once any compression is undone."""
    if spec.codec == RAW:
        return math.prod(spec.shape) * _raw_wire(spec).itemsize
    return FLOAT_CODECS[spec.codec].expanded_size(spec.shape)


def payload_bounds(spec: TensorSpec) -> tuple[int, int]:
    """Smallest and largest byte length the payload of `spec` may have."""
    if spec.codec == RAW:
        exact = expanded_size(spec)
        return exact, exact
    return FLOAT_CODECS[spec.codec].payload_bounds(spec.shape)


def _check_size(spec: TensorSpec, data: bytes | memoryview) -> None:
    low, high = payload_bounds(spec)
    size = memoryview(data).nbytes  # len() of a typed memoryview counts items, not bytes
    if not low <= size <= high:
        needs = f"{low}" if low == high else f"{low}..{high}"
        raise QuantizationError(
            f"tensor {spec.name!r}: payload has {size} bytes, spec needs {needs}"
        )


def check(spec: TensorSpec, data: bytes | memoryview) -> None:
    """Raise the QuantizationError `decode(spec, data)` would raise, and nothing where it
    would not, without building the tensor where the codec allows (a receiver checks
    every message at the door but reads only the models it aggregates)."""
    _check_size(spec, data)
    if spec.codec != RAW:
        _check_peak(spec, FLOAT_CODECS[spec.codec].largest(spec.shape, spec.scale, data))


def decode(spec: TensorSpec, data: bytes | memoryview) -> torch.Tensor:
    """A new tensor with `spec`'s dtype and shape rebuilt from its payload."""
    _check_size(spec, data)
    if spec.codec == RAW:
        wire = np.frombuffer(data, dtype=_raw_wire(spec)).reshape(spec.shape)
        torch_dtype, _ = _RAW_DTYPES[spec.dtype]
        # astype to native order copies, so the tensor never shares the caller's buffer
        native = (
            np.asarray(wire != 0) if torch_dtype is torch.bool  # 0-d: a numpy bool, not an array
            else wire.astype(wire.dtype.newbyteorder("="))
        )
        return torch.from_numpy(native).to(torch_dtype)
    floats, finite = FLOAT_CODECS[spec.codec].decode(spec.shape, spec.scale, data)
    return _checked_float(spec, floats, finite)


def _check_peak(spec: TensorSpec, largest: float) -> None:
    """_checked_float's two refusals read from the values' max |x| alone: casting is
    monotonic, so the largest value overflows `spec`'s dtype exactly when any does."""
    if not math.isfinite(largest):
        raise QuantizationError(f"tensor {spec.name!r} decodes to NaN or Inf")
    cast = torch.tensor(largest, dtype=torch.float32).to(_FLOAT_DTYPES[spec.dtype])
    if not math.isfinite(float(cast)):
        raise QuantizationError(f"tensor {spec.name!r} overflows its dtype {spec.dtype}")


def _checked_float(spec: TensorSpec, floats: np.ndarray, finite: bool = False) -> torch.Tensor:
    """The tensor of decoded float32 values in `spec`'s dtype, refused if any is not finite."""
    if not finite and not math.isfinite(peak(floats)):
        raise QuantizationError(f"tensor {spec.name!r} decodes to NaN or Inf")
    tensor = torch.from_numpy(floats).to(_FLOAT_DTYPES[spec.dtype])
    if tensor.dtype != torch.float32 and not math.isfinite(peak(tensor)):
        raise QuantizationError(f"tensor {spec.name!r} overflows its dtype {spec.dtype}")
    return tensor
