"""Jobs: submit (a CSV upload or a manifest), view, list, cancel (one or by filter), retry."""

from __future__ import annotations

from uuid import UUID

from flask import Blueprint, Response, request
from werkzeug.exceptions import UnsupportedMediaType

from app import auth, input_rules
from app.auth import current_principal
from app.runtime import get_runtime
from app.schemas import chunks as chunk_schemas
from app.schemas import jobs as job_schemas
from app.tracing import current_trace_id
from app.uploads import spooled_body, uploaded
from services import csvjobs, jobs, task_values
from services.errors import InvalidInput, WaitRefused

bp = Blueprint("jobs", __name__, url_prefix="/api/v1/jobs")
bp.before_request(auth.users_only)

# Built once: building a schema deep-copies every field it declares.
JOB_CREATE = job_schemas.JobCreateSchema()
CSV_JOB_FORM = job_schemas.CsvJobFormSchema()
CSV_JOB_QUERY = job_schemas.CsvJobQuerySchema()
JOB = job_schemas.JobSchema()
JOB_LIST_QUERY = job_schemas.JobListQuerySchema()
JOB_LIST = job_schemas.JobListSchema()
JOB_WAIT_QUERY = job_schemas.JobWaitQuerySchema()
JOB_CANCEL = job_schemas.JobCancelSchema()
JOB_CANCEL_RESULT = job_schemas.JobCancelResultSchema()
CHUNK_PAGE_QUERY = chunk_schemas.ChunkPageQuerySchema()
RESULT_PAGE_QUERY = job_schemas.ResultPageQuerySchema()
RESULT_LIST = job_schemas.ResultListSchema()


@bp.post("")
def create_job():
    """Submit a CSV (the text/csv body or a multipart form) or a manifest of tasks (JSON)."""
    key = _idempotency_key()
    if request.mimetype == "text/csv":
        view = _submit_csv_body(key)
    elif request.mimetype == "multipart/form-data":
        view = _submit_csv(key)
    elif not request.is_json:
        raise UnsupportedMediaType(
            "a job is sent as application/json (a manifest), text/csv or multipart/form-data"
        )
    else:
        body = input_rules.load_json(JOB_CREATE)
        view = jobs.create_job(
            get_runtime(),
            current_principal(),
            jobs.JobSpec.from_dict(body),
            trace_id=current_trace_id(),
            idempotency_key=key,
        )
    return _dump_job(view), 201 if view.created else 200, _etag(view)


def _submit_csv(key: str | None) -> jobs.JobView:
    form = CSV_JOB_FORM.load(input_rules.single_values(request.form, lists=("label",)))
    upload = uploaded("file")
    if upload is None:
        raise InvalidInput.field("file", "a CSV file part named 'file' is required")
    return csvjobs.submit_csv_job(
        get_runtime(),
        current_principal(),
        upload,
        csvjobs.CsvJobRequest(**form),
        trace_id=current_trace_id(),
        idempotency_key=key,
    )


def _submit_csv_body(key: str | None) -> jobs.JobView:
    # The parameters travel in the query string, so they are checked before the body is read.
    query = CSV_JOB_QUERY.load(input_rules.single_values(request.args, lists=("label",)))
    upload = spooled_body()
    return csvjobs.submit_csv_job(
        get_runtime(),
        current_principal(),
        upload,
        csvjobs.CsvJobRequest(**query),
        trace_id=current_trace_id(),
        idempotency_key=key,
    )


def _idempotency_key() -> str | None:
    return input_rules.check_header("Idempotency-Key", max_length=input_rules.IDEMPOTENCY_KEY_MAX)


def _dump_job(view: jobs.JobView) -> dict:
    return JOB.dump(view)


@bp.get("")
def list_jobs():
    """The caller's jobs, newest first."""
    query = JOB_LIST_QUERY.load(input_rules.single_values(request.args))
    views, cursor = jobs.list_jobs(get_runtime(), current_principal(), **query)
    return JOB_LIST.dump({"jobs": views, "next_cursor": cursor})


@bp.get("/<uuid:job_id>")
def get_job(job_id: UUID):
    """A job's aggregate status; 304 while it is an If-None-Match version, up to wait_seconds."""
    query = JOB_WAIT_QUERY.load(input_rules.single_values(request.args))
    # If-None-Match compares weakly (RFC 9110): a proxy that compresses may weaken the tag.
    known = frozenset(request.if_none_match.as_set(include_weak=True))
    try:
        view = jobs.get_job(
            get_runtime(),
            current_principal(),
            job_id,
            unless_versions=known,
            wait_seconds=query["wait_seconds"],
            until_finished=query["until"] == "finished",
        )
    except WaitRefused as refused:
        # No place to wait: the job as it is, and when to ask again.
        return _job_answer(refused.answer, known, {"Retry-After": str(refused.retry_after)})
    return _job_answer(view, known)


def _job_answer(view: jobs.JobView, known: frozenset[str], headers: dict | None = None):
    headers = {**_etag(view), **(headers or {})}
    # "*" matches whichever version the job is at: there is nothing to wait for.
    if view.version in known or request.if_none_match.star_tag:
        return Response(status=304, headers=headers)
    return _dump_job(view), 200, headers


def _etag(view: jobs.JobView) -> dict[str, str]:
    return {"ETag": f'"{view.version}"'}


@bp.get("/<uuid:job_id>/results")
def list_results(job_id: UUID):
    """A page of completed results in chunk order, from the first past `after`, each with its
    stored value if it has one."""
    query = RESULT_PAGE_QUERY.load(input_rules.single_values(request.args))
    page = task_values.list_completed_results(
        get_runtime(),
        current_principal(),
        job_id,
        after_index=query["after"],
        limit=query["limit"],
    )
    return RESULT_LIST.dump({"results": page.results, "next_after": page.next_after})


@bp.post("/<uuid:job_id>/cancel")
def cancel_job(job_id: UUID):
    """Cancel a job (a no-op for a cancelled one)."""
    view = jobs.cancel_job(get_runtime(), current_principal(), job_id, trace_id=current_trace_id())
    return _dump_job(view)


@bp.post("/cancel")
def cancel_jobs():
    """Cancel the caller's unfinished jobs a filter matches, up to a limit."""
    body = input_rules.load_json(JOB_CANCEL)
    done = jobs.cancel_jobs(get_runtime(), current_principal(), trace_id=current_trace_id(), **body)
    return JOB_CANCEL_RESULT.dump(done)


@bp.post("/<uuid:job_id>/retry")
def retry_job(job_id: UUID):
    """Re-queue a recoverable failed job and the jobs its failure failed."""
    view = jobs.retry_job(get_runtime(), current_principal(), job_id, trace_id=current_trace_id())
    return _dump_job(view)
