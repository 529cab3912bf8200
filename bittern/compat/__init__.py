"""Adapters that let Bittern run topologies written for other engines unchanged:
streamparse (:mod:`.streamparse`) and heronpy (:mod:`.heron`). ``bittern/loader.py``
asks them for a topology when a user's file imported their package."""
