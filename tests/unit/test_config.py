"""Settings are read from the environment and every bad value is named at start."""

import re

import pytest

from app.config import ConfigError, load_settings, to_libpq_url, to_yoyo_url
from app.runtime import workloads_for

URL = "postgresql://postgres@127.0.0.1:5432/chunkwise"


def test_defaults_match_the_documented_values():
    s = load_settings({"DATABASE_URL": URL})
    limits = s.limits
    assert (limits.lease_seconds, limits.heartbeat_seconds, limits.max_attempts) == (30, 10, 3)
    assert (limits.max_leases_per_worker, limits.max_leases_total, limits.max_queued_chunks) == (
        2,
        8,
        256,
    )
    assert s.db_statement_timeout_ms == 3000
    assert s.maintenance_seconds == 5.0
    assert s.auth_cache_seconds == 30.0
    assert limits.allowed_workloads == ("csv_stats",)
    assert (limits.retry_delay_seconds, limits.retry_delay_max_seconds) == (1, 300)


def test_manifest_workloads_default_to_no_lease_caps_and_a_large_queue():
    limits = load_settings({"DATABASE_URL": URL}).limits
    assert (limits.manifest_max_leases_per_worker, limits.manifest_max_leases_total) == (None, None)
    assert (limits.manifest_max_queued_tasks, limits.manifest_max_tasks_per_job) == (
        100_000,
        10_000,
    )


def test_manifest_caps_are_read_from_the_environment():
    env = {
        "DATABASE_URL": URL,
        "CHUNKWISE_MANIFEST_MAX_LEASES_PER_WORKER": "4",
        "CHUNKWISE_MANIFEST_MAX_LEASES_TOTAL": "40",
        "CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS": "5000",
        "CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB": "500",
    }
    limits = load_settings(env).limits
    assert (limits.manifest_max_leases_per_worker, limits.manifest_max_leases_total) == (4, 40)
    assert (limits.manifest_max_queued_tasks, limits.manifest_max_tasks_per_job) == (5000, 500)


def test_csv_stats_is_always_allowed_beside_extra_workloads():
    s = load_settings({"DATABASE_URL": URL, "CHUNKWISE_ALLOWED_WORKLOADS": "render, echo,"})
    assert s.limits.allowed_workloads == ("csv_stats", "render", "echo")


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "DATABASE_URL is required"),
        ({"DATABASE_URL": "mysql://x"}, "DATABASE_URL must start with postgresql://"),
        ({"DATABASE_URL": URL, "CHUNKWISE_LEASE_SECONDS": "soon"}, "CHUNKWISE_LEASE_SECONDS"),
        ({"DATABASE_URL": URL, "CHUNKWISE_MAX_ATTEMPTS": "0"}, "CHUNKWISE_MAX_ATTEMPTS"),
        ({"DATABASE_URL": URL, "CHUNKWISE_HEARTBEAT_SECONDS": "30"}, "shorter than"),
        (
            {"DATABASE_URL": URL, "CHUNKWISE_DB_POOL_MIN": "9", "CHUNKWISE_DB_POOL_MAX": "3"},
            "CHUNKWISE_DB_POOL_MIN must not exceed",
        ),
        (
            {"DATABASE_URL": URL, "CHUNKWISE_MAINTENANCE_SECONDS": "-1"},
            "CHUNKWISE_MAINTENANCE_SECONDS",
        ),
        ({"DATABASE_URL": URL, "CHUNKWISE_LEASE_SECOND": "30"}, "CHUNKWISE_LEASE_SECOND is not"),
        (
            {"DATABASE_URL": URL, "CHUNKWISE_MANIFEST_MAX_LEASES_TOTAL": "0"},
            "CHUNKWISE_MANIFEST_MAX_LEASES_TOTAL must be at least 1",
        ),
        (
            {
                "DATABASE_URL": URL,
                "CHUNKWISE_MANIFEST_MAX_LEASES_PER_WORKER": "9",
                "CHUNKWISE_MANIFEST_MAX_LEASES_TOTAL": "3",
            },
            "CHUNKWISE_MANIFEST_MAX_LEASES_PER_WORKER must not exceed",
        ),
        (
            {"DATABASE_URL": URL, "CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB": "200000"},
            "CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB must not exceed",
        ),
        (
            {"DATABASE_URL": URL, "CHUNKWISE_AUTH_CACHE_SECONDS": "-1"},
            "CHUNKWISE_AUTH_CACHE_SECONDS must be a number from 0 to 300",
        ),
        (
            {"DATABASE_URL": URL, "CHUNKWISE_AUTH_CACHE_SECONDS": "3600"},
            "CHUNKWISE_AUTH_CACHE_SECONDS must be a number from 0 to 300",
        ),
        (
            {"DATABASE_URL": URL, "CHUNKWISE_AUTH_CACHE_SECONDS": "a while"},
            "CHUNKWISE_AUTH_CACHE_SECONDS must be a number",
        ),
        (
            {"DATABASE_URL": URL, "CHUNKWISE_RETRY_DELAY_SECONDS": "-1"},
            "CHUNKWISE_RETRY_DELAY_SECONDS must be at least 0",
        ),
        (
            {"DATABASE_URL": URL, "CHUNKWISE_RETRY_DELAY_SECONDS": "400"},
            "CHUNKWISE_RETRY_DELAY_SECONDS must not exceed CHUNKWISE_RETRY_DELAY_MAX_SECONDS",
        ),
        (
            {"DATABASE_URL": URL, "CHUNKWISE_RETRY_DELAY_MAX_SECONDS": "86401"},
            "CHUNKWISE_RETRY_DELAY_MAX_SECONDS must be at most 86400",
        ),
    ],
    ids=[
        "missing-url",
        "wrong-scheme",
        "not-a-number",
        "below-minimum",
        "heartbeat-vs-lease",
        "pool-bounds",
        "negative-interval",
        "typo",
        "manifest-cap-below-minimum",
        "manifest-caps-bounds",
        "manifest-job-larger-than-queue",
        "auth-cache-negative",
        "auth-cache-too-long",
        "auth-cache-not-a-number",
        "retry-delay-negative",
        "retry-delay-beyond-its-maximum",
        "retry-delay-maximum-beyond-a-day",
    ],
)
def test_bad_values_are_named_in_the_error(env, named):
    with pytest.raises(ConfigError, match=named):
        load_settings(env)


