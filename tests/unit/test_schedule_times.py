"""When a schedule runs next: five cron fields read in UTC, as cron reads them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from services.errors import InvalidInput
from services.schedules import next_run_after

AT_0305 = datetime(2026, 12, 4, 3, 5, tzinfo=UTC)  # a Friday


def test_the_next_run_is_strictly_after_the_moment_even_one_the_cron_names():
    assert next_run_after("*/5 * * * *", AT_0305) == AT_0305 + timedelta(minutes=5)


def test_a_day_of_month_and_a_weekday_together_mean_either_as_in_cron():
    # The 13th, or any Monday: Monday the 7th comes first.
    assert next_run_after("0 0 13 * 1", AT_0305) == datetime(2026, 12, 7, tzinfo=UTC)


def test_a_shorthand_is_its_five_fields():
    assert next_run_after("@hourly", AT_0305) == next_run_after("0 * * * *", AT_0305)
    assert next_run_after("@daily", AT_0305) == datetime(2026, 12, 5, tzinfo=UTC)


def test_a_moment_given_with_another_offset_is_read_in_utc():
    in_new_york = AT_0305.astimezone(timezone(timedelta(hours=-5)))

    assert next_run_after("0 4 * * *", in_new_york) == datetime(2026, 12, 4, 4, tzinfo=UTC)


@pytest.mark.parametrize("cron", ["* * * *", "0 0 1 1 * 2030", "@reboot", "0 0 30 2 *"])
def test_a_cron_naming_no_five_field_schedule_is_refused_naming_cron(cron):
    with pytest.raises(InvalidInput) as refused:
        next_run_after(cron, AT_0305)

    assert list(refused.value.details["fields"]) == ["cron"]
