"""Settings loaded from the environment and validated once, at start."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import click

from services import workloads as workload_rules
from services.credentials import PLACEHOLDER_MARKS
from services.runtime import MAX_RETRY_DELAY_SECONDS, Limits

REPO_ROOT = Path(__file__).resolve().parent.parent
# The migrations: app/sql in an installed distribution (setup.cfg maps sql/ there), the
# repository's sql/ in a checkout.
PACKAGED_MIGRATIONS = Path(__file__).resolve().parent / "sql"
MIGRATIONS_DIR = PACKAGED_MIGRATIONS if PACKAGED_MIGRATIONS.is_dir() else REPO_ROOT / "sql"
# A session-signing key shorter than this could be guessed offline from one signed cookie.
MIN_SECRET_KEY_LENGTH = 32
# The scrape token is compared, not looked up: it needs as much secret as an API token.
MIN_METRICS_TOKEN_LENGTH = 32
# A revoked token must not outlive a cut-off listener by long.
MAX_AUTH_CACHE_SECONDS = 300
# CHUNKWISE_WORKLOAD_RATE_LIMITS: seconds in each unit a rate may be given per.
RATE_UNITS = {"s": 1, "min": 60, "h": 3600}
MAX_RATE_PER_SECOND = 1_000_000
# gunicorn's threads per process (CHUNKWISE_WEB_THREADS, read by gunicorn.conf.py).
DEFAULT_WEB_THREADS = 32


class ConfigError(ValueError, click.ClickException):
    """One or more environment variables have values Chunkwise cannot use.

    A ClickException too, so `flask --app app ...` says what is wrong in a line per problem
    (exit 1) rather than with a traceback.
    """

    def __init__(self, problems: list[str]):
        if len(problems) == 1:
            message = f"invalid configuration: {problems[0]}"
        else:
            message = "invalid configuration:\n  " + "\n  ".join(problems)
        click.ClickException.__init__(self, message)


@dataclass(frozen=True)
class Settings:
    """Everything the coordinator reads from its environment."""

    database_url: str
    db_pool_min: int = 2
    db_pool_max: int = 10
    db_statement_timeout_ms: int = 3000
    limits: Limits = Limits()
    maintenance_seconds: float = 5.0
    # How long a coordinator may go on trusting a token it looked up (0: ask every time).
    auth_cache_seconds: float = 30.0
    temp_dir: Path = REPO_ROOT / ".run" / "tmp"
    archive_dir: Path = REPO_ROOT / ".run" / "archive"
    migrations_dir: Path = MIGRATIONS_DIR
    log_level: str = "INFO"
    # Long polls one process lets wait at a time: a quarter of its threads unless set.
    max_waiting_requests: int = DEFAULT_WEB_THREADS // 4
    # Signs the dashboard's session cookie; None: a key file beside the archive directory.
    secret_key: str | None = dataclasses.field(default=None, repr=False)
    # The bearer token Prometheus scrapes /metrics with; None: only operator tokens may scrape.
    metrics_token: str | None = dataclasses.field(default=None, repr=False)
    # CHUNKWISE_ARCHIVE_URL=s3://bucket/prefix: the archive is that bucket, shared by every
    # coordinator; None: the local directory archive_dir, for a single host.
    archive_bucket: str | None = None
    archive_prefix: str = ""


# env name -> (field, lower bound)
_INTS = {
    "CHUNKWISE_DB_POOL_MIN": ("db_pool_min", 1),
    "CHUNKWISE_DB_POOL_MAX": ("db_pool_max", 1),
    "CHUNKWISE_DB_STATEMENT_TIMEOUT_MS": ("db_statement_timeout_ms", 100),
    "CHUNKWISE_LEASE_SECONDS": ("lease_seconds", 2),
    "CHUNKWISE_HEARTBEAT_SECONDS": ("heartbeat_seconds", 1),
    "CHUNKWISE_MAX_ATTEMPTS": ("max_attempts", 1),
    "CHUNKWISE_RETRY_DELAY_SECONDS": ("retry_delay_seconds", 0),
    "CHUNKWISE_RETRY_DELAY_MAX_SECONDS": ("retry_delay_max_seconds", 0),
    "CHUNKWISE_MAX_LEASES_PER_WORKER": ("max_leases_per_worker", 1),
    "CHUNKWISE_MAX_LEASES_TOTAL": ("max_leases_total", 1),
    "CHUNKWISE_MAX_QUEUED_CHUNKS": ("max_queued_chunks", 1),
    "CHUNKWISE_MAX_UPLOAD_BYTES": ("max_upload_bytes", 1),
    "CHUNKWISE_MAX_RESULT_BYTES": ("max_result_bytes", 1),
    "CHUNKWISE_MANIFEST_MAX_LEASES_PER_WORKER": ("manifest_max_leases_per_worker", 1),
    "CHUNKWISE_MANIFEST_MAX_LEASES_TOTAL": ("manifest_max_leases_total", 1),
    "CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS": ("manifest_max_queued_tasks", 1),
    "CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB": ("manifest_max_tasks_per_job", 1),
    "CHUNKWISE_RETENTION_DAYS": ("retention_days", 1),
    "CHUNKWISE_ARCHIVE_RETENTION_DAYS": ("archive_retention_days", 1),
    "CHUNKWISE_WORKER_RETENTION_SECONDS": ("worker_retention_seconds", 60),
    # Fair share between users (services/runtime.Limits).
    "CHUNKWISE_USER_MAX_QUEUED_PERCENT": ("user_max_queued_percent", 1),
    "CHUNKWISE_USER_MAX_STORED_BYTES": ("user_max_stored_bytes", 1024),
    "CHUNKWISE_USER_MAX_SCHEDULES": ("user_max_schedules", 1),
    "CHUNKWISE_MAX_WAITING_REQUESTS": ("max_waiting_requests", 0),
}
_PATHS = {
    "CHUNKWISE_TEMP_DIR": "temp_dir",
    "CHUNKWISE_ARCHIVE_DIR": "archive_dir",
    "CHUNKWISE_MIGRATIONS_DIR": "migrations_dir",
}


# Read elsewhere (gunicorn.conf.py, flask seed-local, the worker, the CLI, compose.yaml), so
# they may share the coordinator's environment without being mistaken for typos.
_OTHERS = (
    "CHUNKWISE_BIND",
    "CHUNKWISE_WEB_WORKERS",
    "CHUNKWISE_SEED_USER_TOKEN",
    "CHUNKWISE_SEED_OPERATOR_TOKEN",
    "CHUNKWISE_SEED_WORKER_TOKEN",
    "CHUNKWISE_URL",
    "CHUNKWISE_TOKEN",
    "CHUNKWISE_WORKER_TOKEN",
    "CHUNKWISE_PUBLISH",
)
KNOWN_VARIABLES = frozenset(
    {
        *_INTS,
        *_PATHS,
        *_OTHERS,
        "CHUNKWISE_MAINTENANCE_SECONDS",
        "CHUNKWISE_AUTH_CACHE_SECONDS",
        "CHUNKWISE_ALLOWED_WORKLOADS",
        "CHUNKWISE_WORKLOAD_RATE_LIMITS",
        "CHUNKWISE_LOG_LEVEL",
        "CHUNKWISE_SECRET_KEY",
        "CHUNKWISE_METRICS_TOKEN",
        "CHUNKWISE_WEB_THREADS",
        "CHUNKWISE_ARCHIVE_URL",
    }
)
# S3's rules for a bucket name: 3-63 lowercase letters, digits, dots and hyphens.
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the settings, naming every bad variable in one error."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    problems = [
        f"{name} is not a Chunkwise setting (a typo?)"
        for name in sorted(env)
        if name.startswith("CHUNKWISE_") and name not in KNOWN_VARIABLES
    ]

    url = env.get("DATABASE_URL", "").strip()
    if not url:
        problems.append("DATABASE_URL is required (postgresql://user@host:port/dbname)")
    elif not url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        problems.append("DATABASE_URL must start with postgresql://")
    values["database_url"] = to_libpq_url(url)

    for name, (field, minimum) in _INTS.items():
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            continue
        try:
            number = int(raw)
        except ValueError:
            problems.append(f"{name} must be a whole number, got {raw!r}")
            continue
        if number < minimum:
            problems.append(f"{name} must be at least {minimum}, got {number}")
        values[field] = number

    raw = env.get("CHUNKWISE_MAINTENANCE_SECONDS")
    if raw:
        try:
            values["maintenance_seconds"] = float(raw)
            if values["maintenance_seconds"] <= 0:
                raise ValueError
        except ValueError:
            problems.append(f"CHUNKWISE_MAINTENANCE_SECONDS must be a positive number, got {raw!r}")
    raw = env.get("CHUNKWISE_AUTH_CACHE_SECONDS")
    if raw:
        try:
            values["auth_cache_seconds"] = float(raw)
            if not 0 <= values["auth_cache_seconds"] <= MAX_AUTH_CACHE_SECONDS:
                raise ValueError
        except ValueError:
            problems.append(
                f"CHUNKWISE_AUTH_CACHE_SECONDS must be a number from 0 to "
                f"{MAX_AUTH_CACHE_SECONDS}, got {raw!r}"
            )

    raw = env.get("CHUNKWISE_ALLOWED_WORKLOADS", "")
    extra = [w.strip() for w in raw.split(",") if w.strip()]
    bad = [w for w in extra if not workload_rules.NAME.fullmatch(w)]
    if bad:
        problems.append(
            f"CHUNKWISE_ALLOWED_WORKLOADS has names that are not {workload_rules.NAME_RULE}: {bad}"
        )
    values["allowed_workloads"] = tuple(dict.fromkeys(["csv_stats", *extra]))
    values["rate_limits"] = _rate_limits(
        env.get("CHUNKWISE_WORKLOAD_RATE_LIMITS", ""), values["allowed_workloads"], problems
    )

    for name, field in _PATHS.items():
        if env.get(name):
            values[field] = Path(env[name]).expanduser().resolve()
    raw = env.get("CHUNKWISE_SECRET_KEY")
    if raw:
        if len(raw) < MIN_SECRET_KEY_LENGTH:
            problems.append(
                f"CHUNKWISE_SECRET_KEY must be at least {MIN_SECRET_KEY_LENGTH} characters"
            )
        values["secret_key"] = raw
    raw = env.get("CHUNKWISE_METRICS_TOKEN")
    if raw:
        if len(raw) < MIN_METRICS_TOKEN_LENGTH or any(m in raw.lower() for m in PLACEHOLDER_MARKS):
            problems.append(
                f"CHUNKWISE_METRICS_TOKEN must be at least {MIN_METRICS_TOKEN_LENGTH} random "
                "characters, not a placeholder (python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))')"
            )
        values["metrics_token"] = raw
    raw = env.get("CHUNKWISE_ARCHIVE_URL", "").strip()
    if raw:
        archive = _archive_url(raw)
        if isinstance(archive, str):
            problems.append(archive)
        else:
            values["archive_bucket"], values["archive_prefix"] = archive
    if env.get("CHUNKWISE_LOG_LEVEL"):
        values["log_level"] = env["CHUNKWISE_LOG_LEVEL"].upper()

    threads = _web_threads(env.get("CHUNKWISE_WEB_THREADS"), problems)
    waiting = values.setdefault("max_waiting_requests", threads // 4)
    if threads and waiting >= threads:
        problems.append(
            f"CHUNKWISE_MAX_WAITING_REQUESTS must be below CHUNKWISE_WEB_THREADS ({threads}): "
            "long polls may not take every thread"
        )

    limit_names = set(Limits.__dataclass_fields__)
    limits = Limits(**{k: values.pop(k) for k in list(values) if k in limit_names})
    settings = Settings(**values, limits=limits) if not problems else None
    if settings is not None:
        problems.extend(_cross_checks(settings))
    if problems:
        raise ConfigError(problems)
    return settings


def _web_threads(raw: str | None, problems: list[str]) -> int:
    """gunicorn's threads per process, as gunicorn.conf.py reads them (0 when unusable)."""
    if raw is None or raw.strip() == "":
        return DEFAULT_WEB_THREADS
    try:
        threads = int(raw)
    except ValueError:
        threads = 0
    if threads < 1:
        problems.append(f"CHUNKWISE_WEB_THREADS must be a whole number of at least 1, got {raw!r}")
        return 0
    return threads


