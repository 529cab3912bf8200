"""Nimbus, the cluster master (cluster mode): accepts topologies, stores their code,
packs and assigns containers, serves the HTTP API, runs the health manager.

In local mode (the embedded default) the CLI plays nimbus's part on this machine:
it validates and packs (:mod:`bittern.packing`) and records the assignment that a
local supervisor carries out. The nimbus daemon arrives with cluster mode.
"""
