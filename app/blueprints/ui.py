"""The web dashboard: server-rendered pages over the same services the API calls."""

from __future__ import annotations

import json
import posixpath
import re
import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

from flask import Blueprint, Response, g, redirect, render_template, request, url_for
from marshmallow import ValidationError
from werkzeug.exceptions import (
    HTTPException,
    MethodNotAllowed,
    NotFound,
    RequestEntityTooLarge,
    UnsupportedMediaType,
)

from app import errors, input_rules, ui_forms, ui_session
from app.attempt_timeline import build_timeline
from app.runtime import get_runtime
from app.schemas import chunks as chunk_schemas
from app.schemas import jobs as job_schemas
from app.schemas import queue as queue_schemas
from app.schemas import schedules as schedule_schemas
from app.tracing import current_trace_id
from app.uploads import uploaded
from repositories.chunks import PREVIEW_CHARS
from services import (
    chunks,
    csvjobs,
    dependencies,
    jobs,
    logcontext,
    metrics,
    queue,
    schedules,
    task_values,
    workload_registry,
)
from services.errors import (
    ChunkwiseError,
    Conflict,
    Forbidden,
    InvalidInput,
    PayloadTooLarge,
    QueueFull,
    Unauthenticated,
    WaitRefused,
)

bp = Blueprint(
    "ui", __name__, url_prefix="/ui", static_folder="../static/ui", static_url_path="/static"
)

# Built once: building a schema deep-copies every field it declares.
JOB_LIST = job_schemas.JobListSchema()
JOB_LIST_QUERY = job_schemas.JobListQuerySchema()
JOB = job_schemas.JobSchema()
CHUNK_PAGE_QUERY = chunk_schemas.ChunkPageQuerySchema()
CSV_JOB_FORM = job_schemas.CsvJobFormSchema()
SCHEDULE_OWNER_QUERY = schedule_schemas.ScheduleOwnerQuerySchema()
WORKLOAD_ADD = queue_schemas.WorkloadAddSchema()
WORKLOAD_CHANGE = queue_schemas.WorkloadChangeSchema()
# The caps the workload forms ask for, in the order they show them; an empty box lifts a cap
# that may be lifted.
WORKLOAD_CAPS = tuple(WORKLOAD_CHANGE.fields)

OPEN_ENDPOINTS = frozenset({"ui.sign_in", "ui.static"})
OPERATOR_ENDPOINTS = frozenset(
    {
        "ui.queue_page",
        "ui.pause_workload",
        "ui.resume_workload",
        "ui.workers_page",
        "ui.add_workload",
        "ui.workload_page",
        "ui.remove_workload",
    }
)
# Nothing inline and nothing from elsewhere: scripts and styles come only from /ui/static.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
JOB_STATUSES = ("queued", "running", "merging", "succeeded", "failed", "cancelled")
CANCELLABLE = frozenset({"queued", "running", "merging"})
PAGE_SIZE = 50
# A job's page shows this many chunks at a time: it is redrawn every few seconds while the
# job runs, and a manifest job may have 10,000.
CHUNKS_SHOWN = 100
# And this many of the jobs waiting for it: a fan-out may have thousands.
RELATED_SHOWN = 100
# The job list's filters, under the names its form gives them.
FILTER_FIELDS = {
    "status": "Status",
    "label": "Label",
    "workload": "Workload",
    "owner": "Owner",
    "depends_on": "Waits for",
    "cursor": "Page",
}
# A job page's script waits this long on the job watch before asking again.
WATCH_SECONDS = 20
# A backslash, which some browsers read as a slash, or a control character.
UNSAFE_IN_LOCATION = re.compile(r"[\\\x00-\x1f\x7f]")
# A browser reads %2e in a path as a dot, so "/ui/%2e%2e/" climbs out of /ui/ like "/ui/../".
ENCODED_DOT = re.compile("%2e", re.IGNORECASE)
URLENCODED = "application/x-www-form-urlencoded"
DELIMITERS = {"comma": ",", "semicolon": ";", "tab": "\t", "pipe": "|"}