def _rate_limits(
    raw: str, allowed: tuple[str, ...], problems: list[str]
) -> tuple[tuple[str, float], ...]:
    """`email=10/s,render=30/min` as ((workload, starts a second), ...), naming what is wrong."""
    rates: dict[str, float] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        name, _, rate = item.partition("=")
        number, _, unit = rate.partition("/")
        name = name.strip()
        try:
            per_second = float(number) / RATE_UNITS[unit.strip()]
        except (ValueError, KeyError):
            per_second = None
        if per_second is None or not 0 < per_second <= MAX_RATE_PER_SECOND:
            problems.append(
                f"CHUNKWISE_WORKLOAD_RATE_LIMITS: {item!r} is not workload=N/s, N/min or N/h "
                f"with N above 0 (at most {MAX_RATE_PER_SECOND:,} a second)"
            )
        elif name not in allowed:
            problems.append(
                f"CHUNKWISE_WORKLOAD_RATE_LIMITS names {name!r}, which is not an allowed "
                "workload (csv_stats or one of CHUNKWISE_ALLOWED_WORKLOADS)"
            )
        elif name in rates:
            problems.append(f"CHUNKWISE_WORKLOAD_RATE_LIMITS names {name!r} twice")
        else:
            rates[name] = per_second
    return tuple(rates.items())


