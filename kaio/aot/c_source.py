"""The C launcher of an export: ``NAME.h`` and ``NAME.c`` (C99 and the driver API's ``cuda.h``).

``CUresult NAME_launch(CUstream stream, const unsigned int grid[3], args...)`` does what kaio's
Python launch does, in the same order and with the same bytes:

- refuses a null array (``CUDA_ERROR_INVALID_VALUE``);
- finds the current context's *slot* (one per context: the device's sm, the loaded modules,
  the zero block of empty tensor maps), under one lock;
- tries the variants in the export's order: one *runs* on the device when its arch is the
  device's (an ``a`` target) or an older portable one; it *fits* when the arguments hold its
  facts (integer divisibility, array base alignment). The first that runs and fits is loaded
  once per context (its cubin where the device can run it, else the PTX, JIT-compiled by the
  driver), gets its dynamic shared-memory opt-in, and launches. None runs:
  ``CUDA_ERROR_NO_BINARY_FOR_GPU``; some run but none fits: ``CUDA_ERROR_INVALID_VALUE``;
- ``grid``: three dimensions, or NULL for the export's grid rule (the variant's own, evaluated on
  the arguments; a rule giving no programs launches nothing and succeeds);
- builds each tensor map the variant's PTX takes (``cuTensorMapEncodeTiled``, as
  :mod:`kaio.runtime.tensor_maps` does), and passes one pointer per parameter (the arguments,
  then the maps) to ``cuLaunchKernel``.

``NAME_unload()`` unloads every module of every context (call it before destroying a context
the launcher was used in). The functions never abort: every failure is a ``CUresult``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kaio import __version__
from kaio.aot.c_expressions import helpers_for, to_c
from kaio.aot.variants import Variant
from kaio.compiled import KernelParam, TensorMapParam
from kaio.runtime.cuda_backend import DEFAULT_SHARED_LIMIT, TMA_DATA_TYPES
from kaio.runtime.tensor_maps import MAX_DIM, MAX_STRIDE

C_TYPES = {
    "f32": "float", "f64": "double", "i8": "int8_t", "u8": "uint8_t", "i16": "int16_t",
    "u16": "uint16_t", "i32": "int32_t", "u32": "uint32_t", "i64": "int64_t", "u64": "uint64_t",
    "bool": "uint8_t", "f16": "uint16_t", "bf16": "uint16_t", "f8e4m3": "uint8_t", "f8e5m2": "uint8_t",
}  # fmt: skip
"""The C type of a scalar argument: the bytes kaio's launcher packs (16-bit floats as their bits)."""

SLOTS = 16  # contexts one launcher serves at once
_MAX_GRID = (2**31 - 1, 65535, 65535)
_C_WORDS = set("""auto break case char const continue default do double else enum extern float for goto
if inline int long register restrict return short signed sizeof static struct switch typedef union
unsigned void volatile while bool true false class new delete this template typename namespace
stream grid""".split())  # C and C++ keywords, and the launcher's own parameters


