"""The live terminal UI (``bittern top``): pure rendering from a metrics document
(:mod:`.render`) and a terminal key reader (:mod:`.keys`)."""