@bp.before_request
def require_signed_in_user() -> Response | None:
    """Send strangers to sign in; refuse form posts without the session's CSRF token.

    In that order, so a stranger's post is turned away before its body is read: reading a
    multipart body spools its files to disk. The sign-in form itself is never multipart.
    """
    if request.endpoint not in OPEN_ENDPOINTS:
        principal = ui_session.signed_in_principal(get_runtime())
        if principal is None:
            return redirect(url_for("ui.sign_in", next=_wanted_page()))
        g.principal = principal
        logcontext.bind(principal=principal.name)
        if request.endpoint in OPERATOR_ENDPOINTS and not principal.is_operator:
            raise Forbidden("this page is for operators")
    if request.method == "POST":
        if request.endpoint == "ui.sign_in" and request.mimetype != URLENCODED:
            raise UnsupportedMediaType(f"the sign-in form is sent as {URLENCODED}")
        ui_session.check_csrf(request.form.get("csrf_token"))
    return None


@bp.after_app_request
def protect_page(response: Response) -> Response:
    """Every dashboard response: strict CSP, never framed, never sniffed, never cached."""
    # App-wide, so a path no dashboard route matched (its 404 or 405) is covered as well.
    if not _under_dashboard(request.path):
        return response
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    if request.endpoint != "ui.static":
        response.headers["Cache-Control"] = "no-store"
    return response


@bp.app_context_processor
def page_context() -> dict:
    """What every dashboard template may use: the CSRF token and who is signed in."""
    return {"csrf_token": ui_session.csrf_token, "principal": g.get("principal")}


# --- sign-in --------------------------------------------------------------------------------


@bp.route("/sign-in", methods=["GET", "POST"])
def sign_in():
    """Show the sign-in form, or sign in with the user token typed into it."""
    target = _local_page(request.values.get("next"))
    if request.method == "GET":
        return render_template("ui/sign_in.html", next=target)
    try:
        ui_session.sign_in(get_runtime(), request.form.get("token", ""))
    except (Unauthenticated, Forbidden) as exc:
        # An unknown token and a worker's alike: the form again, still bound for `next`.
        page = render_template("ui/sign_in.html", next=target, message=exc.message)
        return page, errors.status_of(exc)
    return redirect(target, 303)


@bp.post("/sign-out")
def sign_out():
    """End the session."""
    ui_session.sign_out(get_runtime())
    return redirect(url_for("ui.sign_in"), 303)


def _wanted_page() -> str:
    # A post's action URL takes no GET: after sign-in, go to the page its form was on.
    if request.method == "POST":
        return _form_page() or url_for("ui.jobs_page")
    # Raw bytes a proxy let through need not be UTF-8; they are only ever sent back.
    query = request.query_string.decode("utf-8", "replace")
    return f"{request.path}?{query}" if query else request.path


def _form_page() -> str | None:
    # The page a job's buttons or the submit form are on; None for the forms on every page.
    job_id = (request.view_args or {}).get("job_id")
    if isinstance(job_id, UUID):  # not one app.path_ids refused
        return url_for("ui.job_page", job_id=job_id)
    if request.endpoint == "ui.submit":
        return url_for("ui.submit")
    return None


def _local_page(target: str | None) -> str:
    # Only a dashboard path, judged after its dot segments are resolved as the browser will:
    # never a redirect to another site or out of /ui/ after sign-in, nor a Location header a
    # control character would break.
    if not target or UNSAFE_IN_LOCATION.search(target):
        return url_for("ui.jobs_page")
    parts = urlsplit(target)
    path = ENCODED_DOT.sub(".", parts.path)
    resolved = posixpath.normpath(path) + ("/" if path.endswith("/") else "")
    if parts.scheme or parts.netloc or not resolved.startswith("/ui/"):
        return url_for("ui.jobs_page")
    return urlunsplit(("", "", resolved, parts.query, parts.fragment))


# --- jobs -----------------------------------------------------------------------------------


@bp.get("/")
def jobs_page():
    """The signed-in user's jobs, newest first, filtered by status and label."""
    filters = _list_filters()
    problems: dict[str, list[str]] = {}
    views, cursor = _checked(problems, lambda: _list_jobs(filters)) or ([], None)
    page = render_template(
        "ui/jobs.html",
        jobs=views,
        next_cursor=cursor,
        filters=filters,
        statuses=JOB_STATUSES,
        workloads=get_runtime().workloads.names(),
        problems=problems,
        field_names=FILTER_FIELDS,
    )
    return page, 422 if problems else 200


@bp.get("/jobs.json")
def jobs_json():
    """The same list as the page, as the API shapes it, for the page's polling script."""
    views, cursor = _list_jobs(_list_filters())
    return JOB_LIST.dump({"jobs": views, "next_cursor": cursor})


