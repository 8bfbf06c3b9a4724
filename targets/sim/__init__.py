"""CPU simulator of PTX: runs the PTX *text* kaio (or nvcc, or Triton) emits, on numpy.

Contract with the runtime (``kaio.Device("sim")``)::

    from kaio.targets.sim import Simulator

    sim = Simulator()                      # one per simulated device; owns its global memory
    addr = sim.memory.alloc(nbytes)        # 256-byte aligned, never 0, guard gap after it
    sim.memory.write(addr, host_bytes)     # bytes or ndarray; must lie inside one allocation
    sim.memory.read(addr, nbytes)          # -> np.ndarray[uint8] (a copy)
    sim.memory.free(addr)
    sim.memory.reset()                     # free everything (loaded modules must be reloaded)

    module = sim.load(ptx_text)            # parse once; a syntax error or an unknown
                                           # instruction -> KaioLaunchError (log names the line)
    module.entries["saxpy"].params         # [(name, ptx_type, nbytes), ...] from the .entry
    report = module.launch("saxpy", grid=(gx, gy, gz), block=(bx, by, bz),
                           params=[b"...", ...],    # raw little-endian bytes, one per .param
                           shared_bytes=0,          # dynamic (.extern) shared memory
                           profile=False)           # True -> instruction mix, sectors, bank conflicts

``Simulator(race_check=True)`` (or ``sim.race_check = True``) also reports shared-memory races
between barriers as ``KaioMemoryError("shared memory race ...")``.

Faults raise ``KaioMemoryError`` (out of bounds, misaligned, uninitialized shared read) or
``KaioSimError`` (deadlock, a barrier reached by part of a block, a warp-synchronous
instruction on diverged lanes, trap, endless loop). See docs/simulator.md.
"""

from .memory import GlobalMemory
from .program import EntryInfo
from .report import LaunchReport, ProfileReport
from .simulator import SimModule, Simulator

__all__ = ["Simulator", "SimModule", "GlobalMemory", "EntryInfo", "LaunchReport", "ProfileReport"]
