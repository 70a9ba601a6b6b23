"""envinfo's machine facts for the profile's env part: parsers on fixed text, live keys."""

from __future__ import annotations

from pathlib import Path

from distlab import envinfo


def test_cpu_model_and_memory_parse_proc_files() -> None:
    assert envinfo.cpu_model("processor : 0\nmodel name\t: AMD EPYC 7763 64-Core\n") == \
        "AMD EPYC 7763 64-Core"
    assert envinfo.memory_bytes("MemTotal:       16384 kB\nMemFree: 1 kB\n") == 16384 * 1024
    assert envinfo.memory_bytes("nothing here") is None


def test_pcie_query_rows() -> None:
    text = "0, 00000000:18:00.0, 4, 5, 16, 16\n1, 00000000:2A:00.0, 3, 5, 8, 16\nbad line\n"
    rows = envinfo.parse_pcie_query(text)
    assert [(r["gpu"], r["gen"], r["width"], r["gen_max"]) for r in rows] == \
        [(0, 4, 16, 5), (1, 3, 8, 5)]


def test_sysfs_links_reads_only_nvidia_display_devices(tmp_path: Path) -> None:
    def dev(name: str, vendor: str, cls: str, speed: str, width: str) -> None:
        d = tmp_path / name
        d.mkdir()
        for f, v in (("vendor", vendor), ("class", cls), ("current_link_speed", speed),
                     ("current_link_width", width)):
            (d / f).write_text(v + "\n")
    dev("0000:18:00.0", "0x10de", "0x030200", "16.0 GT/s PCIe", "16")
    dev("0000:19:00.0", "0x8086", "0x020000", "8.0 GT/s PCIe", "8")      # a NIC: ignored
    rows = envinfo._sysfs_links(tmp_path)
    assert [(r["bus_id"], r["gen"], r["width"]) for r in rows] == [("0000:18:00.0", 4, 16)]


def test_machine_facts_keys_and_no_gpu_note() -> None:
    import torch

    facts = envinfo.machine_facts()
    assert {"cpu_model", "cpu_cores", "memory_bytes", "torch", "cuda_runtime", "nccl", "driver",
            "gpus", "gpu_topology", "pcie_links", "backends", "notes"} <= set(facts)
    assert facts["torch"] == torch.__version__
    if not torch.cuda.is_available():
        assert facts["gpus"] == [] and any(n.startswith("no GPU") for n in facts["notes"])
    else:
        assert len(facts["gpus"]) == torch.cuda.device_count()
        assert not any(n.startswith("no GPU") for n in facts["notes"])
