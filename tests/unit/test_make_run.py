"""make run listens on 127.0.0.1:8000 (or CHUNKWISE_BIND), says in one line when it cannot, and
prints the shell lines that point the commands at it."""

from __future__ import annotations

import socket
import subprocess

import pytest

from devstack import demo, stack
from devstack.stack import BindRefused, LocalStack, Tokens, free_port, run_address


def test_make_run_listens_on_port_8000_of_loopback_by_default():
    assert stack.RUN_BIND == "127.0.0.1:8000"


def test_without_chunkwise_bind_the_default_address_is_used(monkeypatch):
    port = free_port()
    monkeypatch.setattr(stack, "RUN_BIND", f"127.0.0.1:{port}")

    assert run_address(None) == ("127.0.0.1", port)


def test_chunkwise_bind_names_another_address():
    port = free_port()

    assert run_address(f"127.0.0.1:{port}") == ("127.0.0.1", port)


@pytest.fixture
def taken_port():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_a_taken_port_is_refused_saying_how_to_pick_another(taken_port):
    with pytest.raises(BindRefused) as refused:
        run_address(f"127.0.0.1:{taken_port}")

    message = str(refused.value)
    assert f"127.0.0.1:{taken_port} is taken" in message
    assert f"CHUNKWISE_BIND=127.0.0.1:{taken_port + 1} make run" in message


@pytest.mark.parametrize("bind", ["8000", "localhost:", "localhost:http", "127.0.0.1:70000"])
def test_a_chunkwise_bind_that_is_no_address_is_refused_naming_it(bind):
    with pytest.raises(BindRefused, match=f"CHUNKWISE_BIND='{bind}' is not HOST:PORT"):
        run_address(bind)


def test_make_run_on_a_taken_port_exits_1_with_one_line_and_starts_nothing(
    taken_port, monkeypatch, capsys
):
    monkeypatch.setenv("CHUNKWISE_BIND", f"127.0.0.1:{taken_port}")
    monkeypatch.setattr(demo, "start_stack", lambda *a: pytest.fail("started a stack"))

    status = demo.main(["run"])

    err = capsys.readouterr().err
    assert status == 1
    assert err.count("\n") == 1
    assert err.startswith(f"make run: 127.0.0.1:{taken_port} is taken")


def test_the_export_block_sets_the_url_and_both_tokens_in_a_shell(tmp_path):
    local = LocalStack(database_url="postgresql://x@127.0.0.1/x", run_dir=tmp_path, port=8123)
    block = demo.export_block(local)

    done = subprocess.run(
        ["sh", "-c", f'{block}\necho "$CHUNKWISE_URL $CHUNKWISE_TOKEN $CHUNKWISE_WORKER_TOKEN"'],
        capture_output=True,
        text=True,
        check=True,
        env={},
    )

    assert block.startswith("export CHUNKWISE_URL=")
    assert done.stdout.split() == ["http://127.0.0.1:8123", local.tokens.user, local.tokens.worker]


def test_a_stack_bound_to_every_interface_is_reached_on_loopback(tmp_path):
    local = LocalStack(
        database_url="postgresql://x@127.0.0.1/x",
        run_dir=tmp_path,
        tokens=Tokens(),
        host="0.0.0.0",
        port=8123,
    )

    assert local.url == "http://127.0.0.1:8123"
    assert local.base_env()["CHUNKWISE_BIND"] == "0.0.0.0:8123"
