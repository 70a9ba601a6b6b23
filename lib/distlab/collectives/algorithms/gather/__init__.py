"""Gather algorithms: block ``r`` of every rank ``r`` onto the root (one module each)."""
