"""The old path of :mod:`distlab.viz.loading` (the data-loading lab's figures and explorers,
renamed with the lab so they no longer read like pipeline parallelism's,
:mod:`distlab.viz.pipeline_parallel`), kept for one release: importing it warns once
(DeprecationWarning) and gives the module :mod:`distlab.viz.loading` itself."""

from distlab._renamed import same_module

same_module(__name__, "distlab.viz.loading",
            "pipeline parallelism's are distlab.viz.pipeline_parallel")
