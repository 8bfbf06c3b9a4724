"""attention's tiles: :class:`AttentionConfig` (query and key rows per step, the warp grid,
the cp.async stages), the rule that picks one (:func:`choose_config`), the candidates
``config="auto"`` times, and the head dims the kernels take. Kept apart from the op so that
what needs only the tiles (a block mask's default blocks) does not import the op.
"""

from __future__ import annotations

from dataclasses import dataclass

from kaio.errors import KaioTypeError, KaioValueError
from kaio.launch_limits import MAX_STAGES, MAX_THREADS, STAGES_RULE
from kaio.ops_library.config_fields import int_field, settle
from kaio.ops_library.rows import next_pow2
from kaio.pipeline import Pipeline, TilePipelineOptions, build_pipeline, has_wgmma

HEAD_DIMS = tuple(range(8, 257, 8))  # every multiple of 8 up to 256: a row of 16-byte chunks


@dataclass(frozen=True)
class AttentionConfig:
    """Query rows and key rows per step, the warp grid (``warps_m`` along the query rows, so
    row statistics stay inside a warp; ``warps_n`` > 1 splits wide head dims, at the price of a
    shared-memory step in each row reduction), and cp.async stages."""

    block_m: int = 64
    block_n: int = 64
    warps_m: int = 4
    warps_n: int = 1
    stages: int = 2

    def __post_init__(self) -> None:
        owner = "AttentionConfig"
        settle(
            self,
            **{name: int_field(owner, name, getattr(self, name), 1, power_of_two=True)
               for name in ("block_m", "block_n", "warps_m", "warps_n")},  # fmt: skip
            stages=int_field(owner, "stages", self.stages, 0, MAX_STAGES, rule=STAGES_RULE),
        )
        if 32 * self.warps > MAX_THREADS:
            raise KaioValueError(f"{owner}: {self.warps} warps make {32 * self.warps} threads; a block has at most {MAX_THREADS}")

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n

    def label(self) -> str:
        return f"{self.block_m}x{self.block_n}-w{self.warps_m}x{self.warps_n}-s{self.stages}"

    def shared_bytes(self, bd: int, elem_bytes: int = 2) -> int:
        ring = max(self.stages, 1)
        q = self.block_m * bd
        kv = 2 * ring * self.block_n * bd
        p = self.block_m * self.block_n if self.warps_n > 1 else 0  # else P feeds p @ v from registers
        return (q + kv + p) * elem_bytes

    def pipeline(self, arch: str = "sm_80") -> Pipeline:
        """The pass pipeline this config compiles with: a tile kernel's with the config's warp
        grid, the softmax's exp2 as one MUFU.EX2 (.ftz) and 1 / l as one MUFU.RCP (rcp.approx)
        (``fast-math``), and the masked key loop's Q buffer and K/V rings in the bytes of the
        unmasked loop's (``reuse-dead-shared``). The ring depth is the kernel's (its module's
        ``kaio.launch``, which :func:`configured_kernel` sets)."""
        options = TilePipelineOptions(warps=(self.warps_m, self.warps_n), fast_math=True, reuse_dead_shared=True)
        return build_pipeline(arch, options)


def check_head_dim(op: str, d: int, what: str = "head dim") -> None:
    """A KaioTypeError unless ``d`` is one of :data:`HEAD_DIMS`."""
    if d not in HEAD_DIMS:
        raise KaioTypeError(f"{op}: {what} must be a multiple of 8 from 8 to 256, got {d}")


def padded(d: int) -> int:
    """The head dim's tile: its next power of two, at least 16 (a tensor-core step of K); the
    columns past ``d`` are masked by the loads' bound."""
    return max(next_pow2(d), 16)


def choose_config(sq: int, d: int, arch: str = "sm_80") -> AttentionConfig:
    """Tiles that keep a thread's registers below ptxas's limit without spills and the shared
    buffers (Q, the K and V rings) within what a block may have. mma.sync targets: 16 query
    rows per warp, 32 key rows per step (the scores and the K and V fragments stay few), within
    48 KiB. sm_90a: FlashAttention-3's 128 query rows over two warpgroups and 128 key rows per
    step, the scores and P in wgmma's accumulator registers (160 KiB of dynamic shared memory
    at D=128)."""
    bd = padded(d)
    if bd >= 256:  # 4 warps, the head dim split over 2: a warp's output is 16 x 128 (64 registers)
        return AttentionConfig(32, 16, 2, 2, 0)
    if sq <= 16:  # decoding: one warp on 16 query rows
        return AttentionConfig(16, 16, 1, 1, 2)
    if has_wgmma(arch):
        return AttentionConfig(128, 128, 8, 1, 2)
    return AttentionConfig(64, 32, 4, 1, 2)


# Configs worth timing, by padded head dim and query-length class (decoding: 16 queries or
# fewer). Each keeps 16 query rows per warp and assembles without spills for sm_80 and sm_90
# (within 48 KiB of shared memory), the sm_90a ones for sm_90a
# (tests/ops_library/test_attention_codegen.py checks them all).
_PREFILL = {
    32: ((64, 32, 4, 1, 2), (128, 32, 8, 1, 2), (128, 64, 8, 1, 2), (64, 16, 4, 1, 2), (64, 32, 4, 1, 3)),
    64: ((64, 32, 4, 1, 2), (128, 32, 8, 1, 2), (128, 64, 8, 1, 2), (64, 16, 4, 1, 2), (64, 32, 4, 1, 3)),
    128: ((64, 32, 4, 1, 2), (64, 16, 4, 1, 2), (64, 16, 4, 1, 3)),
    256: ((32, 16, 2, 2, 0), (16, 16, 1, 2, 2)),
}
# sm_90a adds 8-warp tiles (two warpgroups of 64 query rows) with wide key steps
_PREFILL_WGMMA = {
    32: ((128, 128, 8, 1, 2), (128, 64, 8, 1, 2), (128, 128, 8, 1, 3)),
    64: ((128, 128, 8, 1, 2), (128, 64, 8, 1, 2), (128, 128, 8, 1, 3)),
    128: ((128, 128, 8, 1, 2), (128, 64, 8, 1, 2), (128, 64, 8, 1, 3)),
    256: (),
}
_DECODE = {
    32: ((16, 16, 1, 1, 2), (16, 32, 1, 1, 2), (16, 64, 1, 1, 2)),
    64: ((16, 16, 1, 1, 2), (16, 32, 1, 1, 2)),
    128: ((16, 16, 1, 1, 2), (64, 16, 4, 1, 2)),
}


def candidates(sq: int, d: int, arch: str = "sm_80") -> list[AttentionConfig]:
    """The configs ``config="auto"`` times for ``sq`` queries of head dim ``d`` on ``arch``,
    the rule's choice (:func:`choose_config`) first."""
    bd = padded(d)
    decode = sq <= 16 and bd < 256
    key = max(bd, 32)  # a 16-wide head dim tile times the 32-wide one's candidates
    specs = _DECODE[key] if decode else _PREFILL[key] + (_PREFILL_WGMMA[key] if has_wgmma(arch) else ())
    pool = [AttentionConfig(*c) for c in specs]
    first = choose_config(sq, d, arch)
    return [first, *(c for c in dict.fromkeys(pool) if c != first)]
