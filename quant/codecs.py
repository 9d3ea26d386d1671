"""Encode tensors to little-endian bytes and back: int16 (ProFe section III-D), int8 per
channel with DEFLATE (quant/int8.py), fp16, fp32, raw.

Floating tensors use the configured codec. Non-floating tensors (int counts, bool masks) are
never quantized: whatever codec was asked, they travel raw in their own dtype and the spec
records codec "raw". Decoding always restores the original dtype and shape.
"""

import logging
import math
import sys
from dataclasses import dataclass

import numpy as np
import torch

from node.errors import QuantizationError
from quant.int8 import max_payload_size as int8_max_payload_size
from quant.int8 import pack as pack_int8
from quant.int8 import raw_size as int8_raw_size
from quant.int8 import unpack as unpack_int8

logger = logging.getLogger(__name__)

CODECS = ("int16", "int8", "fp16", "fp32")
"""Codecs a user may configure."""

RAW = "raw"
WIRE_CODECS = (*CODECS, RAW)
"""Codecs a received spec may carry; "raw" is chosen automatically for non-floating tensors."""

INT16_MAX = 32767
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

_CODEC_WIRE = {"int16": "<i2", "fp16": "<f2", "fp32": "<f4"}
_CODEC_TORCH = {"fp16": torch.float16, "fp32": torch.float32}
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


# Elements per block in the int16 paths: their float64 temporaries stay in the CPU cache,
# so a large tensor costs a few passes over memory rather than one per operation.
BLOCK = 1 << 15
_LITTLE_ENDIAN = sys.byteorder == "little"
SUBNORMAL_DELTA = 1e-300  # above float64's smallest normal (2.2e-308), with room to spare


def _peak(values: torch.Tensor | np.ndarray) -> float:
    """max |x| in one pass without temporaries; NaN or Inf when `values` holds any."""
    if values.size == 0 if isinstance(values, np.ndarray) else values.numel() == 0:
        return 0.0
    if isinstance(values, np.ndarray):
        low, high = float(np.min(values)), float(np.max(values))
    else:
        low, high = (float(v) for v in torch.aminmax(values))
    if math.isnan(low) or math.isnan(high):
        return math.nan
    return max(-low, high)


def _blocks(size: int) -> range:
    return range(0, size, BLOCK)


def quantize_int16(x: np.ndarray, peak: float | None = None) -> tuple[np.ndarray, float]:
    """ProFe III-D: codes floor(x/Delta + 0.5) as little-endian int16, Delta = max|x| / 32767.

    An all-zero (or empty) array gets Delta = 1.0, so its codes and decoded values are exact
    zeros. The arithmetic is float64, block by block; `peak` is max|x| when already known.
    """
    values = np.asarray(x)
    if values.dtype.kind != "f" or values.dtype.itemsize < 4:
        values = values.astype(np.float64)
    peak = _peak(values) if peak is None else peak
    if not math.isfinite(peak):
        raise QuantizationError("cannot quantize an array containing NaN or Inf")
    delta = peak / INT16_MAX if peak > 0 else 1.0
    if delta == 0.0:
        # peak is a float64 subnormal whose quotient underflows; any tiny step keeps the bound
        delta = float(np.finfo(np.float64).tiny)
    # With a normal Delta, |x| <= peak keeps every code within +-32767 already (peak/Delta
    # is 32767 up to one rounding); only a subnormal Delta needs the clip.
    clip = delta < SUBNORMAL_DELTA
    flat = values.reshape(-1)
    codes = np.empty(flat.size, dtype="<i2")
    work = np.empty(min(BLOCK, flat.size), dtype=np.float64)
    for start in _blocks(flat.size):
        block = work[:len(flat[start:start + BLOCK])]
        block[...] = flat[start:start + BLOCK]  # exact: every float32 is a float64
        np.divide(block, delta, out=block)
        block += 0.5
        np.floor(block, out=block)
        if clip:
            np.clip(block, -INT16_MAX, INT16_MAX, out=block)
        codes[start:start + len(block)] = block
    return codes.reshape(values.shape), delta


def dequantize_int16(codes: np.ndarray, delta: float) -> np.ndarray:
    """Inverse of quantize_int16: codes * Delta (in float64) as float32."""
    wire = np.asarray(codes)
    flat = wire.reshape(-1)
    out = np.empty(flat.size, dtype=np.float32)
    work = np.empty(min(BLOCK, flat.size), dtype=np.float64)
    for start in _blocks(flat.size):
        block = work[:len(flat[start:start + BLOCK])]
        block[...] = flat[start:start + BLOCK]
        block *= delta
        out[start:start + len(block)] = block  # rounds to nearest, as astype does
    return out.reshape(wire.shape)


def _to_float32(wire: np.ndarray) -> np.ndarray:
    """A new float32 copy of fp16 or fp32 wire values (exact: every float16 is a float32).

    numpy allocates the result (its large arrays get huge pages, so fewer page faults) and
    torch converts into it (vectorised, where numpy's float16 conversion is not).
    """
    out = np.empty(wire.shape, dtype=np.float32)
    if wire.dtype == np.dtype("<f2") and _LITTLE_ENDIAN:
        # np.array(copy) makes the read-only wire buffer a writable array torch may view
        torch.from_numpy(out).copy_(torch.from_numpy(np.array(wire)))
    else:
        out[...] = wire
    return out