def _list_filters() -> dict[str, str]:
    # A blank filter box sends an empty value, which means no filter at all.
    return {name: value for name in FILTER_FIELDS if (value := request.args.get(name, "").strip())}


def _list_jobs(filters: dict[str, str]) -> tuple[list[jobs.JobView], str | None]:
    input_rules.single_values(request.args)  # a filter given twice is refused, as by the API
    query = JOB_LIST_QUERY.load({**filters, "limit": PAGE_SIZE})
    return jobs.list_jobs(get_runtime(), g.principal, **query)


@bp.get("/jobs/<uuid:job_id>")
def job_page(job_id: UUID):
    """One job: parameters, outcome, a page of its chunks and the timeline of their attempts."""
    rt = get_runtime()
    after = CHUNK_PAGE_QUERY.load(input_rules.single_values(request.args))["after"]
    view = jobs.get_job(rt, g.principal, job_id)
    chunk_views = chunks.list_chunks(rt, g.principal, job_id, after_index=after, limit=CHUNKS_SHOWN)
    related = dependencies.related_jobs(rt, g.principal, view.job, limit=RELATED_SHOWN)
    shown = JOB.dump(view)
    # Only a hint for which buttons to draw: the service decides whether a retry may happen.
    unrecoverable = (view.job.error or {}).get("code") in jobs.UNRECOVERABLE_ERRORS
    return render_template(
        "ui/job.html",
        view=view,
        csv_job=view.job.workload == csvjobs.WORKLOAD,
        chunks=chunk_views,
        timeline=build_timeline(view.job.created_at, chunk_views, datetime.now(UTC)),
        chunks_after=after,
        more_chunks=len(chunk_views) == CHUNKS_SHOWN,
        can_cancel=view.job.status in CANCELLABLE,
        # A job still waiting for a failed or cancelled one would only be refused.
        can_retry=view.job.status == "failed"
        and not unrecoverable
        and not any(s in ("failed", "cancelled") for s in related.depends_on.values()),
        partial_result=shown["partial_result"],
        input_digest=shown["input_digest"],
        related=related,
        more_related=len(related.needed_by) == RELATED_SHOWN,
        preview_chars=PREVIEW_CHARS,
    )


@bp.get("/tasks/<uuid:task_id>/result")
def task_result(task_id: UUID):
    """A task's stored result value, whole: the bytes the API serves (and result_sha256 digests)."""
    text = task_values.stored_result(get_runtime(), g.principal, task_id)
    return Response(text.encode(), mimetype="application/json")


@bp.get("/jobs/<uuid:job_id>/watch")
def watch_job(job_id: UUID):
    """The job as the API shows it, answered as soon as it differs from `version`.

    At once, with `retry_after`, when the process has no waiting place free.
    """
    known = request.args.get("version") or None
    try:
        view = jobs.get_job(
            get_runtime(),
            g.principal,
            job_id,
            unless_versions=frozenset([known] if known else []),
            wait_seconds=WATCH_SECONDS if known else 0,
        )
    except WaitRefused as refused:
        # Unchanged, and no place to wait: the page's script sleeps retry_after, then asks.
        view, after = refused.answer, refused.retry_after
        body = {"version": view.version, "job": JOB.dump(view), "retry_after": after}
        return body, 200, {"Retry-After": str(after)}
    return {"version": view.version, "job": JOB.dump(view)}


@bp.post("/jobs/<uuid:job_id>/cancel")
def cancel_job(job_id: UUID):
    """Cancel the job, then show it again."""
    jobs.cancel_job(get_runtime(), g.principal, job_id, trace_id=current_trace_id())
    return redirect(url_for("ui.job_page", job_id=job_id), 303)


@bp.post("/jobs/<uuid:job_id>/retry")
def retry_job(job_id: UUID):
    """Re-queue the failed job, then show it again."""
    jobs.retry_job(get_runtime(), g.principal, job_id, trace_id=current_trace_id())
    return redirect(url_for("ui.job_page", job_id=job_id), 303)


# --- submit ---------------------------------------------------------------------------------


# The submit form's controls, in its order, under the names its labels give them.
SUBMIT_FIELDS = {
    "file": "CSV file",
    "column": "Column",
    "delimiter": "Delimiter",
    "chunks": "Chunks",
    "priority": "Priority",
    "labels": "Labels",
    "submission_key": "Submission key",
}


