"""`rewind`, the command line: on-call work without the console, through the engine API.

`parser` holds the arguments, the exit codes and the dispatch; `commands` one function per command;
`common` what the commands share (opening the store, printing); `text` parsing and scrubbing of
what users type.
"""

from engine.cli.parser import main

__all__ = ["main"]
