"""Fixtures for the real-browser tests: ``lab`` (a live JupyterLab) and ``page`` (Chromium).

- JupyterLab listens on 127.0.0.1 on a free port with a random token, serves ``notebooks/``, and
  runs with autosave off and its own empty settings/workspace folders, so a test never writes to
  the committed notebooks (checked at teardown). A kernel shut down gets ``KERNEL_SHUTDOWN_WAIT_S``
  to exit before the server stops it.
- Chromium is ``$DISTLAB_CHROMIUM`` or ``chromium`` on PATH (Debian: ``apt-get install -y
  chromium``). In CI (``CI`` set) a missing browser fails the run; elsewhere the tests skip and
  say how to install it. Playwright's own browser download is never used.
- Every test gets a fresh page; a failing test saves a screenshot under test-artifacts/browser/.
- One JupyterLab server serves every browser test of the session (starting one per module cost
  seconds each); after every test all its kernels are shut down through the REST API (and waited
  for), so each notebook starts on a fresh kernel and no kernel outlives its test. The browser
  lives for one test module. Leak checks elsewhere compare child processes before and after their
  body, so the idle server (started earlier) is not counted as a leak.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browser.lab import Lab, save_screenshot
from helpers.chromium import chromium_executable

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]
#: Seconds the server gives a kernel to exit after its shutdown request: after half of it the
#: server terminates the kernel's process group, after all of it kills it (jupyter_client's
#: default is 5). A kernel that ran ranks through ``distlab.launch`` has two children ipykernel's
#: own shutdown waits for in vain: multiprocessing's resource tracker (it ignores SIGTERM) and the
#: fork server (SIGTERM ends it, but nobody reaps it); the server then terminates the kernel
#: anyway, after 2.5 s at the default, for every such notebook.
KERNEL_SHUTDOWN_WAIT_S = 1.0
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    "@jupyterlab/apputils-extension:notification": {"checkForUpdates": False,
                                                    "fetchNews": "false"},
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.browser)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.glob("*.ipynb")}


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = chromium_executable()
    if path is None:
        message = ("Chromium not found: install it with `apt-get install -y chromium` (Debian/"
                   "Ubuntu) or set DISTLAB_CHROMIUM=/path/to/chromium")
        if os.environ.get("CI"):
            pytest.fail("CI requires the real-browser test; " + message, pytrace=False)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def lab(chromium_path: str, pytestconfig: pytest.Config) -> Iterator[Lab]:
    """A JupyterLab server on 127.0.0.1 serving notebooks/, stopped (with its kernels) at the
    end; it carries this run's config, which nbval's output comparison reads."""
    with serve_lab(NOTEBOOKS) as running:
        yield dataclasses.replace(running, config=pytestconfig)


@contextlib.contextmanager
def serve_lab(root: Path) -> Iterator[Lab]:
    """Run a JupyterLab server on 127.0.0.1 serving ``root`` (settings as described above) for
    the ``with`` block; fails if the block changed a notebook under ``root``."""
    token = secrets.token_hex(16)
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="distlab-lab-") as tmp:
        settings = Path(tmp) / "settings"
        for plugin_id, values in LAB_SETTINGS.items():  # @scope/extension:plugin -> file path
            extension, plugin = plugin_id.split(":")
            target = settings / extension / f"{plugin}.jupyterlab-settings"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(values))
        env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings),
                   JUPYTER_CONFIG_DIR=str(Path(tmp) / "config"),
                   JUPYTER_RUNTIME_DIR=str(Path(tmp) / "runtime"))
        log = open(Path(tmp) / "lab.log", "w+")
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
               "--ServerApp.port_retries=0", "--allow-root", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
               f"--LabApp.user_settings_dir={settings}",
               f"--LabApp.workspaces_dir={Path(tmp) / 'workspaces'}",
               f"--KernelManager.shutdown_wait_time={KERNEL_SHUTDOWN_WAIT_S}"]
        before = _digest(root)
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{log.read()[-3000:]}")
                try:
                    with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        log.seek(0)
                        pytest.fail(f"JupyterLab did not start in 90 s:\n{log.read()[-3000:]}")
                    time.sleep(0.5)
            yield Lab(base_url=base, token=token, root_dir=root)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            log.close()
        assert _digest(root) == before, f"the browser test modified a notebook under {root}"


def _shutdown_kernels(lab: Lab) -> None:
    """DELETE every running kernel of ``lab`` (each call returns once that kernel is gone)."""
    with urllib.request.urlopen(lab.url("api/kernels"), timeout=30) as r:
        kernels = json.load(r)
    for k in kernels:
        req = urllib.request.Request(lab.url(f"api/kernels/{k['id']}"), method="DELETE")
        with urllib.request.urlopen(req, timeout=60):
            pass


@pytest.fixture(autouse=True)
def _no_kernel_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that used the lab, shut its kernels down (the server itself lives on)."""
    yield
    if "lab" in request.fixturenames:
        _shutdown_kernels(request.getfixturevalue("lab"))


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    try:
        yield pg
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            try:
                save_screenshot(pg, f"FAILED_{request.node.name}")
            except Exception:  # the page may be gone; the failure itself is what matters
                pass
        # Shut this test's kernels down so the next notebook starts on a fresh one.
        try:
            pg.evaluate("() => window.jupyterapp && "
                        "window.jupyterapp.serviceManager.sessions.shutdownAll()")
        except Exception:
            pass
        context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]
