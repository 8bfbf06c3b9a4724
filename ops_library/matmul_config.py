"""Matmul configurations, their pass pipelines, and the static cost model used without a GPU."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from kaio.dialects.smem_layout_kinds import LAYOUT_KINDS
from kaio.errors import KaioValueError
from kaio.launch_limits import MAX_MAXNREG, MAX_STAGES, MAX_THREADS, MAXNREG_RULE, MIN_MAXNREG, STAGES_RULE
from kaio.ops_library.config_fields import bool_field, choice_field, int_field, int_tuple_field, settle
from kaio.pipeline import Pipeline, TilePipelineOptions, build_pipeline, has_wgmma


@dataclass(frozen=True)
class MatmulConfig:
    """One way to run a matmul: CTA tile, warps, cp.async stages, shared layout, tensor cores,
    and split-K (K cut into ``split_k`` chunks summed by separate programs, then reduced)."""

    block: tuple[int, int, int] = (128, 128, 32)
    warps: tuple[int, int] = (2, 2)
    stages: int = 3
    layout: str = "swizzle"
    group: int = 8
    tensor_cores: bool = True
    split_k: int = 1
    maxnreg: int = 0
    """Registers per thread at most (``.maxnreg``; 0: as many as ptxas wants, up to 255)."""
    tma: bool = True
    """sm_90a wgmma configs: fill the K loop's ring by TMA where a tensor map can describe the
    operands (``pipeline-tma``), and store C through shared memory by TMA where one can
    describe C (``store-tma``); False (or an operand it cannot describe): cp.async, st.global."""
    warp_specialize: bool = False
    """With TMA: a producer warpgroup (added to the block) issues the loads and the config's
    warps only compute, trading registers with ``setmaxnreg``."""
    persistent: bool = False
    """One program per SM (or as many as fit) walking the C tiles (the persistent matmul);
    not with split-K."""

    @property
    def threads(self) -> int:
        return 32 * self.warps[0] * self.warps[1]

    def shared_bytes(self, elem_bytes: int) -> int:
        """The ring's bytes; a persistent program's C staging beside it (in a loop it cannot
        take the ring's bytes), counted for an f32 C."""
        bm, bn, bk = self.block
        pad = 16 if self.layout == "pad" else 0
        per_stage = bm * (bk * elem_bytes + pad) + bk * (bn * elem_bytes + pad)
        return max(self.stages, 1) * per_stage + (bm * bn * 4 if self.persistent else 0)

    def __post_init__(self) -> None:
        """Every field checked where the config is made (a zero tile would otherwise divide by
        zero deep in the op): KaioTypeError for a wrong type, KaioValueError for a value that
        cannot run."""
        owner = "MatmulConfig"
        warps = int_tuple_field(owner, "warps", self.warps, ("WM", "WN"), power_of_two=True)
        if 32 * warps[0] * warps[1] > MAX_THREADS:
            raise KaioValueError(f"{owner}: `warps` {warps} make {32 * warps[0] * warps[1]} threads; a block has at most {MAX_THREADS}")
        settle(
            self,
            block=int_tuple_field(owner, "block", self.block, ("BM", "BN", "BK"), power_of_two=True),
            warps=warps,
            stages=int_field(owner, "stages", self.stages, 0, MAX_STAGES, rule=STAGES_RULE),
            layout=choice_field(owner, "layout", self.layout, LAYOUT_KINDS),
            group=int_field(owner, "group", self.group, 1),
            tensor_cores=bool_field(owner, "tensor_cores", self.tensor_cores),
            split_k=int_field(owner, "split_k", self.split_k, 1),
            maxnreg=int_field(owner, "maxnreg", self.maxnreg, 0, MAX_MAXNREG, rule=f"0 (no cap) or {MAXNREG_RULE}"),
            tma=bool_field(owner, "tma", self.tma),
            warp_specialize=bool_field(owner, "warp_specialize", self.warp_specialize),
            persistent=bool_field(owner, "persistent", self.persistent),
        )
        if 0 < self.maxnreg < MIN_MAXNREG:
            raise KaioValueError(f"{owner}: `maxnreg` is 0 (no cap) or {MAXNREG_RULE}, got {self.maxnreg}")
        if self.persistent and self.split_k > 1:
            raise KaioValueError(
                f"{owner}: `persistent=True` cannot go with `split_k={self.split_k}` (a persistent matmul config "
                "cannot split K: each program walks whole C tiles)"
            )

    @property
    def wgmma(self) -> bool:
        """A Hopper config: one 16-row strip per warp (M = 16 x warps), the wgmma smem layout;
        on sm_90a its dot runs on warpgroup tensor cores (elsewhere on mma.sync)."""
        return self.layout == "wgmma" and self.tensor_cores

    def pipeline(self, arch: str = "sm_80") -> Pipeline:
        """The pass pipeline this config compiles with (print it, edit it, pass it back). Its
        ring depth and register cap are not in it: the config's kernel carries them (its module's
        ``kaio.launch``, which :func:`~kaio.ops_library.matmul_kernel.configured_kernel` sets)."""
        return build_pipeline(arch, self.pipeline_options())

    def pipeline_options(self) -> TilePipelineOptions:
        """What this config's pipeline differs in from a tile kernel's."""
        return TilePipelineOptions(
            layout=self.layout, tensor_cores=self.tensor_cores, warps=self.warps, wgmma=self.wgmma,
            tma=self.tma, warp_specialize=self.warp_specialize,
        )  # fmt: skip

    def suits(self, align: tuple[int, int, int], elem_bytes: int) -> bool:
        """Narrow (misaligned) copies take many registers next to a big accumulator: give them
        configs whose warp tile holds at most 64x32 accumulators."""
        wide = 16 // elem_bytes
        if min(align[0], align[1]) >= wide or not self.tensor_cores:
            return True
        bm, bn, _ = self.block
        return (bm // self.warps[0]) * (bn // self.warps[1]) <= 64 * 32

    def key(self) -> str:
        bm, bn, bk = self.block
        tc = "mma" if self.tensor_cores else "simt"
        split = f"-k{self.split_k}" if self.split_k > 1 else ""
        cap = f"-r{self.maxnreg}" if self.maxnreg else ""
        loads = ("-ws" if self.warp_specialize else "") + ("" if self.tma else "-cpasync") + ("-p" if self.persistent else "")
        return f"{bm}x{bn}x{bk}-w{self.warps[0]}x{self.warps[1]}-s{self.stages}-{self.layout}-g{self.group}-{tc}{split}{cap}{loads}"

    def with_split_k(self, split_k: int) -> MatmulConfig:
        return replace(self, split_k=split_k)


TENSOR_CORE_CONFIGS: tuple[MatmulConfig, ...] = (
    MatmulConfig((128, 128, 32), (2, 2), 3),
    MatmulConfig((128, 128, 32), (4, 2), 3),
    MatmulConfig((128, 64, 32), (2, 2), 3),
    MatmulConfig((64, 128, 32), (2, 2), 3),
    MatmulConfig((64, 64, 32), (2, 2), 4),
    MatmulConfig((256, 128, 32), (4, 2), 2),
    # small and skinny problems: more programs, deeper K steps
    MatmulConfig((64, 64, 64), (2, 2), 3),
    MatmulConfig((32, 64, 64), (2, 2), 3),
    # large problems: 8 warps, rings beyond 48 KiB in dynamic shared memory (72-96 KiB)
    MatmulConfig((128, 256, 32), (2, 4), 3),
    MatmulConfig((256, 128, 32), (4, 2), 3),
    MatmulConfig((128, 128, 64), (4, 2), 3),
)

# sm_90a: warpgroup tensor cores (wgmma). Warps [W, 1] with BM = 16 W, each warpgroup 64 rows of
# the tile. Rings beyond 48 KiB live in dynamic shared memory (H100: up to 227 KiB a block).
WGMMA_CONFIGS: tuple[MatmulConfig, ...] = (
    MatmulConfig((128, 256, 64), (8, 1), 3, "wgmma"),  # 144 KiB
    MatmulConfig((128, 128, 64), (8, 1), 4, "wgmma"),  # 128 KiB
    MatmulConfig((64, 128, 64), (4, 1), 4, "wgmma"),  # 96 KiB
    MatmulConfig((128, 128, 32), (8, 1), 3, "wgmma"),  # 48 KiB: static shared memory only
    MatmulConfig((64, 64, 64), (4, 1), 3, "wgmma"),  # 48 KiB
    # a TMA producer warpgroup beside the 8 computing warps (autotuned: not timed on hardware yet)
    MatmulConfig((128, 256, 64), (8, 1), 3, "wgmma", warp_specialize=True),
    MatmulConfig((128, 128, 64), (8, 1), 4, "wgmma", warp_specialize=True),
    # persistent programs over the C tiles (a 128 x 256 tile's ring and C staging would not fit)
    MatmulConfig((128, 128, 64), (8, 1), 4, "wgmma", persistent=True),
)

SIMT_CONFIGS: tuple[MatmulConfig, ...] = (
    MatmulConfig((64, 64, 16), (2, 2), 2, "pad", tensor_cores=False),
    MatmulConfig((32, 32, 16), (1, 1), 2, "pad", tensor_cores=False),
)

DEFAULT_CONFIG = TENSOR_CORE_CONFIGS[0]
DEFAULT_SIMT_CONFIG = SIMT_CONFIGS[0]


@dataclass(frozen=True)
class GpuModel:
    """The few numbers the cost model needs (defaults: an A100-class part)."""

    sms: int = 108
    shared_per_sm: int = 164 * 1024
    tensor_flops_per_sm: float = 312e12 / 108
    simt_flops_per_sm: float = 19.5e12 / 108
    bytes_per_sm: float = 1.5e12 / 108
    extra: dict[str, float] = field(default_factory=dict)


def estimate_seconds(config: MatmulConfig, m: int, n: int, k: int, elem_bytes: int, gpu: GpuModel) -> float:
    """Rough time of one launch: waves of CTAs, each bound by math or by its global reads.

    Bigger tiles read less per flop but leave SMs idle on small problems; the model trades the
    two. It ranks configs, it does not predict absolute times.
    """
    bm, bn, bk = config.block
    splits = config.split_k
    tiles = math.ceil(m / bm) * math.ceil(n / bn) * splits
    k_padded = math.ceil(math.ceil(k / bk) / splits) * bk  # one program's share of K
    resident = max(1, min(gpu.shared_per_sm // max(config.shared_bytes(elem_bytes), 1), 2048 // config.threads))
    waves = math.ceil(tiles / (gpu.sms * resident))
    flops = 2.0 * bm * bn * k_padded
    rate = gpu.tensor_flops_per_sm if config.tensor_cores else gpu.simt_flops_per_sm
    # a lone warp-tile keeps few tensor cores busy: efficiency grows with warps per SM
    busy = min(1.0, resident * config.threads / 256)
    math_time = flops / (rate * busy)
    memory_time = (bm + bn) * k_padded * elem_bytes * resident / gpu.bytes_per_sm
    seconds = waves * max(math_time, memory_time) + 2e-6
    if splits > 1:  # the partial sums go out and come back in f32, then a second launch
        seconds += 2 * splits * m * n * 4 / (gpu.bytes_per_sm * gpu.sms) + 4e-6
    return seconds


def split_k_for(config: MatmulConfig, m: int, n: int, k: int, sms: int) -> int:
    """How many K chunks fill the GPU when C has too few tiles (1: no split).

    Splits only when the tiles cover less than half the SMs, K is deep (every chunk keeps at
    least 8 BK steps, so the cp.async ring still has work), and at most 16 ways."""
    bm, bn, bk = config.block
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    if 2 * tiles > sms or config.persistent:
        return 1
    by_k = math.ceil(k / bk) // 8
    return max(1, min(sms // tiles, by_k, 16))


def candidates(
    tensor_cores: bool, align: tuple[int, int, int], elem_bytes: int,
    shape: tuple[int, int, int] | None = None, sms: int = 108, *, arch: str = "sm_80",
    shared_limit: int | None = None,
) -> list[MatmulConfig]:  # fmt: skip
    """The configs worth trying for this kind of problem on ``arch``, the default first (on
    sm_90a the wgmma ones, then the mma.sync ones); with ``shape`` (m, n, k), each config's
    split-K variant too, where :func:`split_k_for` would split; with ``shared_limit``, only
    those whose shared memory a block can have (a device's ``shared_memory_per_block_optin``)."""
    base = TENSOR_CORE_CONFIGS if tensor_cores else SIMT_CONFIGS
    if tensor_cores and has_wgmma(arch):
        base = WGMMA_CONFIGS + base
    pool = [
        c for c in base
        if c.suits(align, elem_bytes) and (shared_limit is None or c.shared_bytes(elem_bytes) <= shared_limit)
    ]  # fmt: skip
    if shape is None:
        return pool
    split = [c.with_split_k(s) for c in pool if (s := split_k_for(c, *shape, sms)) > 1]
    return pool + split


def default_config(
    tensor_cores: bool, align: tuple[int, int, int], elem_bytes: int, *, arch: str = "sm_80",
    shared_limit: int | None = None,
) -> MatmulConfig:  # fmt: skip
    return candidates(tensor_cores, align, elem_bytes, arch=arch, shared_limit=shared_limit)[0]


def choose_config(
    m: int, n: int, k: int, elem_bytes: int, tensor_cores: bool,
    align: tuple[int, int, int] = (8, 8, 8), gpu: GpuModel | None = None, *, arch: str = "sm_80",
    shared_limit: int | None = None,
) -> MatmulConfig:  # fmt: skip
    """The config the cost model ranks fastest (used on the simulator, where nothing is timed;
    on sm_90a among the wgmma configs)."""
    model = gpu or GpuModel()
    pool = candidates(tensor_cores, align, elem_bytes, (m, n, k), model.sms, arch=arch, shared_limit=shared_limit)
    if tensor_cores and has_wgmma(arch):
        pool = [c for c in pool if c.wgmma] or pool
    return min(pool, key=lambda c: estimate_seconds(c, m, n, k, elem_bytes, model))
