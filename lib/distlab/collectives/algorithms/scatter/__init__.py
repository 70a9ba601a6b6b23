"""Scatter algorithms: block ``r`` of the root's buffer to every rank ``r`` (one module each)."""
