"""Allreduce algorithms, one module each; every one is a pure ``(world_size, count, **options) ->
Schedule`` (the registry is :data:`distlab.collectives.algorithms.registry.ALGORITHMS`)."""
