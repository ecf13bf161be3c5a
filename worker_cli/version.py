"""The version `chunkwise --version` and `chunkwise-worker --version` print."""

from __future__ import annotations

from importlib import metadata

# The distributions the commands may come from: the server's, or the client's alone.
DISTRIBUTIONS = ("chunkwise", "chunkwise-client")
NOT_INSTALLED = "unknown (not installed: run from a checkout)"


def installed_version() -> str:
    """The version of the first distribution installed, or a note that none is."""
    for name in DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return NOT_INSTALLED
