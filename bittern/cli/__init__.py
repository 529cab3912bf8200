"""The ``bittern`` command line: one module per verb."""
