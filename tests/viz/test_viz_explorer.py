"""The explorer base: its contract check, one render per change, ``summary`` a str; and every
explorer on it redraws and re-says its summary when one of its controls moves."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as w
import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.figure import Figure

import distlab.viz.explorer as explorer_module
from distlab.collectives import get_preset, preset_names
from distlab.collectives.plan.schedule import Schedule
from distlab.transfers import HostAdapter
from distlab.viz.allreduce import CostExplorer, PlanExplorer
from distlab.viz.collective_plan_stepper import PlanStepper
from distlab.viz.collectives import CollectiveExplorer
from distlab.viz.ddp import DdpExplorer
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import new_figure
from distlab.viz.loading import LoadingExplorer, PartsExplorer
from distlab.viz.moe import LoadExplorer
from distlab.viz.samplers import SamplerExplorer
from distlab.viz.transfers import PrefetchExplorer
from distlab.viz.zero import ZeroExplorer

pytestmark = pytest.mark.timeout(120)


class Counter(Explorer):
    """A slider over a figure whose title is the slider's value."""

    def __init__(self, value: int = 1) -> None:
        self.n = w.IntSlider(value=value, min=0, max=10, description="n")
        self.draws = 0
        super().__init__([self.n])

    def draw(self) -> Drawing:
        self.draws += 1
        fig = new_figure(figsize=(2, 1))
        fig.suptitle(f"n = {self.n.value}")
        return Drawing(fig, f"n is {self.n.value} <of 10>")


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """Every figure the base renders to PNG, in order."""
    seen: list[Figure] = []
    real = explorer_module.figure_png

    def counting(fig: Figure, *, dpi: float | None = None) -> bytes:
        seen.append(fig)
        return real(fig, dpi=dpi)

    monkeypatch.setattr(explorer_module, "figure_png", counting)
    return seen


def test_a_subclass_without_draw_is_told_what_is_missing() -> None:
    class NoDraw(Explorer):
        def __init__(self) -> None:
            super().__init__([w.IntSlider()])

    with pytest.raises(TypeError, match=r"NoDraw does not fill the Explorer contract: it must "
                                        r"define draw\(\) \(The figure and the summary"):
        NoDraw()


def test_a_plan_stepper_names_each_missing_method() -> None:
    class Half(PlanStepper):
        def __init__(self) -> None:
            super().__init__([w.Dropdown(options=["a"])], 2, 4)

        def build(self) -> Schedule:
            raise AssertionError("never called: the contract check comes first")

    with pytest.raises(TypeError) as err:
        Half()
    message = str(err.value)
    assert "define describe()" in message and "define picture()" in message
    assert "build()" not in message


@pytest.mark.parametrize("controls, needle", [
    ([], "passes no controls"),
    ([w.Button(description="go")], "controls[0] is a Button, not an ipywidgets value widget"),
    ("twice", "a control is passed twice"),
])
def test_bad_controls_are_named(controls: Any, needle: str) -> None:
    slider = w.IntSlider()
    given = [slider, slider] if controls == "twice" else controls

    class Bad(Explorer):
        def __init__(self) -> None:
            super().__init__(given)

        def draw(self) -> Drawing:
            return Drawing(new_figure(), "")

    with pytest.raises(TypeError, match="Bad does not fill the Explorer contract") as err:
        Bad()
    assert needle in str(err.value)


def test_overriding_update_breaks_the_contract() -> None:
    class Own(Counter):
        def update(self) -> None:  # a second render path
            pass

    with pytest.raises(TypeError, match=r"overrides update\(\), the one render path"):
        Own()


def test_draw_must_return_a_drawing() -> None:
    class Tuple(Counter):
        def draw(self) -> Any:
            return new_figure(), "text"

    class Words(Counter):
        def draw(self) -> Any:
            return Drawing(new_figure(), ["not", "a", "str"])

    for cls in (Tuple, Words):
        with pytest.raises(TypeError, match=rf"{cls.__name__}\.draw\(\) must return Drawing"):
            cls()


def test_one_render_per_change_and_the_last_figure_stays(renders: list[Figure]) -> None:
    ex = Counter()
    assert len(renders) == 1 and ex.draws == 1 and ex.figure is renders[0]
    first_png = ex.png
    ex.n.value = 5
    assert len(renders) == 2 and ex.draws == 2 and ex.figure is renders[1]
    assert ex.png != first_png and ex.png.startswith(b"\x89PNG") and ex.image.value == ex.png
    assert ex.figure._suptitle.get_text() == "n = 5"
    ex.n.value = 5  # the same value is no change
    assert len(renders) == 2


def test_summary_is_a_str_shown_escaped_in_one_line() -> None:
    ex = Counter(3)
    assert ex.summary == "n is 3 <of 10>"
    assert ex.summary_html.value == "<code>n is 3 &lt;of 10&gt;</code>"
    assert ex.widget.children[-2:] == (ex.summary_html, ex.image)
    ex.show_note("wrote <here>")
    assert ex.summary_html.value.endswith("<br>wrote &lt;here&gt;") and ex.note
    ex.n.value = 4  # the next update drops the note
    assert ex.summary_html.value == "<code>n is 4 &lt;of 10&gt;</code>" and ex.note == ""