_TENSOR_MAP_HELPER = f"""\
/* A tensor map as kaio.runtime.tensor_maps builds it: extents and strides (elements) of the
   arguments; an empty tensor reads the slot's zero block; what TMA cannot describe is refused. */
static CUresult kaio_tensor_map(CUtensorMap *map, kaio_slot *slot, CUtensorMapDataType type, cuuint32_t rank,
                                CUdeviceptr base, int64_t element_bytes, const int64_t *dims,
                                const int64_t *strides, const cuuint32_t *box, CUtensorMapSwizzle swizzle) {{
    cuuint64_t extents[5], steps[4];
    cuuint32_t element_strides[5];
    cuuint32_t i;
    int empty = 0;
    CUresult err = CUDA_SUCCESS;
    for (i = 0; i < rank; ++i) empty |= dims[i] <= 0;
    if (empty) {{
        KAIO_LOCK();
        if (slot->zeros == 0) {{
            err = cuMemAlloc(&slot->zeros, 16);
            if (err == CUDA_SUCCESS) err = cuMemsetD8(slot->zeros, 0, 16);
            if (err != CUDA_SUCCESS && slot->zeros != 0) {{
                cuMemFree(slot->zeros);
                slot->zeros = 0;
            }}
        }}
        base = slot->zeros;
        KAIO_UNLOCK();
        if (err != CUDA_SUCCESS) return err;
    }}
    if (base % 16u != 0) return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < rank; ++i) {{
        extents[i] = empty ? 1u : (cuuint64_t)dims[i];
        if (!empty && dims[i] > INT64_C({MAX_DIM})) return CUDA_ERROR_INVALID_VALUE;
        element_strides[i] = 1u;
    }}
    for (i = 0; i + 1 < rank; ++i) {{
        int64_t bytes = empty ? 16 : strides[i] * element_bytes;
        if (bytes <= 0 || bytes % 16 != 0 || bytes >= INT64_C({MAX_STRIDE})) return CUDA_ERROR_INVALID_VALUE;
        steps[i] = (cuuint64_t)bytes;
    }}
    return cuTensorMapEncodeTiled(map, type, rank, (void *)(uintptr_t)base, extents, steps, box, element_strides,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}}
"""


def c_name(param: str) -> str:
    """The C parameter name of a kernel argument (a C keyword or the launcher's own names get
    a trailing underscore)."""
    return param + "_" if param in _C_WORDS or param.startswith("kaio_") else param


def c_parameters(params: Sequence[KernelParam]) -> str:
    return ", ".join(("CUdeviceptr" if p.is_array else C_TYPES[p.dtype.name]) + " " + c_name(p.name) for p in params)


def header(name: str, kernel: str, params: Sequence[KernelParam], grid_rule: bool) -> str:
    guard = f"KAIO_AOT_{name.upper()}_H"
    rule = ("NULL: the export's grid rule" if grid_rule else "NULL is refused: this export has no grid rule")
    return f"""\
/* {name}.h: kernel `{kernel}`, exported by kaio {__version__} (kaio.aot.export). Do not edit. */
#ifndef {guard}
#define {guard}

#include <cuda.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

/* Launch `{kernel}` on `stream` of the current context. `grid`: x, y, z ({rule}).
   Arrays are device addresses; f16/bf16 scalars are their 16-bit patterns.
   Returns CUDA_ERROR_INVALID_VALUE for a null or misaligned array or arguments no variant
   was compiled for, CUDA_ERROR_NO_BINARY_FOR_GPU when no variant runs on the device, or
   the driver's error. */
CUresult {name}_launch(CUstream stream, const unsigned int grid[3]{", " if params else ""}{c_parameters(params)});

/* Unload the modules of every context this launcher loaded them in. */
CUresult {name}_unload(void);

#ifdef __cplusplus
}}
#endif

#endif /* {guard} */
"""


def _bytes_array(symbol: str, data: bytes) -> str:
    """A ``static const unsigned char`` array (string literals over 4095 characters are not
    portable C99)."""
    rows = [", ".join(str(b) for b in data[i:i + 24]) for i in range(0, len(data), 24)]
    body = ",\n    ".join(rows)
    return f"static const unsigned char {symbol}[{len(data)}] = {{\n    {body}\n}};\n"


def _runs_on(v: Variant) -> str:
    """The C condition (on ``sm``) that the variant's code runs on the device."""
    if v.arch.arch_specific:
        return f"sm == {v.arch.sm}"
    return f"sm >= {v.arch.sm}"


def _fits(v: Variant, params: Sequence[KernelParam]) -> str:
    ints = {p.name for p in params if not p.is_array}
    terms = [f"(int64_t){c_name(n)} % {d} == 0" for n, d in v.integer_facts if n in ints and d > 1]
    terms += [f"{c_name(n)} % {a}u == 0" for n, a in v.array_alignment.items() if a > 1]
    return " && ".join(terms) or "1"


