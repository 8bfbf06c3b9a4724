"""ptx-sync-cleanup on small entries: which ``cp.async.wait_group`` and ``bar.sync`` order nothing
and go, which must stay (a store, a load in any space, a wait that may land copies, a loop head,
an if/else arm that touches memory), and on the library's attention kernel: fewer waits and
barriers, the same result on the simulator, and no instruction left whose deletion goes
unnoticed that the cleanup should have caught."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp, f32, i1, i32, i64

from kaio.dialects import ptx
from kaio.dialects.ptx_hopper import FenceProxyAsyncOp, WgmmaCommitOp, WgmmaMmaAsyncOp, WgmmaWaitOp
from kaio.passes.ptx_optimize import PtxSyncCleanupPass
from kaio.passes.ptx_sync_cleanup import redundant_syncs


class Program:
    """An entry written as words: ``cp``, ``commit``, ``wait N``, ``bar``, ``bar 64`` (a counted
    barrier), ``st`` / ``lds`` (shared store / load), ``stg`` / ``ld`` (global store / load),
    ``ldp`` (param load), ``add``, ``label L``, ``bra L``, ``@bra L`` (a guarded branch),
    ``ret``, ``wait_all``, ``@commit`` (guarded), ``wg A`` (a wgmma reading A), ``wgcommit``, ``wgwait N``, ``fence``
    (``fence.proxy.async.shared::cta``; ``@fence`` guarded, ``fence_global`` of global memory). ``st A`` / ``lds A``
    / ``cp A`` address the shared array ``A`` (declared on first use; ``$A`` a dynamic one;
    ``A[0:64]`` through a start whose ``within`` says bytes 0 to 64 of it, a buffer's),
    ``setr A`` points the register ``r`` into it, ``str`` / ``ldr`` access through ``r``, and
    ``ldx A`` reads ``A`` at an index loaded from global memory. Each op is named by its index."""

    def __init__(self, words: list[str]) -> None:
        self.entry = ptx.EntryOp("k", [("k_p", "u64")])
        block = self.entry.body.block
        self.ops: list[object] = []
        zero = ptx.ConstOp(0, i32)
        addr64, sixteen, pred = ptx.ConstOp(0, i64), ptx.ConstOp(16, i32), ptx.RegOp(i1)
        ring = ptx.RegOp(i32)
        block.add_ops([zero, addr64, sixteen, pred, ring])
        declared: set[str] = set()

        def address(name: str, index: ptx.ConstOp | ptx.LdOp = zero) -> object:
            """``name``'s start plus ``index`` times 4, as lowerings compute it."""
            if not name:
                return index.results[0]
            name, _, part = name.partition("[")
            within = (name, *map(int, part.rstrip("]").split(":"))) if part else None
            if name not in declared:
                declared.add(name)
                decl = ptx.DynamicSharedDeclOp if name.startswith("$") else ptx.SharedDeclOp
                block.insert_op_before(decl(name, 256), block.first_op)  # type: ignore[arg-type]
            start = ptx.MovOp("u32", [], [i32], symbol=name, within=within)  # type: ignore[arg-type]
            at = ptx.MadOp("lo.s32", [index.results[0], ptx.ConstOp(4, i32).result, start.results[0]], [i32])
            block.add_ops([at.srcs[1].owner, start, at])  # type: ignore[list-item]
            return at.results[0]

        for word in words:
            kind, _, arg = word.partition(" ")
            op: ptx.PtxInstr | ptx.LabelOp
            if kind == "cp":
                op = ptx.CpAsyncOp("cg.shared.global", [address(arg), addr64.result, sixteen.result])
            elif kind == "setr":
                op = ptx.AssignOp("b32", [ring.results[0], address(arg)])
            elif kind in ("str", "ldr"):
                op = (ptx.StOp("shared.u32", [ring.results[0], zero.result]) if kind == "str"
                      else ptx.LdOp("shared.u32", [ring.results[0]], [i32]))  # fmt: skip
            elif kind == "ldx":
                index = ptx.LdOp("global.u32", [addr64.result], [i32])
                block.add_op(index)
                op = ptx.LdOp("shared.u32", [address(arg, index)], [i32])
            elif kind == "commit":
                op = ptx.CpAsyncCommitOp("")
            elif kind == "wait":
                op = ptx.CpAsyncWaitGroupOp("", [ptx.ConstOp(int(arg), i32).result])
                block.add_op(op.srcs[0].owner)  # type: ignore[arg-type]
            elif kind == "@commit":
                op = ptx.CpAsyncCommitOp("", guard=pred.results[0])
            elif kind == "wg":  # a wgmma whose B descriptor is A's address (shifted, as descriptors are)
                shifted = ptx.ShrOp("b32", [address(arg), ptx.ConstOp(4, i32).result], [i32])
                desc = ptx.CvtOp("u64.u32", [shifted.results[0]], [i64])
                acc = [ptx.RegOp(f32) for _ in range(4)]
                a_regs = [ptx.RegOp(i32) for _ in range(4)]
                block.add_ops([shifted.srcs[1].owner, shifted, desc, *acc, *a_regs])  # type: ignore[list-item]
                op = WgmmaMmaAsyncOp("sync.aligned.m64n8k16.f32.f16.f16", [r.results[0] for r in acc],
                                     [r.results[0] for r in a_regs], desc.results[0], pred.results[0])  # fmt: skip
            elif kind == "wgcommit":
                op = WgmmaCommitOp("sync.aligned")
            elif kind == "wgwait":
                op = WgmmaWaitOp("sync.aligned", [ptx.ConstOp(int(arg), i32).result])
                block.add_op(op.srcs[0].owner)  # type: ignore[arg-type]
            elif kind in ("fence", "@fence", "fence_global"):
                mods = "global" if kind == "fence_global" else "shared::cta"
                op = FenceProxyAsyncOp(mods, guard=pred.results[0] if kind == "@fence" else None)
            elif kind == "wait_all":
                op = ptx.CpAsyncWaitAllOp("")
            elif kind == "bar":
                counts = [ptx.ConstOp(int(arg), i32)] if arg else []
                block.add_ops(counts)
                op = ptx.BarSyncOp("", [zero.result, *(c.result for c in counts)])
            elif kind == "st":
                op = ptx.StOp("shared.u32", [address(arg), zero.result])
            elif kind == "ld":
                op = ptx.LdOp("global.u32", [addr64.result], [i32])
            elif kind == "lds":
                op = ptx.LdOp("shared.u32", [address(arg)], [i32])
            elif kind == "stg":
                op = ptx.StOp("global.u32", [addr64.result, zero.result])
            elif kind == "ldp":
                op = ptx.LdOp("param.u32", [addr64.result], [i32])
            elif kind == "ret":
                op = ptx.RetOp("")
            elif kind == "add":
                op = ptx.AddOp("s32", [zero.result, zero.result], [i32])
            elif kind == "label":
                op = ptx.LabelOp(arg)
            elif kind in ("bra", "@bra"):
                op = ptx.BraOp("", guard=pred.results[0] if kind == "@bra" else None, symbol=arg)
            else:
                raise ValueError(word)
            block.add_op(op)
            self.ops.append(op)

    def dropped(self) -> list[int]:
        dead = redundant_syncs(list(self.entry.body.block.ops))
        return sorted(self.ops.index(op) for op in dead)


@pytest.mark.parametrize(
    "words, dropped",
    [
        (["cp", "commit", "wait 0", "wait 0"], [3]),  # a drain, then a reuse's wait: nothing left to land
        (["wait 0"], [0]),  # nothing ever committed
        (["cp", "commit", "cp", "commit", "wait 1", "wait 1", "wait 0"], [5]),
        (["cp", "wait 0"], [1]),  # a wait lands committed groups only
        (["cp", "commit", "wait 0", "bar", "cp", "wait 0", "bar"], [5, 6]),  # the reuse pairs of attention
        (["st", "bar", "lds"], []),  # read after write
        (["lds", "bar", "st"], []),  # write after read
        (["st", "bar", "st"], []),  # write after write
        (["lds", "bar", "lds"], [1]),  # reads need no order
        (["st", "bar", "ld"], [1]),  # shared and global memory do not overlap
        (["stg", "bar", "ld"], []),  # a barrier orders global memory too
        (["ld", "bar", "ld", "ldp"], [1]),
        (["bar", "st"], [0]),  # nothing before the kernel's start
        (["st", "bar"], [1]),  # nothing after its end
        (["st", "bar", "add", "bar", "lds"], [3]),  # two in a row: one goes
        (["lds", "bar", "ld", "bar", "st"], [3]),  # a conversion's two fences with global loads between
        (["cp", "commit", "bar", "wait 0", "bar", "lds"], [2]),  # the wait lands the copy, the second publishes it
        (["lds", "bar", "cp", "commit", "wait 0"], []),  # an issued copy writes shared at any time after
        (["st", "bar", "bar 64", "lds"], []),  # a counted barrier is another barrier
        (["st", "label L", "bar", "lds", "st", "@bra L"], []),  # a loop's: its back edge stores
        (["st", "label L", "bar", "ld", "@bra L", "bar", "lds"], [2]),  # the loop's goes, not the one after
        (["lds", "bar", "@bra A", "add", "label A", "bar", "st"], [5]),  # both paths quiet
        (["st", "bar", "@bra A", "st", "label A", "bar", "lds"], []),  # one arm stores
        (["lds", "bar", "@bra A", "ret", "label A", "st"], []),  # one path ends, the other stores
        (["lds", "bar", "@bra A", "st", "ret", "label A", "ret"], []),
        (["lds", "bar", "@bra A", "ld", "ret", "label A", "ret"], [1]),
        (["cp", "commit", "@bra A", "wait 0", "label A", "wait 0"], []),  # pending on one path
        (["cp", "wait_all", "wait 0"], [2]),
        (["cp", "@commit", "wait 0"], []),  # a guarded commit may commit
        (["wgcommit", "wgwait 1", "wgwait 0", "wgwait 0"], [1, 3]),  # the wgmma queue: one pending, a second drain
        (["cp", "commit", "wgwait 0", "wait 0"], [2]),  # the queues are counted apart
        (["st A", "bar", "lds B"], [1]),  # two arrays never overlap
        (["st A", "bar", "lds A"], []),
        (["lds A", "bar", "st B", "bar", "lds A"], [1, 3]),  # a conversion's scratch beside another array
        (["st A", "bar", "lds"], []),  # an address from no array may be in any
        (["st $A", "bar", "lds $B"], []),  # dynamic shared arrays all start at the same byte
        (["setr A", "setr B", "st A", "bar", "ldr"], []),  # r may point into A
        (["setr B", "st A", "bar", "ldr"], [2]),  # r points into B only
        (["setr A", "str", "bar", "lds A"], []),
        (["st B", "bar", "ldx A"], []),  # a value loaded from memory may be any address
        (["cp A", "commit", "wait 0", "bar", "lds B"], [3]),  # the wait lands copies into A only
        (["cp A", "commit", "wait 0", "bar", "lds A"], []),
        # buffers laid out in one array (their starts' `within`): bytes apart never overlap
        (["st A[0:64]", "bar", "lds A[64:128]"], [1]),
        (["st A[0:64]", "bar", "lds A[32:96]"], []),
        (["st A[0:64]", "bar", "lds A"], []),  # the array's own start: any of its bytes
        (["lds A[0:64]", "bar", "st A[64:128]", "bar", "lds A[0:64]"], [1, 3]),  # a dot's staging, the next one's
        (["lds A[0:64]", "bar", "st A[64:128]", "bar", "st A[0:64]"], [3]),  # one must order the rewrite (the later goes)
        (["st B", "bar", "lds A[0:64]"], [1]),
        (["st $A[0:64]", "bar", "lds $A[64:128]"], []),  # the dynamic array: one region (not yet its bytes)
        (["st $A[0:64]", "bar", "lds $B[64:128]"], []),  # two dynamic arrays are one memory: no bytes known
        # wgmma reads the arrays its descriptors point into, until a wait_group 0 retires it
        (["st A", "bar", "wg A", "wgcommit", "wgwait 0", "bar", "st B"], [5]),  # the next dot's staging, elsewhere
        (["st A", "bar", "wg A", "wgcommit", "wgwait 0", "bar", "st A"], []),  # a rewrite of what it read
        (["st A", "bar", "wg A", "wgcommit", "bar", "wgwait 0", "st A"], []),  # still reading past the barrier
        (["st A", "bar", "wg A", "wgcommit", "wg A", "wgcommit", "wgwait 1", "bar", "st A"], []),  # one may still read
        (["st A", "bar", "wg A[0:64]", "wgcommit", "wgwait 0", "bar", "st A[64:128]"], [5]),  # a buffer's bytes
        (["st A", "bar", "wg A", "wgcommit", "wgwait 0", "bar", "lds A"], [5]),  # reads need no order
        (["st A", "bar", "label L", "wg A", "wgcommit", "@bra L", "wgwait 0", "st B", "bar", "lds B"], []),
        (["st A", "bar", "wg A", "wgcommit", "bar", "fence", "st B"], [4]),  # a fence makes no access
        # proxy fences: one with nothing generic in shared memory, nor a synchronisation, since the last goes
        (["st", "bar", "fence", "wgcommit", "wgwait 0", "add", "fence", "lds"], [6]),
        (["fence"], []),  # the kernel's start: whatever came before the launch
        (["fence", "st", "fence"], []),  # a generic write to order before the async proxy
        (["fence", "lds", "fence"], []),  # a generic read too (before a bulk copy overwrites it)
        (["fence", "ld", "stg", "ldp", "fence"], [4]),  # global memory is not the fence's
        (["st", "fence", "bar", "fence", "lds"], []),  # what other threads did before the barrier
        (["cp", "commit", "fence", "wait 0", "fence"], []),  # copies landed since
        (["fence", "@fence", "fence"], [2]),  # (a guarded one stays: it fences nothing for sure)
        (["@fence", "fence"], []),  # a guarded fence may not run
        (["fence", "fence_global", "fence"], [2]),  # (a fence of global memory is not removed)
        (["st", "@bra A", "fence", "label A", "fence"], []),  # one path unfenced
        (["st", "fence", "@bra A", "lds", "label A", "fence"], []),  # one path reads shared
        (["st", "fence", "@bra A", "ld", "label A", "fence"], [5]),
        (["st", "label L", "fence", "wgcommit", "fence", "cp", "commit", "wait 0", "@bra L"], [4]),  # a loop's second
        (["st", "fence", "label L", "fence", "wgcommit", "@bra L"], [3]),  # covered on entry and on the back edge
        (["st", "fence", "label L", "fence", "lds", "@bra L"], []),  # the back edge reads shared

    ],
)
def test_what_orders_nothing_goes(words: list[str], dropped: list[int]) -> None:
    assert Program(words).dropped() == dropped


def test_the_pass_erases_them_and_the_entry_verifies() -> None:
    p = Program(["cp", "commit", "wait 0", "bar", "cp", "wait 0", "bar", "st", "bar", "lds"])
    module = ModuleOp([p.entry])
    PtxSyncCleanupPass().apply(None, module)  # type: ignore[arg-type]
    module.verify()
    names = [op.name for op in p.entry.body.block.ops if isinstance(op, ptx.PtxInstr)]
    assert names.count("ptx.bar.sync") == 2 and names.count("ptx.cp.async.wait_group") == 1


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_attention_keeps_its_result_with_fewer_waits_and_barriers(arch: str, rng: np.random.Generator) -> None:
    import kaio
    from kaio.ops_library import attention
    from kaio.ops_library.attention import choose_config, configured_kernel, kernel_meta

    config = choose_config(70, 64, arch)
    kernel = configured_kernel(kaio.dtypes.f16, config)
    meta = kernel_meta(config, 64, False, False)
    with_cleanup = kaio.compile(kernel, arch, **meta).ptx
    pipeline = kernel.default_pipeline(arch)
    stage = next(p for p in pipeline.passes if p.name == "ptx-optimize")
    without = kaio.compile(kernel, arch, pipeline=pipeline.replace("ptx-optimize", type(stage)(sync_cleanup=False)), **meta).ptx
    count = lambda text, word: sum(word in line for line in text.splitlines())  # noqa: E731
    assert count(with_cleanup, "bar.sync") <= count(without, "bar.sync")
    if arch == "sm_80":  # (the sm_90a kernel's rings are TMA's: waited on mbarriers)
        assert count(with_cleanup, "cp.async.wait_group") < count(without, "cp.async.wait_group")
    q, k, v = (rng.standard_normal((1, 2, 70, 64)).astype(np.float16) for _ in range(3))
    dev = kaio.Device("sim", arch=arch)
    got = attention(*(dev.alloc_from(x) for x in (q, k, v))).to_host().astype(np.float64)
    s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2) / 8
    p = np.exp(s - s.max(-1, keepdims=True))
    assert np.abs(got - (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)).max() < 2e-2
