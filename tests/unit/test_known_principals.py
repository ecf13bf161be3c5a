"""A coordinator remembers whom a token belongs to, and forgets when credentials change."""

from __future__ import annotations

import pytest

from services.auth import KnownPrincipals, Principal, authenticate, token_digest

ALICE = Principal(kind="user", name="alice", user_id=1, role="user")
BOB = Principal(kind="user", name="bob", user_id=2, role="operator")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class UnreachablePool:
    """A pool that fails the test if asked for a connection."""

    def connection(self):
        raise AssertionError("the database was asked")


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_principal_is_remembered_until_its_seconds_pass(clock):
    known = KnownPrincipals(30, clock=clock)
    known.remember("a", ALICE, known.generation())

    clock.now += 29.9
    assert known.get("a") == ALICE
    clock.now += 0.1
    assert known.get("a") is None


def test_a_change_of_credentials_forgets_every_principal(clock):
    known = KnownPrincipals(30, clock=clock)
    known.remember("a", ALICE, known.generation())
    known.remember("b", BOB, known.generation())

    known.forget_all()

    assert (known.get("a"), known.get("b")) == (None, None)


def test_a_lookup_that_raced_a_change_of_credentials_is_not_remembered(clock):
    known = KnownPrincipals(30, clock=clock)
    before_the_lookup = known.generation()
    known.forget_all()  # a revocation lands while the database is being asked

    known.remember("a", ALICE, before_the_lookup)

    assert known.get("a") is None


def test_zero_seconds_remembers_nothing(clock):
    known = KnownPrincipals(0, clock=clock)
    known.remember("a", ALICE, known.generation())
    assert known.get("a") is None


def test_a_full_memory_starts_again_rather_than_grow(clock):
    known = KnownPrincipals(30, most=2, clock=clock)
    for digest in ("a", "b", "c"):
        known.remember(digest, ALICE, known.generation())

    assert [known.get(d) for d in ("a", "b", "c")] == [None, None, ALICE]


def test_a_remembered_token_is_authenticated_without_the_database(clock):
    token = "cwu_" + "x" * 43
    known = KnownPrincipals(30, clock=clock)
    known.remember(token_digest(token), ALICE, known.generation())

    assert authenticate(UnreachablePool(), token, known) == ALICE
