"""Figures and ipywidgets explorers (every explorer on :class:`distlab.viz.explorer.Explorer`);
they call the labs and the judge and hold no model logic of their own."""