def test_every_bad_value_is_reported_at_once():
    with pytest.raises(ConfigError) as error:
        load_settings(
            {"DATABASE_URL": URL, "CHUNKWISE_LEASE_SECONDS": "x", "CHUNKWISE_MAX_ATTEMPTS": "y"}
        )
    assert "CHUNKWISE_LEASE_SECONDS" in str(error.value)
    assert "CHUNKWISE_MAX_ATTEMPTS" in str(error.value)


def test_yoyo_and_libpq_schemes_convert_both_ways():
    assert to_yoyo_url(URL) == "postgresql+psycopg://postgres@127.0.0.1:5432/chunkwise"
    assert to_libpq_url("postgresql+psycopg://u@h/db") == "postgresql://u@h/db"
    assert to_libpq_url("postgres://u@h/db") == "postgresql://u@h/db"


def test_the_auth_cache_may_be_turned_off():
    s = load_settings({"DATABASE_URL": URL, "CHUNKWISE_AUTH_CACHE_SECONDS": "0"})
    assert s.auth_cache_seconds == 0


def test_a_retry_delay_of_zero_retries_at_once():
    limits = load_settings(
        {
            "DATABASE_URL": URL,
            "CHUNKWISE_RETRY_DELAY_SECONDS": "0",
            "CHUNKWISE_RETRY_DELAY_MAX_SECONDS": "0",
        }
    ).limits
    assert (limits.retry_delay_seconds, limits.retry_delay_max_seconds) == (0, 0)


def test_workload_rate_limits_are_read_per_second_or_minute_or_hour():
    env = {
        "DATABASE_URL": URL,
        "CHUNKWISE_ALLOWED_WORKLOADS": "email,render,slow",
        "CHUNKWISE_WORKLOAD_RATE_LIMITS": "email=10/s, render=30/min,slow=1.8/h,csv_stats=2.5/s",
    }

    rates = dict(load_settings(env).limits.rate_limits)

    assert rates == {"email": 10, "render": 0.5, "slow": 0.0005, "csv_stats": 2.5}


def test_no_workload_is_rate_limited_by_default():
    assert load_settings({"DATABASE_URL": URL}).limits.rate_limits == ()


