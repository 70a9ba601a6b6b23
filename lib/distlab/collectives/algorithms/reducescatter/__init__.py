"""Reduce-scatter algorithms: block ``r``, reduced over every rank, to rank ``r`` (one module
each)."""
