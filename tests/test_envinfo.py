"""environment_report says what torch says: versions, cores, CUDA devices, usable backends."""

from __future__ import annotations

import os
import platform
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from distlab.envinfo import CudaDevice, EnvironmentReport, environment_report


def test_report_matches_this_machine() -> None:
    r = environment_report()
    assert r.python == platform.python_version() and r.torch_version == torch.__version__
    assert r.cpu_cores == os.cpu_count()
    assert len(r.cuda_devices) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert set(r.backends) == {"gloo", "nccl"}
    assert r.backends["gloo"][0] == (dist.is_available() and dist.is_gloo_available())
    nccl_usable = dist.is_available() and dist.is_nccl_available() and bool(r.cuda_devices)
    assert r.backends["nccl"][0] == nccl_usable
    text = str(r).splitlines()
    assert text[0] == f"python        {platform.python_version()}"
    assert text[1] == f"torch         {torch.__version__}"
    assert text[2] == f"cpu cores     {os.cpu_count()}"


def _fake_gpus(monkeypatch, n: int, nccl: bool) -> None:
    props = [SimpleNamespace(name=f"Fake GPU {i}", total_memory=(80 + i) * 2**30, major=9,
                             minor=i) for i in range(n)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props[i])
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: nccl)


def test_devices_and_nccl_with_gpus(monkeypatch) -> None:
    _fake_gpus(monkeypatch, 2, nccl=True)
    r = environment_report()
    assert r.cuda_devices == [CudaDevice(0, "Fake GPU 0", 80 * 2**30, (9, 0)),
                              CudaDevice(1, "Fake GPU 1", 81 * 2**30, (9, 1))]
    assert r.backends["nccl"] == (True, "up to 2 local ranks (one per GPU)")
    lines = r.lines()
    assert "cuda:0        Fake GPU 0, 80.0 GiB, sm_90" in lines
    assert "cuda:1        Fake GPU 1, 81.0 GiB, sm_91" in lines
    assert "nccl          usable: up to 2 local ranks (one per GPU)" in lines


@pytest.mark.parametrize("gpus, nccl, usable, why", [
    (0, True, False, "built, but no CUDA device"),
    (0, False, False, "not in this torch build (CPU wheel?)"),
    (1, False, False, "not in this torch build (CPU wheel?)"),
    (1, True, True, "up to 1 local ranks (one per GPU)"),
])
def test_nccl_verdict(monkeypatch, gpus, nccl, usable, why) -> None:
    _fake_gpus(monkeypatch, gpus, nccl)
    r = environment_report()
    assert r.backends["nccl"] == (usable, why)
    assert ("cuda          no CUDA device visible to torch" in r.lines()) == (gpus == 0)


def test_without_torch_distributed(monkeypatch) -> None:
    monkeypatch.setattr(dist, "is_available", lambda: False)
    r = environment_report()
    assert r.backends == {"gloo": (False, "torch.distributed is not built"),
                          "nccl": (False, "torch.distributed is not built")}
    assert "gloo          not usable: torch.distributed is not built" in r.lines()


def test_report_is_plain_data() -> None:
    r = EnvironmentReport("3.11.0", "2.13.0", 4)
    assert r.cuda_devices == [] and r.backends == {}
    assert str(r) == "\n".join(r.lines()) and len(r.lines()) == 4


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU: torch.cuda.is_available() is False here")
def test_real_cuda_devices_are_listed() -> None:
    r = environment_report()
    assert [d.name for d in r.cuda_devices] == [torch.cuda.get_device_name(i)
                                                for i in range(torch.cuda.device_count())]
    assert r.cuda_devices and all(d.total_memory_bytes > 2**30 for d in r.cuda_devices)
    assert r.backends["nccl"][0] == dist.is_nccl_available()


class _Installed:
    """A stand-in for an installed distribution: its ``direct_url.json`` text (or none)."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return self.text


def test_source_checkout_is_this_repository_under_the_projects_install() -> None:
    """``make install`` installs distlab editable from this checkout (tools/install.sh)."""
    from distlab.envinfo import committed_results, source_checkout
    from helpers.paths import RESULTS, ROOT

    assert source_checkout() == ROOT
    assert committed_results("gpu-h200-2026-11-27-fit") == RESULTS / "gpu-h200-2026-11-27-fit"
    assert committed_results("no-such-run") is None


@pytest.mark.parametrize(("text", "found"), [
    ('{"url": "file:///HERE", "dir_info": {"editable": true}}', True),
    ('{"url": "file://localhost/HERE", "dir_info": {"editable": true}}', True),
    ('{"url": "file:///HERE", "dir_info": {}}', False),                 # a plain local install
    ('{"url": "https://example.org/distlab.whl", "archive_info": {}}', False),
    ('{"url": "file:///HERE/gone", "dir_info": {"editable": true}}', False),
    ("not json", False),
    (None, False),                                                       # a registry install
])
def test_source_checkout_reads_the_install_record(monkeypatch, tmp_path, text, found) -> None:
    from importlib import metadata

    from distlab import envinfo

    (tmp_path / "results" / "run").mkdir(parents=True)
    record = None if text is None else text.replace("/HERE", str(tmp_path))
    monkeypatch.setattr(envinfo.metadata, "distribution", lambda name: _Installed(record))
    assert envinfo.source_checkout() == (tmp_path if found else None)
    assert envinfo.committed_results("run") == (tmp_path / "results" / "run" if found else None)

    def missing(name: str) -> None:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(envinfo.metadata, "distribution", missing)
    assert envinfo.source_checkout() is None


@pytest.mark.parametrize("name", ["", "a/b", "..", "a\\b"])
def test_committed_results_takes_one_folder_name(name) -> None:
    from distlab.envinfo import committed_results

    with pytest.raises(ValueError, match="one folder's name"):
        committed_results(name)
    with pytest.raises(TypeError, match="must be a str"):
        committed_results(3)