@pytest.mark.parametrize(
    ("rates", "named"),
    [
        ("email=10", "'email=10' is not workload=N/s, N/min or N/h"),
        ("email=10/day", "'email=10/day' is not workload=N/s"),
        ("email=ten/s", "'email=ten/s' is not workload=N/s"),
        ("email=0/s", "with N above 0"),
        ("email=-1/s", "with N above 0"),
        ("email=nan/s", "'email=nan/s' is not"),
        ("email=inf/s", "'email=inf/s' is not"),
        ("email=2000000/s", "at most 1,000,000 a second"),
        ("nope=1/s", "names 'nope', which is not an allowed workload"),
        ("email=1/s,email=2/s", "names 'email' twice"),
    ],
)
def test_a_bad_workload_rate_limit_is_named_in_the_error(rates, named):
    env = {
        "DATABASE_URL": URL,
        "CHUNKWISE_ALLOWED_WORKLOADS": "email",
        "CHUNKWISE_WORKLOAD_RATE_LIMITS": rates,
    }

    with pytest.raises(ConfigError, match=f"CHUNKWISE_WORKLOAD_RATE_LIMITS.*{re.escape(named)}"):
        load_settings(env)


def test_each_rate_limited_workload_claims_from_a_bucket_of_a_seconds_starts_at_least_one():
    env = {
        "DATABASE_URL": URL,
        "CHUNKWISE_ALLOWED_WORKLOADS": "email,render,other",
        "CHUNKWISE_WORKLOAD_RATE_LIMITS": "email=10/s,render=30/min,csv_stats=4/s",
    }
    workloads = workloads_for(load_settings(env).limits)

    caps = {name: workloads.of(name).caps for name in workloads.names()}

    assert {name: (c.max_starts_per_second, c.start_burst) for name, c in caps.items()} == {
        "csv_stats": (4, 4),
        "email": (10, 10),
        "other": (None, None),
        "render": (0.5, 1),
    }
    assert caps["email"].serialised and not caps["other"].serialised


def test_idle_workers_are_kept_a_day_unless_configured():
    assert load_settings({"DATABASE_URL": URL}).limits.worker_retention_seconds == 86_400
    env = {"DATABASE_URL": URL, "CHUNKWISE_WORKER_RETENTION_SECONDS": "600"}
    assert load_settings(env).limits.worker_retention_seconds == 600


def test_a_worker_retention_under_a_minute_is_refused():
    with pytest.raises(ConfigError, match="CHUNKWISE_WORKER_RETENTION_SECONDS must be at least 60"):
        load_settings({"DATABASE_URL": URL, "CHUNKWISE_WORKER_RETENTION_SECONDS": "5"})


def test_without_a_metrics_token_none_is_set():
    assert load_settings({"DATABASE_URL": URL}).metrics_token is None


@pytest.mark.parametrize("token", ["short", "prometheus-token-change-me-0000000000000"])
def test_a_short_or_placeholder_metrics_token_is_refused(token):
    with pytest.raises(ConfigError, match="CHUNKWISE_METRICS_TOKEN must be at least 32"):
        load_settings({"DATABASE_URL": URL, "CHUNKWISE_METRICS_TOKEN": token})


def test_the_metrics_token_is_kept_out_of_the_settings_repr():
    token = "m" * 40
    settings = load_settings({"DATABASE_URL": URL, "CHUNKWISE_METRICS_TOKEN": token})
    assert settings.metrics_token == token
    assert token not in repr(settings)


def test_each_user_gets_a_quarter_of_each_workloads_queue_by_default():
    env = {"DATABASE_URL": URL, "CHUNKWISE_ALLOWED_WORKLOADS": "render"}
    limits = load_settings(env).limits
    workloads = workloads_for(limits)

    shares = {n: workloads.of(n).caps.user_queued_limit for n in workloads.names()}

    assert shares == {"csv_stats": 64, "render": 25_000}
    assert workloads.of("render").caps.user_bytes_limit == 64 * 1024 * 1024
    assert limits.user_max_schedules == 100


def test_user_quotas_are_read_from_the_environment():
    env = {
        "DATABASE_URL": URL,
        "CHUNKWISE_USER_MAX_QUEUED_PERCENT": "10",
        "CHUNKWISE_USER_MAX_STORED_BYTES": "4096",
        "CHUNKWISE_USER_MAX_SCHEDULES": "3",
    }
    caps = workloads_for(load_settings(env).limits).of("csv_stats").caps

    assert (caps.user_queued_limit, caps.user_bytes_limit) == (25, 4096)
    assert load_settings(env).limits.user_max_schedules == 3