def _tensor_map(i: int, t: TensorMapParam, params: Sequence[KernelParam]) -> str:
    names = {p.name: c_name(p.name) for p in params if not p.is_array}
    what = f"tensor map `{t.name}`"
    array = next(p for p in params if p.name == t.array)
    kind = "CU_TENSOR_MAP_DATA_TYPE_" + TMA_DATA_TYPES[array.dtype.name]
    dims = ", ".join(to_c(d, names, what=what) for d in t.dims)
    strides = ", ".join(to_c(s, names, what=what) for s in t.strides) or "0"
    box = ", ".join(str(b) for b in t.box)
    swizzle = "CU_TENSOR_MAP_SWIZZLE_" + ({0: "NONE"}.get(t.swizzle) or f"{t.swizzle}B")
    return f"""\
    {{
        const int64_t dims[{len(t.dims)}] = {{{dims}}};
        const int64_t strides[{max(len(t.strides), 1)}] = {{{strides}}};
        const cuuint32_t box[{len(t.box)}] = {{{box}}};
        err = kaio_tensor_map(&maps[{i}], slot, {kind}, {len(t.dims)}, {c_name(t.array)}, {array.dtype.nbytes},
                              dims, strides, box, {swizzle});
        if (err != CUDA_SUCCESS) return err;
    }}
"""


def _grid(v: Variant, params: Sequence[KernelParam], grid_rule: Sequence[str] | None) -> str:
    if grid_rule is None:
        return "        return CUDA_ERROR_INVALID_VALUE; /* no grid rule: the caller gives the grid */\n"
    names = {p.name: c_name(p.name) for p in params if not p.is_array}
    rule = [*grid_rule, "1", "1"][:3]
    exprs = [to_c(e, names, v.compiled.constexprs, what="the grid rule", calls=True) for e in rule]
    return f"""\
        const int64_t rule[3] = {{{", ".join(exprs)}}};
        if (rule[0] == 0 || rule[1] == 0 || rule[2] == 0) return CUDA_SUCCESS; /* nothing to do */
        if (rule[0] < 0 || rule[1] < 0 || rule[2] < 0 || rule[0] > {_MAX_GRID[0]} || rule[1] > {_MAX_GRID[1]}
            || rule[2] > {_MAX_GRID[2]}) return CUDA_ERROR_INVALID_VALUE;
        g[0] = (unsigned int)rule[0];
        g[1] = (unsigned int)rule[1];
        g[2] = (unsigned int)rule[2];
"""


def _variant_launch(name: str, i: int, v: Variant, grid_rule: Sequence[str] | None) -> str:
    c = v.compiled
    params = c.params
    count = len(params) + len(c.tensor_maps)
    pointers = [f"&{c_name(p.name)}" for p in params] + [f"&maps[{j}]" for j in range(len(c.tensor_maps))]
    maps = "".join(_tensor_map(j, t, params) for j, t in enumerate(c.tensor_maps))
    bx, by, bz = c.block_size
    return f"""\
/* variant {i}: {c.name} for {v.arch.name}, {dict(v.facts) or "no facts"} */
static CUresult {name}_launch_{i}(kaio_slot *slot, CUstream stream, const unsigned int *grid{", " if params else ""}{c_parameters(params)}) {{
    CUfunction function;
    CUresult err;
    unsigned int g[3];
{f"    CUtensorMap maps[{len(c.tensor_maps)}];{chr(10)}" if c.tensor_maps else ""}\
    void *params[{max(count, 1)}] = {{{", ".join(pointers) or "NULL"}}};
    err = kaio_function(slot, {i}, &function);
    if (err != CUDA_SUCCESS) return err;
    if (grid != NULL) {{
        g[0] = grid[0];
        g[1] = grid[1];
        g[2] = grid[2];
    }} else {{
{_grid(v, params, grid_rule)}    }}
{maps}    return cuLaunchKernel(function, g[0], g[1], g[2], {bx}, {by}, {bz}, {c.dynamic_shared_bytes}u, stream,
                          {"params" if count else "NULL"}, NULL);
}}
"""


