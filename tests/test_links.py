"""The one link table: every link has a source; PCIe arithmetic; presets take their beta from it."""

from __future__ import annotations

import pytest

from distlab.collectives.model.presets import PRESETS
from distlab.links import LINKS, fraction_of_peak, get_link, link_from_pcie, pcie_gbps


def test_links_have_sources_and_pcie_arithmetic() -> None:
    assert LINKS["pcie4_x16"].gbps == pytest.approx(31.5, rel=0.01)
    assert LINKS["pcie5_x16"].gbps == pytest.approx(2 * LINKS["pcie4_x16"].gbps)
    assert LINKS["pcie3_x16"].gbps == pytest.approx(LINKS["pcie4_x16"].gbps / 2)
    assert all(link.source for link in LINKS.values())
    assert link_from_pcie(4, 16).gbps == pytest.approx(LINKS["pcie4_x16"].gbps)
    assert link_from_pcie(5, 8).gbps == pytest.approx(pcie_gbps(5, 16) / 2)
    assert fraction_of_peak(LINKS["pcie3_x16"].gbps / 2, LINKS["pcie3_x16"]) == pytest.approx(0.5)
    assert get_link("nvlink4_h100").seconds_per_byte == pytest.approx(1 / 450e9)


@pytest.mark.parametrize("call", [lambda: link_from_pcie(2, 16), lambda: link_from_pcie(4, 0),
                                  lambda: get_link("pcie4x16"), lambda: pcie_gbps(4, -1),
                                  lambda: fraction_of_peak(-1.0, LINKS["pcie4_x16"])])
def test_bad_link_arguments_raise(call) -> None:
    with pytest.raises(ValueError):
        call()


def test_hardware_presets_use_the_link_table_keys() -> None:
    for key, preset in PRESETS.items():
        assert preset.link == key and key in LINKS
        assert preset.bandwidth_gbps <= LINKS[key].gbps * (1 + 1e-12)
        assert LINKS[key].source in preset.source


def test_a_nic_rate_is_gb_per_s_within_one_range() -> None:
    from distlab.links import NIC_GBPS_MAX, check_nic_gbps

    assert check_nic_gbps(50) == 50.0 and check_nic_gbps(NIC_GBPS_MAX) == NIC_GBPS_MAX
    with pytest.raises(ValueError, match=r"got 400: a 400 Gb/s NIC is 50 GB/s"):
        check_nic_gbps(400)
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="one NIC port's GB/s"):
            check_nic_gbps(bad)
    with pytest.raises(TypeError, match="my_nic"):
        check_nic_gbps("50", "my_nic")
