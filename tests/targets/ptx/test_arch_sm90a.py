"""The sm_90a target: an "a" (arch-specific) target beside sm_90, known to the arch table, the
simulator device and the target checks."""

import pytest

import kaio
from kaio.dialects.ptx import Requirement
from kaio.errors import KaioTargetError
from kaio.targets.ptx.arch import get_arch


def test_sm90a_is_in_the_arch_table():
    for spelling in ("sm_90a", "90a", "SM90a"):
        arch = get_arch(spelling)
        assert (arch.name, arch.sm, arch.min_ptx, arch.arch_specific) == ("sm_90a", 90, (8, 0), True)
    assert not get_arch("sm_90").arch_specific
    with pytest.raises(KaioTargetError, match="unknown GPU architecture"):
        get_arch("sm_89a")


def test_arch_specific_requirements_need_the_exact_a_target():
    wgmma = Requirement("wgmma.mma_async", 90, (8, 0), arch_specific=True)
    assert wgmma.met_by(90, True)
    assert not wgmma.met_by(90, False) and not wgmma.met_by(100, True)
    assert "needs sm_90a (arch-specific); the target is sm_90" in str(wgmma.error("sm_90"))
    assert Requirement("mbarrier.try_wait.parity", 90, (7, 8)).met_by(90, True)


def test_simulator_device_compiles_for_its_own_a_target():
    device = kaio.Device("sim:sm_90a")
    assert (device.arch, device.compile_arch, device.sm) == ("sm_90a", "sm_90a", 90)
