"""The chunkwise command's argument types, and the options its subcommands share."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import uuid
from collections.abc import Callable
from datetime import datetime

# One function per subcommand (or per family that shares its options), each given `command`:
# (name, action, help) -> the new subcommand's parser, which takes the shared options too.
Command = Callable[[str, Callable, str], argparse.ArgumentParser]


def label_pair(text: str) -> tuple[str, str]:
    """Parse `key=value`."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def label_filter(text: str) -> str:
    """Check `key=value` and pass it on as the server's filter."""
    label_pair(text)
    return text


def delimiter_char(text: str) -> str:
    """A one-character delimiter; `\\t` and `tab` mean a tab."""
    return "\t" if text in ("\\t", "tab") else text


def uuid_text(text: str) -> str:
    """A UUID, normalised; anything else is a usage error."""
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a UUID: {text!r}") from None


def aware_time(text: str) -> str:
    """An ISO 8601 time with its offset (`Z` for UTC), normalised; anything else is a usage
    error."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time's offset (Z for UTC): {text!r}")
    return moment.isoformat()


def json_file(path: str) -> dict:
    """A JSON object read from a file ("-": standard input)."""
    try:
        with contextlib.nullcontext(sys.stdin) if path == "-" else open(path) as file:
            document = json.load(file)
    except (OSError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read a JSON object from {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise argparse.ArgumentTypeError(f"{path} holds JSON, but not an object")
    return document


def shared_options() -> argparse.ArgumentParser:
    """--url, --token and --json, accepted before or after the subcommand."""
    # SUPPRESS keeps a subcommand's unset copy from overwriting a value given before it.
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument(
        "--url", default=argparse.SUPPRESS, help="coordinator base URL (default: $CHUNKWISE_URL)"
    )
    shared.add_argument(
        "--token", default=argparse.SUPPRESS, help="bearer token (default: $CHUNKWISE_TOKEN)"
    )
    shared.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the server's JSON on stdout",
    )
    return shared


def add_wait(sub: argparse.ArgumentParser, help_text: str) -> None:
    """--wait, and the hidden --interval that bounds each wait."""
    sub.add_argument("--wait", action="store_true", help=help_text)
    sub.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