@bp.route("/submit", methods=["GET", "POST"])
def submit():
    """Show the CSV form, or submit the uploaded CSV as a job."""
    if request.method == "GET":
        return _submit_form({}, {}, [], 200)
    problems: dict[str, list[str]] = {}
    upload = _checked(problems, _uploaded_csv)
    job_request = _checked(problems, _csv_job_request)
    key = _checked(problems, _submission_key)
    if problems:
        # The service judges the file and its column only once the rest is valid: say it now.
        if upload is not None:
            for name, messages in _csv_problems(upload).items():
                problems.setdefault(name, messages)
        return _submit_form(request.form, problems, [], 422)
    try:
        view = csvjobs.submit_csv_job(
            get_runtime(),
            g.principal,
            upload,
            job_request,
            trace_id=current_trace_id(),
            idempotency_key=key,
        )
    except PayloadTooLarge:
        return _submit_form(request.form, _too_large(), [], 413)
    except (InvalidInput, QueueFull) as exc:
        if isinstance(exc, QueueFull):
            metrics.ADMISSION_REJECTIONS.inc()
        fields = exc.details.get("fields")
        problems = ui_forms.in_form_words(fields) if fields else {}
        messages = [] if fields else [exc.message]
        return _submit_form(request.form, problems, messages, errors.status_of(exc))
    return redirect(url_for("ui.job_page", job_id=view.job.id), 303)


def _checked(problems: dict[str, list[str]], read):
    # One part of the form, or None with what is wrong noted: every refusal is shown at once.
    try:
        return read()
    except ValidationError as exc:
        problems.update(ui_forms.in_form_words(exc.messages))
    except InvalidInput as exc:
        problems.update(ui_forms.in_form_words(exc.details["fields"]))
    return None


def _submission_key() -> str | None:
    # The form's Idempotency-Key, under the header's rules.
    key = request.form.get("submission_key") or None
    return input_rules.checked_text("submission_key", key, input_rules.IDEMPOTENCY_KEY_MAX)


def _uploaded_csv():
    storage = request.files.get("file")
    upload = uploaded("file")
    if upload is None or storage is None or not storage.filename:
        raise InvalidInput.field("file", "choose a CSV file to upload")
    return upload


def _csv_job_request() -> csvjobs.CsvJobRequest:
    form = request.form
    fields = {
        name: form[name].strip()
        for name in ("column", "chunks", "priority")
        if form.get(name, "").strip()
    }
    text = form.get("labels", "")
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    delimiter = DELIMITERS.get(form.get("delimiter", ""), ",")
    if start := form.get("not_before", "").strip():
        fields["not_before"] = _in_utc(start)
    try:
        loaded = CSV_JOB_FORM.load(
            {**fields, "delimiter": delimiter, "label": [line for _, line in lines]}
        )
    except ValidationError as exc:
        raise ValidationError(ui_forms.labels_by_line(exc.messages, lines)) from exc
    return csvjobs.CsvJobRequest(**loaded)


def _in_utc(local: str) -> str:
    # A datetime-local box sends no offset; the form labels its time UTC. Anything else is
    # left for the schema to refuse in its own words.
    try:
        moment = datetime.fromisoformat(local)
    except ValueError:
        return local
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def _csv_problems(upload) -> dict[str, list[str]]:
    # What the service would say of the file and its column (not in the header, say).
    delimiter = DELIMITERS.get(request.form.get("delimiter", ""), ",")
    column = request.form.get("column", "").strip()
    return csvjobs.csv_problems(get_runtime(), upload, column, delimiter)


def _too_large() -> dict[str, list[str]]:
    return {"file": [f"larger than the {_upload_limit()} limit"]}


def _upload_limit() -> str:
    return f"{get_runtime().limits.max_upload_bytes / 2**20:g} MiB"


def _submit_form(values, problems: dict[str, list[str]], messages: list[str], status: int):
    in_form_order = dict.fromkeys([*SUBMIT_FIELDS, *problems])
    return (
        render_template(
            "ui/submit.html",
            values=values,
            problems={name: problems[name] for name in in_form_order if name in problems},
            messages=messages,
            field_names=SUBMIT_FIELDS,
            delimiters=DELIMITERS,
            submission_key=uuid.uuid4().hex,
            max_chunks=csvjobs.MAX_CHUNKS,
            upload_limit=_upload_limit(),
        ),
        status,
    )


