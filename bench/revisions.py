"""This repository's own modules as they were at another revision, for side-by-side benches."""

from __future__ import annotations

import subprocess
import sys
import types

from devstack.stack import REPO


def module_at(revision: str, path: str) -> types.ModuleType:
    """The module at `path` as it is at `revision`, loaded as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{revision}:{path}"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    name = f"{path.replace('/', '_').removesuffix('.py')}_at_{revision}"
    module = types.ModuleType(name)
    # dataclasses look their module up by name.
    sys.modules[module.__name__] = module
    exec(compile(source, f"{revision}:{path}", "exec"), module.__dict__)  # noqa: S102  # nosec B102 - this repository's own code at a revision, for the baseline
    return module
