"""kaio's own tensor-map format for the simulator, and the shared-memory swizzle that TMA and
wgmma share.

On a GPU a tensor map is the opaque 128-byte ``CUtensorMap`` that ``cuTensorMapEncodeTiled``
builds. The simulator cannot read NVIDIA's encoding, so a kernel run on it gets a 128-byte
blob in the format below instead (all fields little-endian), in global memory or as a
``.param .align 64 .b8 name[128]`` parameter (``mov.b64 %rd, name``); the kernel passes its
address to ``cp.async.bulk.tensor`` exactly as it would a real one.

======  =====  ==============================================================================
offset  bytes  field
======  =====  ==============================================================================
0       4      magic ``b"kTMA"``
4       4      element size in bytes (1, 2, 4 or 8)
8       4      rank: 1..5
12      4      swizzle: 0 none, 1 32B, 2 64B, 3 128B (``CU_TENSOR_MAP_SWIZZLE_*`` order)
16      8      global address of element (0, .., 0); 16-byte aligned
24      20     dims[5], u32: elements along each dimension, innermost first
44      4      reserved (0)
48      32     strides[4], u64: bytes between consecutive indices of dims 1..4 (dim 0 is
               contiguous), multiples of 16
80      20     box[5], u32: the box (tile) each copy moves, elements per dimension, 1..256;
               box[0] * element size is a multiple of 16 bytes (and at most the swizzle span)
100     28     reserved (0)
======  =====  ==============================================================================

Box elements outside the tensor read as zero (``CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE``) and are
not written by stores. A copy of the box moves ``prod(box) * element size`` bytes into shared
memory, packed innermost-first, with the swizzle applied to the shared addresses.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

TENSOR_MAP_BYTES = 128
MAGIC = b"kTMA"
SWIZZLE_SPANS = (0, 32, 64, 128)  # by the tensor map's swizzle code
_HEADER = struct.Struct("<4sIII Q 5I I 4Q 5I")


class TensorMapError(ValueError):
    """A blob that is not a valid kaio tensor map, or arguments that cannot make one."""


def swizzle(offsets: np.ndarray, span: int) -> np.ndarray:
    """Shared-memory byte addresses with the ``span``-byte swizzle (32, 64, 128; 0: none):
    the 16-byte chunk index (address bits 4..) is XORed with the 128-byte row index (bits
    7..), over log2(span / 16) bits. It works on absolute shared addresses, as the hardware
    does, which is why swizzled buffers are aligned to the pattern's repeat (span * 8 bytes)."""
    if not span:
        return offsets
    mask = span // 16 - 1
    return offsets ^ (((offsets >> 7) & mask) << 4)


@dataclass(frozen=True)
class TensorMap:
    base: int
    element_bytes: int
    dims: tuple[int, ...]  # innermost first
    strides: tuple[int, ...]  # bytes, for dims[1:]
    box: tuple[int, ...]
    swizzle: int = 0  # code: 0 none, 1 32B, 2 64B, 3 128B

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def swizzle_span(self) -> int:
        return SWIZZLE_SPANS[self.swizzle]

    @property
    def box_bytes(self) -> int:
        return int(np.prod(self.box)) * self.element_bytes

    def validate(self) -> None:
        r = self.rank
        problems = []
        if not 1 <= r <= 5 or len(self.box) != r or len(self.strides) != r - 1:
            problems.append(f"rank {r} with {len(self.box)} box sizes and {len(self.strides)} strides")
        if self.element_bytes not in (1, 2, 4, 8):
            problems.append(f"element size {self.element_bytes}")
        if self.swizzle not in range(4):
            problems.append(f"swizzle code {self.swizzle}")
        if self.base % 16:
            problems.append(f"base {self.base:#x} is not 16-byte aligned")
        if any(s % 16 for s in self.strides):
            problems.append(f"strides {self.strides} are not multiples of 16")
        if any(not 1 <= b <= 256 for b in self.box) or any(d < 1 for d in self.dims):
            problems.append(f"box {self.box} (1..256 each) or dims {self.dims}")
        inner = self.box[0] * self.element_bytes if self.box else 0
        if inner % 16 or (self.swizzle and inner > self.swizzle_span):
            problems.append(f"the box's inner extent ({inner} bytes) must be a multiple of 16 and fit the swizzle span")
        if problems:
            raise TensorMapError("bad tensor map: " + "; ".join(problems))

    def encode(self) -> bytes:
        self.validate()
        pad = lambda xs, n: list(xs) + [0] * (n - len(xs))
        head = _HEADER.pack(
            MAGIC, self.element_bytes, self.rank, self.swizzle, self.base,
            *pad(self.dims, 5), 0, *pad(self.strides, 4), *pad(self.box, 5),
        )  # fmt: skip
        return head + bytes(TENSOR_MAP_BYTES - len(head))

    @classmethod
    def decode(cls, blob: bytes | np.ndarray) -> TensorMap:
        raw = bytes(blob[:TENSOR_MAP_BYTES]) if isinstance(blob, bytes) else blob[:TENSOR_MAP_BYTES].astype(np.uint8).tobytes()
        if len(raw) < TENSOR_MAP_BYTES or raw[:4] != MAGIC:
            raise TensorMapError("not a kaio tensor map (the simulator reads kaio's 128-byte format, not a CUtensorMap)")
        fields = _HEADER.unpack(raw[: _HEADER.size])
        _, elem, rank, swz, base = fields[:5]
        dims, strides, box = fields[5:10], fields[11:15], fields[15:20]
        if not 1 <= rank <= 5:
            raise TensorMapError(f"bad tensor map: rank {rank}")
        tmap = cls(base, elem, tuple(dims[:rank]), tuple(strides[: rank - 1]), tuple(box[:rank]), swz)
        tmap.validate()
        return tmap

    def box_addresses(self, coords: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Global byte addresses of the box at ``coords`` (innermost first), packed
        innermost-first, and a mask of the elements inside the tensor."""
        index = np.indices(self.box[::-1]).reshape(self.rank, -1)[::-1]  # innermost first
        inside = np.ones(index.shape[1], dtype=bool)
        address = np.full(index.shape[1], self.base, dtype=np.int64)
        steps = (self.element_bytes, *self.strides)
        for axis in range(self.rank):
            g = index[axis] + int(coords[axis])
            inside &= (g >= 0) & (g < self.dims[axis])
            address += g * steps[axis]
        return address, inside


def encode_tensor_map(
    base: int,
    element_bytes: int,
    dims: tuple[int, ...],
    strides: tuple[int, ...],
    box: tuple[int, ...],
    swizzle: int = 0,
) -> bytes:
    """The 128-byte blob of a tensor map (arguments as ``cuTensorMapEncodeTiled`` takes them:
    dims innermost first, byte strides of the outer dims, box sizes, swizzle code)."""
    return TensorMap(base, element_bytes, tuple(dims), tuple(strides), tuple(box), swizzle).encode()