def source(name: str, variants: Sequence[Variant], images: Mapping[int, Sequence[bytes | None]],
           grid_rule: Sequence[str] | None) -> str:  # fmt: skip
    """``NAME.c``; ``images[i]``: (PTX, cubin or None) of variant i."""
    params = variants[0].compiled.params
    n = len(variants)
    blobs = ""
    table = []
    for i, v in enumerate(variants):
        ptx, cubin = images[i]
        assert ptx is not None
        blobs += _bytes_array(f"kaio_ptx_{i}", ptx + b"\0")
        if cubin is not None:
            blobs += _bytes_array(f"kaio_cubin_{i}", cubin)
        table.append(
            f'    {{"{v.compiled.name}", {v.arch.sm}, {int(v.arch.arch_specific)}, kaio_ptx_{i}, '
            f'{f"kaio_cubin_{i}" if cubin is not None else "NULL"}, {v.compiled.dynamic_shared_bytes}u}}'
        )
    table_text = ",\n".join(table)
    nulls = " || ".join(f"{c_name(p.name)} == 0" for p in params if p.is_array)
    dispatch = "".join(f"""\
    if ({_runs_on(v).replace("sm", "slot->sm")}) {{
        runnable = 1;
        if ({_fits(v, params)}) return {name}_launch_{i}(slot, stream, grid{"".join(", " + c_name(p.name) for p in params)});
    }}
""" for i, v in enumerate(variants))
    launches = "\n".join(_variant_launch(name, i, v, grid_rule) for i, v in enumerate(variants))
    maps = any(v.compiled.tensor_maps for v in variants)
    return f"""\
/* {name}.c: kernel `{variants[0].compiled.name}`, exported by kaio {__version__} (kaio.aot.export):
   {n} variant(s), {", ".join(sorted({v.arch.name for v in variants}))}. Do not edit. */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "{name}.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(_WIN32)
#include <windows.h>
static SRWLOCK kaio_lock = SRWLOCK_INIT;
#define KAIO_LOCK() AcquireSRWLockExclusive(&kaio_lock)
#define KAIO_UNLOCK() ReleaseSRWLockExclusive(&kaio_lock)
#else
#include <pthread.h>
static pthread_mutex_t kaio_lock = PTHREAD_MUTEX_INITIALIZER;
#define KAIO_LOCK() pthread_mutex_lock(&kaio_lock)
#define KAIO_UNLOCK() pthread_mutex_unlock(&kaio_lock)
#endif

#define KAIO_VARIANTS {n}
#define KAIO_SLOTS {SLOTS}

{blobs}
typedef struct {{
    const char *entry;
    int sm;
    int arch_specific; /* an `a` target: runs on that sm only */
    const unsigned char *ptx;
    const unsigned char *cubin; /* NULL: PTX only */
    unsigned int dynamic_shared_bytes;
}} kaio_variant;

static const kaio_variant kaio_variants[KAIO_VARIANTS] = {{
{table_text}
}};

typedef struct {{
    CUcontext context; /* NULL: a free slot */
    int sm;
    CUdeviceptr zeros; /* 16 zero bytes: what the tensor map of an empty tensor reads */
    CUmodule module[KAIO_VARIANTS];
    CUfunction function[KAIO_VARIANTS];
}} kaio_slot;

static kaio_slot kaio_slots[KAIO_SLOTS];

{helpers_for(launches)}
/* The slot of the current context (a new one on its first launch). */
static CUresult kaio_current_slot(kaio_slot **out) {{
    CUcontext context = NULL;
    CUdevice device;
    CUresult err;
    int i, major = 0, minor = 0;
    kaio_slot *slot = NULL;
    err = cuCtxGetCurrent(&context);
    if (err != CUDA_SUCCESS) return err;
    if (context == NULL) return CUDA_ERROR_INVALID_CONTEXT;
    KAIO_LOCK();
    for (i = 0; i < KAIO_SLOTS; ++i) {{
        if (kaio_slots[i].context == context) {{
            *out = &kaio_slots[i];
            KAIO_UNLOCK();
            return CUDA_SUCCESS;
        }}
        if (kaio_slots[i].context == NULL && slot == NULL) slot = &kaio_slots[i];
    }}
    err = slot == NULL ? CUDA_ERROR_OUT_OF_MEMORY : cuCtxGetDevice(&device);
    if (err == CUDA_SUCCESS) err = cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
    if (err == CUDA_SUCCESS) err = cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
    if (err == CUDA_SUCCESS) {{
        memset(slot, 0, sizeof *slot);
        slot->context = context;
        slot->sm = major * 10 + minor;
        *out = slot;
    }}
    KAIO_UNLOCK();
    return err;
}}

/* Whether the device of `sm` runs a cubin of variant `v` (same major, same or newer minor;
   an `a` target exactly its own sm). */
static int kaio_cubin_runs(const kaio_variant *v, int sm) {{
    if (v->arch_specific) return sm == v->sm;
    return sm / 10 == v->sm / 10 && sm >= v->sm;
}}

/* Load variant `i` in `slot`'s context (the caller holds the lock). */
static CUresult kaio_load(kaio_slot *slot, int i) {{
    const kaio_variant *v = &kaio_variants[i];
    CUmodule module = NULL;
    CUfunction function = NULL;
    CUresult err = CUDA_ERROR_NO_BINARY_FOR_GPU;
    if (v->cubin != NULL && kaio_cubin_runs(v, slot->sm)) err = cuModuleLoadData(&module, v->cubin);
    if (err != CUDA_SUCCESS) err = cuModuleLoadData(&module, v->ptx); /* the driver JIT-compiles it */
    if (err != CUDA_SUCCESS) return err;
    err = cuModuleGetFunction(&function, module, v->entry);
    if (err == CUDA_SUCCESS && v->dynamic_shared_bytes > {DEFAULT_SHARED_LIMIT}u)
        err = cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)v->dynamic_shared_bytes);
    if (err != CUDA_SUCCESS) {{
        cuModuleUnload(module);
        return err;
    }}
    slot->module[i] = module;
    slot->function[i] = function;
    return CUDA_SUCCESS;
}}

static CUresult kaio_function(kaio_slot *slot, int i, CUfunction *out) {{
    CUresult err = CUDA_SUCCESS;
    KAIO_LOCK();
    if (slot->function[i] == NULL) err = kaio_load(slot, i);
    *out = slot->function[i];
    KAIO_UNLOCK();
    return err;
}}

{_TENSOR_MAP_HELPER if maps else ""}
{launches}
CUresult {name}_launch(CUstream stream, const unsigned int grid[3]{", " if params else ""}{c_parameters(params)}) {{
    kaio_slot *slot = NULL;
    CUresult err;
    int runnable = 0;
{f"    if ({nulls}) return CUDA_ERROR_INVALID_VALUE;" if nulls else ""}
    err = kaio_current_slot(&slot);
    if (err != CUDA_SUCCESS) return err;
{dispatch}    return runnable ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NO_BINARY_FOR_GPU;
}}

CUresult {name}_unload(void) {{
    CUresult first = CUDA_SUCCESS, err;
    CUcontext previous;
    int s, i;
    KAIO_LOCK();
    for (s = 0; s < KAIO_SLOTS; ++s) {{
        kaio_slot *slot = &kaio_slots[s];
        if (slot->context == NULL) continue;
        err = cuCtxPushCurrent(slot->context);
        if (err == CUDA_SUCCESS) {{
            for (i = 0; i < KAIO_VARIANTS; ++i) {{
                if (slot->module[i] != NULL) {{
                    err = cuModuleUnload(slot->module[i]);
                    if (first == CUDA_SUCCESS) first = err;
                }}
            }}
            if (slot->zeros != 0) {{
                err = cuMemFree(slot->zeros);
                if (first == CUDA_SUCCESS) first = err;
            }}
            err = cuCtxPopCurrent(&previous);
        }}
        if (first == CUDA_SUCCESS) first = err;
        memset(slot, 0, sizeof *slot);
    }}
    KAIO_UNLOCK();
    return first;
}}
"""