@pytest.mark.parametrize(
    ("name", "value", "named"),
    [
        ("CHUNKWISE_USER_MAX_QUEUED_PERCENT", "101", "must be at most 100"),
        ("CHUNKWISE_USER_MAX_QUEUED_PERCENT", "0", "must be at least 1"),
        ("CHUNKWISE_USER_MAX_STORED_BYTES", "100", "must be at least 1024"),
        ("CHUNKWISE_USER_MAX_SCHEDULES", "none", "must be a whole number"),
    ],
)
def test_a_bad_user_quota_is_named_in_the_error(name, value, named):
    with pytest.raises(ConfigError, match=f"{name} {named}"):
        load_settings({"DATABASE_URL": URL, name: value})


def test_a_quarter_of_the_web_threads_may_wait_unless_set():
    assert load_settings({"DATABASE_URL": URL}).max_waiting_requests == 8
    threads = {"DATABASE_URL": URL, "CHUNKWISE_WEB_THREADS": "12"}
    assert load_settings(threads).max_waiting_requests == 3
    assert (
        load_settings({**threads, "CHUNKWISE_MAX_WAITING_REQUESTS": "5"}).max_waiting_requests == 5
    )
    assert (
        load_settings({**threads, "CHUNKWISE_MAX_WAITING_REQUESTS": "0"}).max_waiting_requests == 0
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"CHUNKWISE_MAX_WAITING_REQUESTS": "-1"},
            "CHUNKWISE_MAX_WAITING_REQUESTS must be at least 0",
        ),
        (
            {"CHUNKWISE_MAX_WAITING_REQUESTS": "many"},
            "CHUNKWISE_MAX_WAITING_REQUESTS must be a whole",
        ),
        ({"CHUNKWISE_MAX_WAITING_REQUESTS": "32"}, "must be below CHUNKWISE_WEB_THREADS \\(32\\)"),
        (
            {"CHUNKWISE_MAX_WAITING_REQUESTS": "4", "CHUNKWISE_WEB_THREADS": "4"},
            "must be below CHUNKWISE_WEB_THREADS \\(4\\)",
        ),
        (
            {"CHUNKWISE_WEB_THREADS": "0"},
            "CHUNKWISE_WEB_THREADS must be a whole number of at least 1",
        ),
        ({"CHUNKWISE_WEB_THREADS": "lots"}, "CHUNKWISE_WEB_THREADS must be a whole number"),
    ],
    ids=[
        "negative",
        "not-a-number",
        "every-thread",
        "every-thread-of-few",
        "no-threads",
        "threads-nan",
    ],
)
def test_a_waiting_budget_that_could_take_every_thread_is_refused(env, named):
    with pytest.raises(ConfigError, match=named):
        load_settings({"DATABASE_URL": URL, **env})


def test_without_an_archive_url_the_archive_is_the_local_directory():
    s = load_settings({"DATABASE_URL": URL})
    assert (s.archive_bucket, s.archive_prefix) == (None, "")


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://chunkwise-inputs", "chunkwise-inputs", ""),
        ("s3://chunkwise-inputs/", "chunkwise-inputs", ""),
        ("s3://chunkwise.inputs/prod/csv/", "chunkwise.inputs", "prod/csv/"),
    ],
)
def test_an_archive_url_names_the_bucket_and_the_key_prefix(url, bucket, prefix):
    s = load_settings({"DATABASE_URL": URL, "CHUNKWISE_ARCHIVE_URL": url})
    assert (s.archive_bucket, s.archive_prefix) == (bucket, prefix)


@pytest.mark.parametrize(
    "url",
    ["/srv/archive", "https://bucket/x", "s3://", "s3:///prefix", "s3://Upper/x", "s3://ab/x"],
)
def test_an_archive_url_that_is_not_s3_with_a_bucket_is_refused_naming_the_setting(url):
    with pytest.raises(ConfigError, match="CHUNKWISE_ARCHIVE_URL"):
        load_settings({"DATABASE_URL": URL, "CHUNKWISE_ARCHIVE_URL": url})
