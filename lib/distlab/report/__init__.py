"""What every command prints and writes: text tables (:mod:`.table`), the provenance of a
measurement (:mod:`.provenance`) and results as JSON (:mod:`.jsonfile`). Core floor: imports no
distlab package but the other core modules."""
