"""All-to-all algorithms: block ``(s, d)`` from every rank ``s`` to every rank ``d`` (one module
each). The buffer holds ``p x p`` blocks (:mod:`distlab.collectives.plan.semantics`)."""
