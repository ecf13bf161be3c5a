"""Where the SDK finds the coordinator's URL and a token: given, else from the environment."""

from __future__ import annotations

import os

from worker_cli.client import settings_problem

URL_VARIABLE = "CHUNKWISE_URL"
USER_TOKEN_VARIABLE = "CHUNKWISE_TOKEN"
WORKER_TOKEN_VARIABLE = "CHUNKWISE_WORKER_TOKEN"


class MissingSetting(RuntimeError):
    """A setting was neither given nor set in the environment."""

    def __init__(self, variable: str, argument: str):
        super().__init__(f"{variable} is not set (or pass {argument}=)")
        self.variable = variable


class InvalidSetting(ValueError):
    """A URL or token that cannot be used to reach a coordinator."""


def coordinator_settings(url: str | None, token: str | None, token_variable: str) -> tuple:
    """Return (url, token): each as given, else from its environment variable, and usable."""
    url = url or os.environ.get(URL_VARIABLE)
    if not url:
        raise MissingSetting(URL_VARIABLE, "url")
    token = token or os.environ.get(token_variable)
    if not token:
        raise MissingSetting(token_variable, "token")
    if problem := settings_problem(url, token):
        raise InvalidSetting(problem)
    return url, token
