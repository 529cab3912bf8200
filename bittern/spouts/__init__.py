"""Ready-made spouts. ``FileSpout``: lines of files, replayable from an offset kept in
its checkpointed state (see ``bittern.spouts.files``)."""
from .files import FileSpout, FileSpoutError, PositionedFileSpout, resolve_files, shard

__all__ = ["FileSpout", "FileSpoutError", "PositionedFileSpout", "resolve_files", "shard"]
