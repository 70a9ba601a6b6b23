"""Figures and ipywidgets explorers; they call the pure core and hold no logic of their own."""