# --- schedules ------------------------------------------------------------------------------


@bp.get("/schedules")
def schedules_page():
    """The signed-in user's schedules (an operator's: everyone's, each to pause, resume, run
    or delete): when each runs next and what its last run did."""
    listed = schedules.list_schedules(get_runtime(), g.principal)
    return render_template("ui/schedules.html", schedules=listed)


@bp.post("/schedules/<schedule_name:name>/pause")
def pause_schedule(name: str):
    """Pause the schedule, then show the schedules again."""
    return _set_paused(name, paused=True)


@bp.post("/schedules/<schedule_name:name>/resume")
def resume_schedule(name: str):
    """Resume the schedule from now, then show the schedules again."""
    return _set_paused(name, paused=False)


def _set_paused(name: str, *, paused: bool):
    schedules.pause_schedule(
        get_runtime(),
        g.principal,
        name,
        paused=paused,
        trace_id=current_trace_id(),
        owner=_schedule_owner(),
    )
    return redirect(url_for("ui.schedules_page"), 303)


@bp.post("/schedules/<schedule_name:name>/run")
def run_schedule(name: str):
    """Submit the schedule's job now, then show the job."""
    view = schedules.run_schedule_now(
        get_runtime(), g.principal, name, trace_id=current_trace_id(), owner=_schedule_owner()
    )
    return redirect(url_for("ui.job_page", job_id=view.job.id), 303)


@bp.post("/schedules/<schedule_name:name>/delete")
def delete_schedule(name: str):
    """Delete the schedule (its jobs stay), then show the schedules again."""
    schedules.delete_schedule(
        get_runtime(), g.principal, name, trace_id=current_trace_id(), owner=_schedule_owner()
    )
    return redirect(url_for("ui.schedules_page"), 303)


def _schedule_owner() -> str | None:
    # The page's forms name every schedule's owner, as the API's ?owner= does.
    return SCHEDULE_OWNER_QUERY.load(input_rules.single_values(request.args))["owner"]


# --- operators ------------------------------------------------------------------------------


@bp.get("/queue")
def queue_page():
    """Chunks by workload and state, the oldest pending age, leases against the caps."""
    return _queue_page({}, {}, 200)


def _queue_page(form, problems: dict, status: int):
    view = queue.queue_status(get_runtime())
    return render_template("ui/queue.html", queue=view, form=form, problems=problems), status


@bp.post("/workloads")
def add_workload():
    """Serve a new workload on every coordinator (caps left empty: the settings'), then show
    the queue again."""
    given = {n: request.form[n].strip() for n in ("name", *WORKLOAD_CAPS) if request.form.get(n)}
    try:
        body = WORKLOAD_ADD.load(given)
        name = body.pop("name")
        workload_registry.add_workload(
            get_runtime(), g.principal, name, body, trace_id=current_trace_id()
        )
    except ValidationError as exc:
        return _queue_page(request.form, ui_forms.in_form_words(exc.messages), 422)
    except (InvalidInput, Conflict) as exc:
        problems = ui_forms.in_form_words(exc.details.get("fields") or {"name": [exc.message]})
        return _queue_page(request.form, problems, errors.status_of(exc))
    return redirect(url_for("ui.queue_page", _anchor="workloads"), 303)


@bp.route("/workloads/<workload>", methods=["GET", "POST"])
def workload_page(workload: str):
    """Show a workload's caps in a form, or change them on every coordinator."""
    rt = get_runtime()
    if request.method == "GET":
        view = workload_registry.get_workload(rt, g.principal, workload)
        return _workload_form(view, {}, {}, 200)
    # Every box is sent: an empty one lifts its cap (or is refused where a cap is required).
    given = {n: request.form.get(n, "").strip() or None for n in WORKLOAD_CAPS}
    try:
        changes = WORKLOAD_CHANGE.load(given)
        workload_registry.change_workload(
            rt, g.principal, workload, changes, trace_id=current_trace_id()
        )
    except ValidationError as exc:
        view = workload_registry.get_workload(rt, g.principal, workload)
        return _workload_form(view, request.form, ui_forms.in_form_words(exc.messages), 422)
    except InvalidInput as exc:
        view = workload_registry.get_workload(rt, g.principal, workload)
        problems = ui_forms.in_form_words(exc.details.get("fields") or {})
        return _workload_form(view, request.form, problems, 422)
    return redirect(url_for("ui.queue_page", _anchor="workloads"), 303)


