"""The check that a notebook opens in JupyterLab unmodified (no dirty dot on its tab), and stays
so through a kernel restart and code run in the kernel outside the notebook's cells.

JupyterLab marks a notebook modified when what it holds differs from the file; on open it writes
the connected kernel's ``kernelspec`` and ``language_info`` into the metadata, so the committed
metadata must already be exactly that (``tools/nbtool.py`` cleans to that form). The check also
asserts the stronger fact: what JupyterLab's Save would write (the model through nbformat, as the
server saves it) is the committed file, byte for byte.

:func:`browser.lab.run_notebook_and_check` runs it on every notebook it opens, before Run All;
``tests/browser/test_browser_clean_open.py`` runs it on the notebooks no browser test runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat

from browser.lab import save_screenshot

__all__ = ["check_opens_unmodified"]

#: Resolves once JupyterLab has written the kernel's kernelspec and language_info into the model.
_SETTLED = """async () => {
    const w = window.jupyterapp.shell.currentWidget;
    const kernel = w.sessionContext.session.kernel;
    const info = (await kernel.info).language_info;
    const spec = await kernel.spec;
    const same = (a, b) => JSON.stringify(a, Object.keys(a || {}).sort())
                           === JSON.stringify(b, Object.keys(b || {}).sort());
    for (let i = 0; i < 200; i++) {
        const li = w.context.model.getMetadata('language_info');
        const ks = w.context.model.getMetadata('kernelspec');
        if (same(li, info) && ks && ks.display_name === spec.display_name) return true;
        await new Promise(r => setTimeout(r, 50));
    }
    return false;
}"""

_STATE = """() => {
    const w = window.jupyterapp.shell.currentWidget;
    const tabs = [...document.querySelectorAll('.lm-DockPanel-tabBar .lm-TabBar-tab')].filter(
        t => (t.querySelector('.lm-TabBar-tabLabel') || {}).textContent === w.title.label);
    return {dirty: w.context.model.dirty, tabs: tabs.length,
            tab_dirty: tabs.some(t => t.classList.contains('jp-mod-dirty')),
            model: JSON.stringify(w.context.model.toJSON())};  // as sent on Save
}"""


#: Restart the kernel (no dialog), wait for idle, then run code in it outside any cell (what a
#: console, the inspector or a completer does).
_RESTART_AND_EXECUTE = """async () => {
    const w = window.jupyterapp.shell.currentWidget;
    await w.sessionContext.session.kernel.restart();
    const kernel = w.sessionContext.session.kernel;
    const future = kernel.requestExecute({code: 'x_clean_open = 1 + 1', silent: false});
    await future.done;
    for (let i = 0; i < 200 && kernel.status !== 'idle'; i++)
        await new Promise(r => setTimeout(r, 50));
    await new Promise(r => setTimeout(r, 1000));  // let any late metadata update land
    return kernel.status;
}"""


def _state(page: Any) -> dict[str, Any]:
    """The open notebook's dirty flags, its tab count and its model as Save would send it."""
    state = dict(page.evaluate(_STATE))
    state["model"] = json.loads(state["model"])
    return state


def _saved_text(model: dict[str, Any]) -> str:
    """What JupyterLab's Save would put in the file: the server runs the model through
    nbformat (dropping transient fields such as cells' ``trusted``) and ``nbformat.write``."""
    nb = nbformat.from_dict(model)
    nbformat.v4.rwbase.strip_transient(nb)
    text = nbformat.writes(nb, version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"


def _differences(model: dict[str, Any], disk: dict[str, Any]) -> list[str]:
    """Readable list of what the model holds that the file does not (metadata and cells)."""
    found = [f"metadata.{k}: file {json.dumps(disk['metadata'].get(k))} -> JupyterLab "
             f"{json.dumps(model['metadata'].get(k))}"
             for k in sorted(set(model["metadata"]) | set(disk["metadata"]))
             if model["metadata"].get(k) != disk["metadata"].get(k)]
    for key in ("nbformat", "nbformat_minor"):
        if model.get(key) != disk.get(key):
            found.append(f"{key}: file {disk.get(key)} -> JupyterLab {model.get(key)}")
    if len(model["cells"]) != len(disk["cells"]):
        found.append(f"cells: file {len(disk['cells'])} -> JupyterLab {len(model['cells'])}")
    for i, (m, d) in enumerate(zip(model["cells"], disk["cells"], strict=False)):
        m, d = nbformat.from_dict(m), nbformat.from_dict(d)
        m.metadata.pop("trusted", None)
        for key in sorted(set(m) | set(d)):
            mv, dv = m.get(key), d.get(key)
            if key == "source" or key == "outputs":
                mv, dv = json.loads(json.dumps(mv)), json.loads(json.dumps(dv))
                if key == "source":
                    mv, dv = ("".join(v) if isinstance(v, list) else v for v in (mv, dv))
            if mv != dv:
                found.append(f"cell {i} {key}: file {json.dumps(dv)[:120]} -> JupyterLab "
                             f"{json.dumps(mv)[:120]}")
    return found


def check_opens_unmodified(page: Any, folder: Path, name: str) -> str | None:
    """Assert that ``name`` (under ``folder``), just opened in ``page``, is unmodified and stays
    so through a kernel restart and code run outside its cells. Returns None, or the reason the
    dirty flag itself could not be asserted (the file was cleaned under another Python, the one
    field no committed form can match on every machine; the rest is still compared)."""
    path = folder / name
    committed = path.read_text(encoding="utf-8")
    assert page.evaluate(_SETTLED), f"{name}: JupyterLab never wrote the kernel's metadata"
    state = _state(page)
    assert state["tabs"] == 1, f"{name}: {state['tabs']} tabs carry its title"
    disk = nbformat.reads(committed, as_version=nbformat.NO_CONVERT)
    stored = disk.metadata.get("language_info", {}).get("version")
    running = state["model"]["metadata"]["language_info"].get("version")
    if stored != running and stored is not None:
        # The one field no committed form can match on every machine (tools/nbtool.py says
        # why): compare the rest, then say why the dirty flag itself is not asserted here.
        disk.metadata.language_info.version = running
        assert _saved_text(state["model"]) == _saved_text(disk), (
            f"{name}: beyond the Python version, JupyterLab changes:\n"
            + "\n".join(_differences(state["model"], disk)))
        return (f"{name} was cleaned under Python {stored}, this lab's kernel runs {running}: "
                "JupyterLab marks it modified for that field alone")
    diffs = _differences(state["model"], disk)
    if state["dirty"] or state["tab_dirty"]:
        save_screenshot(page, f"clean_open_{Path(name).stem}_dirty")
    assert not state["dirty"] and not state["tab_dirty"], (
        f"{name} opens marked modified (model dirty {state['dirty']}, tab dirty "
        f"{state['tab_dirty']}); JupyterLab changed:\n" + "\n".join(diffs))
    assert _saved_text(state["model"]) == committed, (
        f"{name}: Save would rewrite the file:\n"
        + ("\n".join(diffs) or "formatting only (indent, key order, trailing newline)"))

    assert page.evaluate(_RESTART_AND_EXECUTE) == "idle"
    after = _state(page)
    assert not after["dirty"] and not after["tab_dirty"], (
        f"{name} became modified after a kernel restart and code run outside its cells:\n"
        + "\n".join(_differences(after["model"], disk)))
    return None