def _native_bytes(array: np.ndarray, wire: str) -> bytes:
    """The array's bytes in the little-endian wire layout."""
    if _LITTLE_ENDIAN and array.dtype == np.dtype(wire):
        return array.tobytes()
    return array.astype(wire).tobytes()


def _encode_float(name: str, tensor: torch.Tensor, codec: str, peak: float) -> tuple[bytes, float]:
    """Payload and scale of a finite floating tensor under a user codec."""
    if codec == "int8":
        return pack_int8(tensor.to(torch.float64).numpy()), 1.0
    if codec == "int16":
        exact = tensor if tensor.dtype in (torch.float32, torch.float64) else tensor.float()
        codes, delta = quantize_int16(exact.numpy(), peak)
        return codes.tobytes(), delta
    cast = tensor.to(_CODEC_TORCH[codec])
    if not math.isfinite(_peak(cast)):
        raise QuantizationError(
            f"tensor {name!r} overflows {codec}; use codec 'int16' or 'fp32' instead"
        )
    return _native_bytes(cast.numpy(), _CODEC_WIRE[codec]), 1.0


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
    peak = _peak(values)  # one pass: NaN or Inf anywhere makes it non-finite
    if not math.isfinite(peak):
        raise QuantizationError(f"tensor {name!r} contains NaN or Inf and cannot be encoded")
    payload, scale = _encode_float(name, values, codec, peak)
    return TensorSpec(name, dtype, shape, codec, scale), payload


def _wire_dtype(spec: TensorSpec) -> np.dtype:
    """The numpy dtype the payload of `spec` is laid out in."""
    if spec.codec == RAW and spec.dtype in _RAW_DTYPES:
        return np.dtype(_RAW_DTYPES[spec.dtype][1])
    if spec.codec in _CODEC_WIRE and spec.dtype in _FLOAT_DTYPES:
        return np.dtype(_CODEC_WIRE[spec.codec])
    raise QuantizationError(
        f"tensor {spec.name!r}: codec {spec.codec!r} cannot carry dtype {spec.dtype!r}"
    )


def expanded_size(spec: TensorSpec) -> int:
    """Bytes the payload of `spec` stands for once any compression is undone."""
    if spec.codec == "int8" and spec.dtype in _FLOAT_DTYPES:
        return int8_raw_size(spec.shape)
    return math.prod(spec.shape) * _wire_dtype(spec).itemsize


def payload_bounds(spec: TensorSpec) -> tuple[int, int]:
    """Smallest and largest byte length the payload of `spec` may have."""
    if spec.codec == "int8" and spec.dtype in _FLOAT_DTYPES:
        return 1, int8_max_payload_size(spec.shape)
    exact = expanded_size(spec)
    return exact, exact


def decode(spec: TensorSpec, data: bytes | memoryview) -> torch.Tensor:
    """A new tensor with `spec`'s dtype and shape rebuilt from its payload."""
    low, high = payload_bounds(spec)
    size = memoryview(data).nbytes  # len() of a typed memoryview counts items, not bytes
    if not low <= size <= high:
        needs = f"{low}" if low == high else f"{low}..{high}"
        raise QuantizationError(
            f"tensor {spec.name!r}: payload has {size} bytes, spec needs {needs}"
        )
    if spec.codec == "int8":
        return _checked_float(spec, unpack_int8(data, spec.shape))
    wire = np.frombuffer(data, dtype=_wire_dtype(spec)).reshape(spec.shape)
    if spec.codec == RAW:
        torch_dtype, _ = _RAW_DTYPES[spec.dtype]
        # astype to native order copies, so the tensor never shares the caller's buffer
        native = (
            wire != 0 if torch_dtype is torch.bool else wire.astype(wire.dtype.newbyteorder("="))
        )
        return torch.from_numpy(native).to(torch_dtype)
    if spec.codec == "int16":
        # |value| grows with |code|: the largest code alone says whether any overflows
        largest = max(-int(wire.min()), int(wire.max())) if wire.size else 0
        finite = math.isfinite(float(np.float32(largest * spec.scale)))
        floats = dequantize_int16(wire, spec.scale)
    else:
        floats = _to_float32(wire)
        finite = math.isfinite(_peak(floats))
    if not finite:
        raise QuantizationError(f"tensor {spec.name!r} decodes to NaN or Inf")
    return _checked_float(spec, floats, finite=True)


def _checked_float(spec: TensorSpec, floats: np.ndarray, finite: bool = False) -> torch.Tensor:
    """The tensor of decoded float32 values in `spec`'s dtype, refused if any is not finite."""
    if not finite and not math.isfinite(_peak(floats)):
        raise QuantizationError(f"tensor {spec.name!r} decodes to NaN or Inf")
    tensor = torch.from_numpy(floats).to(_FLOAT_DTYPES[spec.dtype])
    if tensor.dtype != torch.float32 and not math.isfinite(_peak(tensor)):
        raise QuantizationError(f"tensor {spec.name!r} overflows its dtype {spec.dtype}")
    return tensor
