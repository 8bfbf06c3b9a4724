"""``NAME.rs``: the C launcher's functions for Rust, over the raw driver types (no cudarc).

The module declares the launcher's two C functions and wraps them in ``launch`` / ``unload``
returning ``Result<(), CUresult>``; build ``NAME.c`` into the crate (``cc::Build`` in
``build.rs``) and link ``cuda`` (see docs/aot.md)."""

from __future__ import annotations

from collections.abc import Sequence

from kaio import __version__
from kaio.compiled import KernelParam

RUST_TYPES = {
    "f32": "f32", "f64": "f64", "i8": "i8", "u8": "u8", "i16": "i16", "u16": "u16", "i32": "i32",
    "u32": "u32", "i64": "i64", "u64": "u64", "bool": "u8", "f16": "u16", "bf16": "u16",
    "f8e4m3": "u8", "f8e5m2": "u8",
}  # fmt: skip
_RUST_WORDS = set("""as break const continue crate else enum extern false fn for if impl in let loop match
mod move mut pub ref return self Self static struct super trait true type unsafe use where while async
await dyn abstract become box do final macro override priv typeof unsized virtual yield try stream grid""".split())


def _name(param: str) -> str:
    return param + "_" if param in _RUST_WORDS else param


def rust_module(name: str, kernel: str, params: Sequence[KernelParam]) -> str:
    typed = "".join(f", {_name(p.name)}: {'CUdeviceptr' if p.is_array else RUST_TYPES[p.dtype.name]}" for p in params)
    passed = "".join(f", {_name(p.name)}" for p in params)
    return f"""\
//! `{name}`: kernel `{kernel}`, exported by kaio {__version__} (kaio.aot.export). Do not edit.
//! Calls the C launcher `{name}.c` (build it into the crate and link libcuda).
#![allow(non_camel_case_types, dead_code)]

use std::os::raw::c_void;

pub type CUresult = i32;
pub type CUstream = *mut c_void;
pub type CUdeviceptr = u64;
pub const CUDA_SUCCESS: CUresult = 0;

extern "C" {{
    fn {name}_launch(stream: CUstream, grid: *const u32{typed}) -> CUresult;
    fn {name}_unload() -> CUresult;
}}

/// Launches `{kernel}` on `stream` of the current context; `grid: None` uses the export's grid
/// rule. Arrays are device addresses; f16/bf16 scalars their bit patterns.
///
/// # Safety
/// The addresses must point to device memory of the sizes the kernel reads and writes.
pub unsafe fn launch(stream: CUstream, grid: Option<[u32; 3]>{typed}) -> Result<(), CUresult> {{
    let dims = grid.unwrap_or([0, 0, 0]);
    let grid_ptr = if grid.is_some() {{ dims.as_ptr() }} else {{ std::ptr::null() }};
    match {name}_launch(stream, grid_ptr{passed}) {{
        CUDA_SUCCESS => Ok(()),
        err => Err(err),
    }}
}}

/// Unloads the modules the launcher loaded, in every context.
///
/// # Safety
/// No launch of `{kernel}` may run concurrently.
pub unsafe fn unload() -> Result<(), CUresult> {{
    match {name}_unload() {{
        CUDA_SUCCESS => Ok(()),
        err => Err(err),
    }}
}}
"""
