"""Devices, buffers, launches, caches: one API over the CUDA driver and the CPU simulator."""
