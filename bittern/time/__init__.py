"""Event time as pure logic (no clocks read, no I/O): input watermarks over channels
(:mod:`.watermarks`), timers (:mod:`.timers`) and the window operator
(:mod:`.windowing`). The instance wires them to its sockets (``instance/timekeeping.py``)
and the user API is :mod:`bittern.api.windows`."""
