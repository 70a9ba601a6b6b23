"""Barrier algorithms: no rank leaves before every rank has arrived (one module each)."""