def _workload_form(view: queue.WorkloadView, form, problems: dict, status: int):
    values = form or asdict(view.caps)
    page = render_template("ui/workload.html", w=view, values=values, problems=problems)
    return page, status


@bp.post("/workloads/<workload>/remove")
def remove_workload(workload: str):
    """Stop serving a workload on every coordinator, then show the queue again."""
    workload_registry.remove_workload(
        get_runtime(), g.principal, workload, trace_id=current_trace_id()
    )
    return redirect(url_for("ui.queue_page", _anchor="workloads"), 303)


@bp.post("/workloads/<workload>/pause")
def pause_workload(workload: str):
    """Pause the workload's claims, then show the queue again."""
    return _set_workload_paused(workload, paused=True)


@bp.post("/workloads/<workload>/resume")
def resume_workload(workload: str):
    """Resume the workload's claims, then show the queue again."""
    return _set_workload_paused(workload, paused=False)


def _set_workload_paused(workload: str, *, paused: bool):
    queue.pause_workload(
        get_runtime(), g.principal, workload, paused=paused, trace_id=current_trace_id()
    )
    return redirect(url_for("ui.queue_page", _anchor="workloads"), 303)


@bp.get("/workers")
def workers_page():
    """Every worker with its heartbeat age, leases held, chunks done and peak memory."""
    workers = queue.list_workers(get_runtime())
    return render_template("ui/workers.html", workers=workers)


# --- errors ---------------------------------------------------------------------------------


@bp.errorhandler(ChunkwiseError)
def service_error(exc: ChunkwiseError):
    """A service's refusal as a page: 404 for another user's job, 403, 409, ..."""
    return _error_page(errors.status_of(exc), exc.message)


@bp.errorhandler(ValidationError)
def invalid_query(exc: ValidationError):
    """A filter the polled list cannot use (the list page shows it at its field)."""
    problems = ui_forms.in_form_words(exc.messages)
    return _error_page(422, "; ".join(f"{n}: {'; '.join(m)}" for n, m in problems.items()))


@bp.errorhandler(HTTPException)
def http_error(exc: HTTPException):
    """Werkzeug's refusals (a body too large, a malformed form) as a page."""
    if isinstance(exc, RequestEntityTooLarge) and request.endpoint == "ui.submit":
        # Refused unread, so none of the form's values can be kept; the form says why.
        return _submit_form({}, _too_large(), [], 413)
    page, status = _error_page(exc.code or 500, exc.description or exc.name)
    # Keep what the exception says beyond the body, such as Allow on a 405.
    headers = [(k, v) for k, v in exc.get_headers() if k.lower() != "content-type"]
    return page, status, headers


@bp.app_errorhandler(NotFound)
@bp.app_errorhandler(MethodNotAllowed)
def unrouted(exc: HTTPException):
    """A dashboard path no route takes is a page too; any other path, the API's error body."""
    # Flask gives a request that matched no route to the app's handlers, never a blueprint's.
    if _under_dashboard(request.path):
        return http_error(exc)
    return errors.http_error(exc)


def _under_dashboard(path: str) -> bool:
    return path == bp.url_prefix or path.startswith(f"{bp.url_prefix}/")


def _error_page(status: int, message: str):
    job_id = (request.view_args or {}).get("job_id")
    back = _form_page() if status != 404 else None
    page = render_template(
        "ui/error.html", status=status, message=message, job_id=job_id, back=back
    )
    return page, status


@bp.app_template_filter("timestamp")
def timestamp(value: datetime | None) -> str:
    """A moment in UTC, to the second."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else "—"


@bp.app_template_filter("as_json")
def as_json(value: object) -> str:
    """A value as the API's JSON spells it (null, true, double quotes), not Python's repr."""
    return json.dumps(value, ensure_ascii=False)


@bp.app_template_filter("duration")
def duration(seconds: float | None) -> str:
    """A length of time a person reads at a glance."""
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


@bp.app_template_filter("mebibytes")
def mebibytes(size: int | None) -> str:
    """A byte count in MiB."""
    return f"{size / 2**20:.1f} MiB" if size is not None else "—"
