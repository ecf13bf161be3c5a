"""bench.stack_compare's settings: NAME=JSON, an environment for every process of a stack."""

from __future__ import annotations

import argparse

import pytest

from bench.stack_compare import setting


def test_a_setting_is_a_name_and_an_environment_of_strings():
    assert setting('two={"POLARS_MAX_THREADS": 2}') == ("two", {"POLARS_MAX_THREADS": "2"})
    assert setting("shipped={}") == ("shipped", {})


@pytest.mark.parametrize("text", ["a=[1]", "a=nope", "={}", "a"])
def test_a_setting_that_is_not_a_name_and_a_json_object_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="not NAME="):
        setting(text)
