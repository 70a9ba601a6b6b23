"""The one base of distlab's widget explorers: controls -> ``update()`` -> figure -> one image.

An explorer is a few ipywidgets controls over one matplotlib figure and one line of text. A
subclass builds its controls (and whatever state it keeps), then calls
:meth:`Explorer.__init__` with them as its last step; the base checks the subclass's contract,
observes every control's ``value``, builds ``widget`` and draws the first picture. From then on
every change of a control calls :meth:`Explorer.update`, which

1. lets the subclass bring dependent controls in line (:meth:`Explorer.settle`: a dropdown
   refilled for another collective, a step slider clamped to a new plan); changes made there
   start no second update;
2. asks the subclass for the picture and its words: :meth:`Explorer.draw` returns a
   :class:`Drawing`, a matplotlib ``Figure`` and a ``summary`` string;
3. renders the figure once, as PNG bytes (:func:`~distlab.viz.figure.figure_png`, at the
   figure's own dpi like every static figure), into the ``image`` widget (an
   ``ipywidgets.Image``, shown in the page as one ``<img>``), and the summary, HTML-escaped,
   into the ``summary_html`` line.

The image is shown at the PNG's own width: each render sets the widget's layout width to the
PNG's pixel width (:func:`~distlab.viz.figure.png_size`), so one pixel of the picture is one
pixel of the page, as for a static figure. Left to itself the widget box stretches its ``<img>``
to the output area's width (about 960 px), which blurs a narrower picture's text; a window
narrower than the picture still shrinks it (ipywidgets' ``max-width: 100%``).

The image is a widget value, so it shows the same in JupyterLab, in a saved notebook's widget
state and in a test without a browser, and it needs no IPython display hook or inline backend.

No change is lost. JupyterLab (4.4 on, with ipykernel 7) sends widget messages over kernel
subshells, so a control's change can arrive on another thread while an update is drawing: such
a change marks the update pending, and the update in progress draws again once it ends, with
every control's value as it is then. The figure always ends on the controls' values, however
quickly two controls move. A change made by :meth:`Explorer.settle` or :meth:`Explorer.draw` on
the updating thread is part of that update and starts none.

What notebooks and tests read afterwards: ``summary`` (str), ``figure`` (the last Figure),
``png`` (its bytes: what ``image`` shows), ``widget`` (the box to display: the control rows,
the summary line, the image). A subclass that leaves out a method its base declares abstract
gets a ``TypeError`` at construction naming each missing method.
"""

from __future__ import annotations

import html
import threading
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, NamedTuple

import ipywidgets as w
from matplotlib.figure import Figure

from distlab.viz.figure import figure_png, png_size

__all__ = ["Drawing", "Explorer"]


class Drawing(NamedTuple):
    """What :meth:`Explorer.draw` returns: the picture and the line of text shown above it."""

    figure: Figure
    summary: str