def _archive_url(raw: str) -> tuple[str, str] | str:
    """s3://bucket/prefix as (bucket, "prefix/"), or what is wrong with it."""
    scheme, sep, rest = raw.partition("://")
    bucket, _, prefix = rest.partition("/")
    if not sep or scheme != "s3":
        return f"CHUNKWISE_ARCHIVE_URL must be s3://BUCKET/PREFIX, got {raw!r}"
    if not BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
        return (
            f"CHUNKWISE_ARCHIVE_URL names no valid bucket (3-63 lowercase letters, digits, "
            f"dots and hyphens), got {bucket!r}"
        )
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def _cross_checks(s: Settings) -> list[str]:
    problems = []
    if s.db_pool_min > s.db_pool_max:
        problems.append("CHUNKWISE_DB_POOL_MIN must not exceed CHUNKWISE_DB_POOL_MAX")
    if s.limits.heartbeat_seconds >= s.limits.lease_seconds:
        problems.append("CHUNKWISE_HEARTBEAT_SECONDS must be shorter than CHUNKWISE_LEASE_SECONDS")
    if s.limits.max_leases_per_worker > s.limits.max_leases_total:
        problems.append(
            "CHUNKWISE_MAX_LEASES_PER_WORKER must not exceed CHUNKWISE_MAX_LEASES_TOTAL"
        )
    per_worker, total = s.limits.manifest_max_leases_per_worker, s.limits.manifest_max_leases_total
    if per_worker is not None and total is not None and per_worker > total:
        problems.append(
            "CHUNKWISE_MANIFEST_MAX_LEASES_PER_WORKER must not exceed "
            "CHUNKWISE_MANIFEST_MAX_LEASES_TOTAL"
        )
    if s.limits.retry_delay_seconds > s.limits.retry_delay_max_seconds:
        problems.append(
            "CHUNKWISE_RETRY_DELAY_SECONDS must not exceed CHUNKWISE_RETRY_DELAY_MAX_SECONDS"
        )
    if s.limits.retry_delay_max_seconds > MAX_RETRY_DELAY_SECONDS:
        problems.append(
            f"CHUNKWISE_RETRY_DELAY_MAX_SECONDS must be at most {MAX_RETRY_DELAY_SECONDS} (a day)"
        )
    if s.limits.manifest_max_tasks_per_job > s.limits.manifest_max_queued_tasks:
        problems.append(
            "CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB must not exceed "
            "CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS: no job that size could ever be admitted"
        )
    if s.limits.user_max_queued_percent > 100:
        problems.append("CHUNKWISE_USER_MAX_QUEUED_PERCENT must be at most 100")
    return problems