def test_changes_made_while_settling_start_no_second_update(renders: list[Figure]) -> None:
    class Clamped(Counter):
        def __init__(self) -> None:
            self.limit = w.IntSlider(value=10, min=0, max=10, description="limit")
            self.n = w.IntSlider(value=8, min=0, max=10, description="n")
            self.draws = 0
            Explorer.__init__(self, [self.limit, self.n])

        def settle(self) -> None:
            self.n.value = min(self.n.value, self.limit.value)

    ex = Clamped()
    assert len(renders) == 1
    ex.limit.value = 3  # clamps n from 8 to 3: still one update
    assert len(renders) == 2 and ex.draws == 2 and ex.n.value == 3 and ex.summary.startswith(
        "n is 3")


class TwoControls(Explorer):
    """Two sliders; ``draw`` reads ``a``, then waits (when ``hold`` is set) until released, then
    reads ``b``: a change that lands meanwhile comes from another thread, as JupyterLab's comm
    messages do over kernel subshells."""

    def __init__(self) -> None:
        self.a = w.IntSlider(value=0, min=0, max=10, description="a")
        self.b = w.IntSlider(value=0, min=0, max=10, description="b")
        self.hold = False
        self.inside = threading.Event()
        self.release = threading.Event()
        super().__init__([self.a, self.b])

    def draw(self) -> Drawing:
        a = self.a.value
        if self.hold:
            self.hold = False
            self.inside.set()
            assert self.release.wait(30), "the test never released the draw"
        fig = new_figure(figsize=(2, 1))
        fig.suptitle(f"a = {a}, b = {self.b.value}")
        return Drawing(fig, f"a={a} b={self.b.value}")


def test_a_change_that_lands_while_drawing_is_drawn_after(renders: list[Figure]) -> None:
    """Two controls moved back to back, the second while the first's update draws (on another
    thread): the update draws again when it ends, so the figure ends on both values."""
    ex = TwoControls()
    ex.hold = True
    first = threading.Thread(target=lambda: setattr(ex.a, "value", 3))
    first.start()
    assert ex.inside.wait(30)
    ex.b.value = 7            # lands while a=3 is being drawn: must not be lost
    ex.release.set()
    first.join(30)
    assert not first.is_alive()
    assert ex.figure._suptitle.get_text() == "a = 3, b = 7" and ex.summary == "a=3 b=7"
    assert len(renders) == 3   # the first picture, a=3 (b read after b moved), then a=3 b=7


def test_a_new_plan_that_clamps_the_step_renders_once(renders: list[Figure]) -> None:
    ex = PlanExplorer("ring", world_size=6)
    ex.step.value = 9
    before = len(renders)
    ex.world_size.value = 2  # 2 steps: the step slider is clamped inside the same update
    assert len(renders) == before + 1
    assert ex.step.value == ex.step.max == 2 and "after step 2/2" in ex.summary


def _presets() -> dict[str, Any]:
    return {k: get_preset(k) for k in preset_names()}


# (name, constructor, control of the explorer, new value)
EXPLORERS: list[tuple[str, Callable[[], Explorer], Callable[[Any], Any], Any]] = [
    ("plan", lambda: PlanExplorer("ring", world_size=4), lambda e: e.world_size, 5),
    ("cost", lambda: CostExplorer(_presets(), "nvlink4_h100"), lambda e: e.preset,
     "ethernet_100g"),
    ("collective", lambda: CollectiveExplorer("all_gather", "bruck", world_size=5),
     lambda e: e.algorithm, "ring"),
    ("ddp", lambda: DdpExplorer(get_preset("pcie4_x16"), 1e-9, layers=3, width=256),
     lambda e: e.cap, 0.1),
    ("pipeline", lambda: LoadingExplorer(items=4, read_ms=1, decode_ms=1, compute_ms=1),
     lambda e: e.read_ms, 4.0),
    ("parts", lambda: PartsExplorer(n_parts=8), lambda e: e.queue_size, 4),
    ("samplers", lambda: SamplerExplorer(length=22, world_size=4),
     lambda e: e.controls["world_size"], 3),
    ("prefetch", lambda: PrefetchExplorer(HostAdapter(), batch_mib=1, batches=2),
     lambda e: e.memory, "pinned"),
    ("zero", lambda: ZeroExplorer(), lambda e: e.world, 8),
    ("moe load", lambda: LoadExplorer(16, ep_size=4, tokens=256), lambda e: e.ep, 8),
]


@pytest.mark.parametrize("make, control, value", [e[1:] for e in EXPLORERS],
                         ids=[e[0] for e in EXPLORERS])
def test_every_explorer_redraws_once_and_says_something_new(
        make: Callable[[], Explorer], control: Callable[[Any], Any], value: Any,
        renders: list[Figure]) -> None:
    ex = make()
    assert isinstance(ex, Explorer) and isinstance(ex.summary, str) and ex.summary
    assert len(renders) == 1 and ex.image.value == ex.png
    fig, png, summary = ex.figure, ex.png, ex.summary
    control(ex).value = value
    assert len(renders) == 2, "one change, one render"
    assert ex.figure is not fig and ex.png != png and ex.image.value == ex.png
    assert isinstance(ex.summary, str) and ex.summary != summary
    assert ex.widget.children[-1] is ex.image


def test_the_picture_is_shown_at_the_width_it_was_rendered() -> None:
    """Left unpinned, the widget box stretched a 750-px picture to the output area's 960 px."""
    from distlab.viz.figure import png_size

    ex = Counter()
    assert ex.image.layout.width == f"{png_size(ex.png)[0]}px"
    with pytest.raises(ValueError, match="png must be PNG bytes"):
        png_size(b"GIF89a")