class Explorer:
    """Controls over one figure and one summary line (see the module docstring).

    Args:
        controls: the value widgets (sliders, dropdowns, toggles, checkboxes) whose changes
            redraw; at least one.
        rows: the widgets above the summary line, top to bottom (controls, buttons, boxes of
            them); default: one ``HBox`` of ``controls``.
        dpi: the PNG's resolution in dots per inch (None, the default: the figure's own, the
            resolution static figures are shown at; anything else draws the text at another
            size than theirs).

    Subclasses define :meth:`draw` and may define :meth:`settle`; they never override
    :meth:`update`, the one render path.
    """

    def __init__(self, controls: Sequence[Any], *, rows: Sequence[Any] | None = None,
                 dpi: float | None = None) -> None:
        controls = list(controls)
        problems = _contract_problems(type(self), controls)
        if problems:
            raise TypeError(f"{type(self).__name__} does not fill the Explorer contract: "
                            + "; ".join(problems))
        self.image = w.Image(format="png")
        self.summary_html = w.HTML()
        self.summary = ""
        self.note = ""
        self.figure: Figure | None = None
        self.png = b""
        self._dpi = dpi
        self._state = threading.Lock()     # guards the three fields below
        self._pending = False              # a change arrived that no drawing has seen
        self._running = False              # an update is in progress (on some thread)
        self._drawing_on: int | None = None  # the thread inside settle()/draw(), if any
        self._controls = tuple(controls)
        for control in self._controls:
            control.observe(self._control_changed, names="value")
        above = list(rows) if rows is not None else [w.HBox(list(controls))]
        self.widget = w.VBox([*above, self.summary_html, self.image])
        self.update()

    @abstractmethod
    def draw(self) -> Drawing:
        """The figure and the summary for the current control values."""

    def settle(self) -> None:
        """Bring controls that depend on others in line before :meth:`draw` (default: none).

        Runs at the start of every update; the control changes it makes start no update.
        """

    def update(self) -> None:
        """Settle the controls, draw, and render the figure and summary (once each); called
        while another update is in progress (another thread), mark it pending instead: the
        update in progress renders again when it ends, until no change is left unseen."""
        with self._state:
            self._pending = True
            if self._running:
                return
            self._running = True
        try:
            while True:
                with self._state:
                    if not self._pending:
                        self._running = False
                        return
                    self._pending = False
                self._render()
        except BaseException:
            with self._state:
                self._running = self._pending = False
            raise

    def _render(self) -> None:
        self._drawing_on = threading.get_ident()
        try:
            self.settle()
            drawing = self.draw()
        finally:
            self._drawing_on = None
        if not isinstance(drawing, Drawing) or not isinstance(drawing.figure, Figure) \
                or not isinstance(drawing.summary, str):
            raise TypeError(f"{type(self).__name__}.draw() must return Drawing(figure: "
                            f"matplotlib Figure, summary: str), got {drawing!r:.200}")
        self.figure, self.summary, self.note = drawing.figure, drawing.summary, ""
        self.png = figure_png(drawing.figure, dpi=self._dpi)
        self.image.layout.width = f"{png_size(self.png)[0]}px"
        self.image.value = self.png
        self._show_text()

    def show_note(self, text: str) -> None:
        """Show ``text`` on a second line under the summary, until the next update."""
        self.note = text
        self._show_text()

    def _show_text(self) -> None:
        lines = [f"<code>{html.escape(self.summary)}</code>"]
        if self.note:
            lines.append(html.escape(self.note))
        self.summary_html.value = "<br>".join(lines)

    def _control_changed(self, change: Any) -> None:
        if self._drawing_on == threading.get_ident():
            return  # settle() or draw() moved a control: part of the update in progress
        self.update()


def _abstract_methods(cls: type) -> list[str]:
    """Names of the methods ``cls`` leaves abstract, each with the first line of its doc."""
    out = []
    for name in sorted(dir(cls)):
        member = getattr(cls, name, None)
        if getattr(member, "__isabstractmethod__", False):
            doc = (member.__doc__ or "").strip().splitlines()
            out.append(f"{name}()" + (f" ({doc[0]})" if doc else ""))
    return out


def _contract_problems(cls: type, controls: Sequence[Any]) -> list[str]:
    """Everything ``cls`` (constructed with ``controls``) misses of the Explorer contract."""
    problems = [f"it must define {m}" for m in _abstract_methods(cls)]
    if cls.update is not Explorer.update:
        problems.append("it overrides update(), the one render path: define draw() and "
                        "settle() instead")
    if not controls:
        problems.append("it passes no controls: give the value widgets whose changes redraw")
    for i, control in enumerate(controls):
        if not isinstance(control, w.ValueWidget):
            problems.append(f"controls[{i}] is a {type(control).__name__}, not an ipywidgets "
                            "value widget (a slider, dropdown, toggle, checkbox, text box)")
    if len({id(c) for c in controls}) != len(controls):
        problems.append("a control is passed twice (it would redraw twice per change)")
    return problems