# Settings every coordinator on one database must share: hosts that disagree on caps or
# workloads enforce different rules on the same queue. Each coordinator checks in with a digest
# of each (and of its session key, services/coordinators.py); /readyz names any that differ.
def shared_settings(s: Settings) -> dict[str, str]:
    """The shared settings by variable name, each value as text (lists in a fixed order)."""
    limits = s.limits
    return {
        "CHUNKWISE_LEASE_SECONDS": str(limits.lease_seconds),
        "CHUNKWISE_HEARTBEAT_SECONDS": str(limits.heartbeat_seconds),
        "CHUNKWISE_MAX_ATTEMPTS": str(limits.max_attempts),
        "CHUNKWISE_RETRY_DELAY_SECONDS": str(limits.retry_delay_seconds),
        "CHUNKWISE_RETRY_DELAY_MAX_SECONDS": str(limits.retry_delay_max_seconds),
        "CHUNKWISE_MAX_LEASES_PER_WORKER": str(limits.max_leases_per_worker),
        "CHUNKWISE_MAX_LEASES_TOTAL": str(limits.max_leases_total),
        "CHUNKWISE_MAX_QUEUED_CHUNKS": str(limits.max_queued_chunks),
        "CHUNKWISE_MANIFEST_MAX_LEASES_PER_WORKER": str(limits.manifest_max_leases_per_worker),
        "CHUNKWISE_MANIFEST_MAX_LEASES_TOTAL": str(limits.manifest_max_leases_total),
        "CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS": str(limits.manifest_max_queued_tasks),
        "CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB": str(limits.manifest_max_tasks_per_job),
        "CHUNKWISE_MAX_RESULT_BYTES": str(limits.max_result_bytes),
        "CHUNKWISE_ALLOWED_WORKLOADS": ",".join(sorted(limits.allowed_workloads)),
        "CHUNKWISE_WORKLOAD_RATE_LIMITS": ",".join(
            f"{name}={rate!r}/s" for name, rate in sorted(limits.rate_limits)
        ),
        "CHUNKWISE_RETENTION_DAYS": str(limits.retention_days),
        "CHUNKWISE_USER_MAX_QUEUED_PERCENT": str(limits.user_max_queued_percent),
        "CHUNKWISE_USER_MAX_STORED_BYTES": str(limits.user_max_stored_bytes),
        "CHUNKWISE_USER_MAX_SCHEDULES": str(limits.user_max_schedules),
        # Where inputs live: hosts archiving to different places cannot serve each other's.
        "CHUNKWISE_ARCHIVE_URL": f"s3://{s.archive_bucket}/{s.archive_prefix}"
        if s.archive_bucket
        else "local",
    }


def to_libpq_url(url: str) -> str:
    """Accept the SQLAlchemy-style scheme yoyo uses and return the one libpq reads."""
    for prefix in ("postgresql+psycopg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def to_yoyo_url(url: str) -> str:
    """Return the URL with yoyo's scheme for the psycopg 3 driver."""
    return "postgresql+psycopg://" + to_libpq_url(url)[len("postgresql://") :]
