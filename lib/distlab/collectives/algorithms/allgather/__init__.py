"""All-gather algorithms: block ``r`` of every rank ``r`` to every rank (one module each)."""
