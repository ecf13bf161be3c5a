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


def test_a_cron_is_read_on_the_clocks_of_its_time_zone_summer_and_winter():
    winter, summer = datetime(2026, 12, 5, tzinfo=UTC), datetime(2026, 7, 5, tzinfo=UTC)

    assert next_run_after("0 9 * * *", winter, "Europe/Paris") == datetime(
        2026, 12, 5, 8, tzinfo=UTC
    )
    assert next_run_after("0 9 * * *", summer, "Europe/Paris") == datetime(
        2026, 7, 5, 7, tzinfo=UTC
    )


def test_where_clocks_go_back_a_daily_time_runs_once_and_a_frequent_one_keeps_its_pace():
    first_0230 = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # 02:30 CEST; 02:30 CET is 01:30 UTC
    late_pass = first_0230 + timedelta(seconds=3)
    every_half_hour, at = [], datetime(2026, 10, 25, 0, tzinfo=UTC)
    for _ in range(4):
        at = next_run_after("*/30 * * * *", at, "Europe/Paris", previous=at)
        every_half_hour.append(at)

    daily = next_run_after("30 2 * * *", late_pass, "Europe/Paris", previous=first_0230)

    assert daily == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
    assert [t - datetime(2026, 10, 25, 0, tzinfo=UTC) for t in every_half_hour] == [
        timedelta(minutes=30 * n) for n in (1, 2, 3, 4)
    ]


def test_where_clocks_go_forward_past_a_time_it_runs_just_after_the_gap():
    # 2027-03-28 02:30 never happens in Paris: 02:00 CET is followed by 03:00 CEST.
    the_day_before = datetime(2027, 3, 27, 12, tzinfo=UTC)

    assert next_run_after("30 2 * * *", the_day_before, "Europe/Paris") == datetime(
        2027, 3, 28, 1, tzinfo=UTC
    )


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus", "../../etc/passwd", "", "UTC+2", "/etc/localtime"]
)
def test_a_time_zone_no_iana_name_names_is_refused_naming_timezone(zone):
    with pytest.raises(InvalidInput) as refused:
        next_run_after("@daily", AT_0305, zone)

    assert list(refused.value.details["fields"]) == ["timezone"]
