"""Nimbus, the cluster master (cluster mode): accepts topologies, stores their code,
packs and places containers on supervisors' slots, and serves the HTTP API.

In local mode (the embedded default) the CLI plays nimbus's part on this machine:
it validates and packs (:mod:`bittern.packing`) and records the assignment that a
local supervisor carries out. docs/CLUSTER.md describes cluster mode.
"""
