"""The dashboard without a browser: sign-in, isolation, CSRF, escaping and security headers."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime, timedelta
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest

from app import create_app, uploads
from app.runtime import close
from devstack.sample_csv import generate_csv
from services import auth, schedules
from tests.integration.csv_worker import settings
from tests.integration.dashboard_forms import csrf_of
from tests.integration.manifests import WORKER, manifest

DATA = generate_csv(40, seed=3)
HOSTILE = "<script>document.title='owned'</script>"
RLO = "\u202e"


def submit_through_form(
    browser, *, column: str = "value", labels: str = "", data=DATA, **fields: str
):
    """POST the dashboard's submit form as a browser would; `fields` override its values."""
    form = browser.get("/ui/submit")
    return browser.post(
        "/ui/submit",
        data={
            "csrf_token": csrf_of(form),
            "file": (io.BytesIO(data), "data.csv"),
            "column": column,
            "delimiter": "comma",
            "chunks": "2",
            "priority": "3",
            "labels": labels,
            **fields,
        },
        content_type="multipart/form-data",
    )


def shown_text(html: str) -> str:
    """What a page says, without its markup."""
    return unescape(re.sub(r"<[^>]+>", "", html))


def control(html: str, name: str) -> str:
    """The opening tag of the form control with this name."""
    return re.search(rf'<(?:input|select|textarea)\b[^>]*\bname="{name}"[^>]*>', html).group()


def field_error(html: str, name: str) -> str:
    """The message shown at a form control, as text."""
    found = re.search(rf'<span class="field-error" id="{name}-error">(.*?)</span>', html, re.S)
    return shown_text(found.group(1)) if found else ""


def owner_cell(html: str, job_id: str) -> str:
    """The Owner column of this job's row in the list."""
    row = re.search(rf'<tr data-job-id="{job_id}".*?</tr>', html, re.S).group()
    return shown_text(re.search(r'<td class="owner">(.*?)</td>', row, re.S).group(1))


def next_of(answer) -> str:
    """The page a redirect to sign-in will come back to."""
    location = urlsplit(answer.headers["Location"])
    assert location.path == "/ui/sign-in"
    return parse_qs(location.query)["next"][0]


def job_id_of(answer) -> str:
    """The job id a successful submission redirected to."""
    assert answer.status_code == 303, answer.text
    return answer.headers["Location"].rsplit("/", 1)[1]


# --- sign-in --------------------------------------------------------------------------------


def test_every_page_sends_a_stranger_to_sign_in(client):
    for path in [
        "/ui/",
        "/ui/submit",
        "/ui/schedules",
        "/ui/queue",
        "/ui/workers",
        "/ui/jobs.json",
    ]:
        answer = client.get(path)

        assert answer.status_code == 302, path
        assert answer.headers["Location"].startswith("/ui/sign-in?next="), path


def test_signing_in_sets_an_httponly_samesite_cookie_scoped_to_the_dashboard(client, tokens):
    form = client.get("/ui/sign-in")

    answer = client.post(
        "/ui/sign-in",
        data={"csrf_token": csrf_of(form), "token": tokens["user"], "next": "/ui/submit"},
    )

    assert (answer.status_code, answer.headers["Location"]) == (303, "/ui/submit")
    cookie = answer.headers["Set-Cookie"]
    assert cookie.startswith("chunkwise_ui=")
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/ui" in cookie
    # Plain http here: a Secure cookie would be dropped by the browser.
    assert "Secure" not in cookie
    assert client.get("/ui/").status_code == 200


def test_the_session_cookie_keeps_only_a_session_id_which_is_no_api_token(
    app, client, sign_in, tokens
):
    cookie = sign_in("user").get_cookie("chunkwise_ui", path="/ui")
    # Signed, not encrypted: whatever the session holds, anyone with the cookie can read.
    held = app.session_interface.get_signing_serializer(app).loads(cookie.value)

    assert set(held) == {"sid", "csrf", "_permanent"}
    assert tokens["user"] not in str(held)
    assert auth.token_digest(tokens["user"]) not in str(held)
    for bearer in (held["sid"], auth.USER_PREFIX + held["sid"]):
        answer = client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {bearer}"})
        assert answer.status_code == 401


def test_the_session_cookie_is_secure_when_the_dashboard_is_served_over_https(app, tokens):
    browser = app.test_client()
    form = browser.get("/ui/sign-in", base_url="https://dashboard.example")

    answer = browser.post(
        "/ui/sign-in",
        data={"csrf_token": csrf_of(form), "token": tokens["user"]},
        base_url="https://dashboard.example",
    )

    assert answer.status_code == 303
    assert "; Secure" in answer.headers["Set-Cookie"]


def test_a_worker_token_is_refused_at_sign_in(client, tokens):
    form = client.get("/ui/sign-in")

    answer = client.post(
        "/ui/sign-in", data={"csrf_token": csrf_of(form), "token": tokens["worker"]}
    )

    assert answer.status_code == 403
    assert "worker tokens cannot sign in" in answer.text
    assert client.get("/ui/").status_code == 302


def test_a_worker_token_sees_the_sign_in_form_again_still_bound_for_next(client, tokens):
    form = client.get("/ui/sign-in?next=/ui/submit")

    answer = client.post(
        "/ui/sign-in",
        data={"csrf_token": csrf_of(form), "token": tokens["worker"], "next": "/ui/submit"},
    )

    assert answer.status_code == 403
    assert 'name="token"' in answer.text and 'name="next" value="/ui/submit"' in answer.text
    assert 'role="alert">worker tokens cannot sign in to the dashboard<' in answer.text


def test_an_unknown_token_is_refused_at_sign_in(client):
    form = client.get("/ui/sign-in")

    answer = client.post(
        "/ui/sign-in", data={"csrf_token": csrf_of(form), "token": "cwu_" + "x" * 43}
    )

    assert answer.status_code == 401
    assert "a valid bearer token is required" in answer.text
    assert client.get("/ui/").status_code == 302


@pytest.mark.parametrize(
    "wanted",
    [
        "https://elsewhere.example/ui/",
        "/ui/\\elsewhere.example",
        "/ui/\r\nX-Injected: 1",
        "/ui/\nX-Injected: 1",
        "/ui/\x7f",
        "/ui/../metrics",
        "/ui/./x/../../metrics",
        "/ui/%2e%2E/metrics",
    ],
    ids=["another site", "backslash", "CRLF", "LF", "DEL", "dot-dot", "dots", "encoded dots"],
)
def test_sign_in_goes_only_to_a_dashboard_page_a_location_header_can_carry(client, tokens, wanted):
    form = client.get("/ui/sign-in")

    answer = client.post(
        "/ui/sign-in",
        data={"csrf_token": csrf_of(form), "token": tokens["user"], "next": wanted},
    )

    assert (answer.status_code, answer.headers["Location"]) == (303, "/ui/")
    assert "X-Injected" not in answer.headers


def test_sign_in_resolves_dot_segments_in_next_before_going_there(client, tokens):
    form = client.get("/ui/sign-in")

    answer = client.post(
        "/ui/sign-in",
        data={
            "csrf_token": csrf_of(form),
            "token": tokens["user"],
            "next": "/ui/x/./../submit?a=1",
        },
    )

    assert (answer.status_code, answer.headers["Location"]) == (303, "/ui/submit?a=1")


def test_signing_out_ends_the_session(sign_in):
    browser = sign_in("user")

    answer = browser.post("/ui/sign-out", data={"csrf_token": csrf_of(browser.get("/ui/"))})

    assert (answer.status_code, answer.headers["Location"]) == (303, "/ui/sign-in")
    assert browser.get("/ui/").status_code == 302


def test_a_revoked_token_ends_its_session_at_once(sign_in, tokens, db):
    browser = sign_in("user")
    db.execute(
        "UPDATE api_tokens SET revoked_at = now() WHERE token_sha256 = %s",
        (auth.token_digest(tokens["user"]),),
    )

    # The session is looked up with its live token on every page: nothing to hear first.
    assert browser.get("/ui/").status_code == 302


def test_a_session_signed_by_one_process_is_valid_in_another_on_the_same_run_directory(
    app_config, sign_in
):
    browser = sign_in("user")
    # Each gunicorn worker builds its own app: the second app reads the key the first wrote.
    second = create_app(app_config)
    try:
        cookie = browser.get_cookie("chunkwise_ui", path="/ui")
        other = second.test_client()
        other.set_cookie("chunkwise_ui", cookie.value, path="/ui")

        assert other.get("/ui/").status_code == 200
    finally:
        close(second.extensions["chunkwise.runtime"])


# --- isolation ------------------------------------------------------------------------------


def test_another_users_job_page_is_404_like_a_missing_one(sign_in, submit):
    job = submit(manifest(1), as_="other")
    browser = sign_in("user")
    csrf = csrf_of(browser.get("/ui/"))

    for answer in [
        browser.get(f"/ui/jobs/{job['id']}"),
        browser.get(f"/ui/jobs/{job['id']}/watch"),
        browser.post(f"/ui/jobs/{job['id']}/cancel", data={"csrf_token": csrf}),
        browser.get("/ui/jobs/6f1c1a1e-0000-4000-8000-000000000000"),
    ]:
        assert answer.status_code == 404
        assert "does not exist" in answer.text
    assert job["id"] not in browser.get("/ui/").text


def test_the_operator_pages_are_403_for_users_and_open_to_operators(sign_in):
    user, operator = sign_in("user"), sign_in("operator")

    for path in ["/ui/queue", "/ui/workers"]:
        assert user.get(path).status_code == 403
        assert "this page is for operators" in user.get(path).text
        assert operator.get(path).status_code == 200


def test_the_workers_page_and_api_hold_each_workers_leases_to_its_own_limit(
    sign_in, submit, claim, client, headers
):
    submit(manifest(3))
    claim("echo-worker", capacity=5)
    claim("csv-worker", capacity=4, workloads=["csv_stats"])
    claim("mixed-worker", capacity=6, workloads=["csv_stats", "echo"])

    page = sign_in("operator").get("/ui/workers").text

    def leases(worker: str) -> str:
        row = re.search(rf'<tr data-worker="{worker}">(.*?)</tr>', page, re.S).group(1)
        return re.search(r"(\d+) of (\d+)", row).group(0)

    # echo has no per-worker cap: the capacity bounds it; csv_stats's cap is 2.
    assert leases("echo-worker") == "3 of 5"
    assert leases("csv-worker") == "0 of 2"
    assert leases("mixed-worker") == "0 of 6"
    listing = client.get("/api/v1/workers", headers=headers["operator"]).get_json()["workers"]
    assert {w["worker_id"]: (w["leases_held"], w["lease_limit"]) for w in listing} == {
        "echo-worker": (3, 5),
        "csv-worker": (0, 2),
        "mixed-worker": (0, 6),
    }


def test_an_operator_sees_everyones_jobs_as_the_api_does(sign_in, submit):
    job = submit(manifest(1), as_="other")

    assert job["id"] in sign_in("operator").get("/ui/").text


def test_an_operator_sees_whose_each_job_is_and_can_list_one_owners(sign_in, submit):
    mine = submit(manifest(1))
    theirs = submit(manifest(1), as_="other")
    browser = sign_in("operator")

    everyone = browser.get("/ui/").text
    one_owner = browser.get("/ui/?owner=other_user").text

    assert "<th>Owner</th>" in everyone
    assert owner_cell(everyone, theirs["id"]) == "other_user"
    assert owner_cell(everyone, mine["id"]) == "compute_user"
    assert theirs["id"] in one_owner and mine["id"] not in one_owner
    assert 'value="other_user"' in control(one_owner, "owner")
    job_page = browser.get(f"/ui/jobs/{theirs['id']}").text
    assert "<tr><th>Owner</th><td><bdi>other_user</bdi></td></tr>" in job_page


def test_an_owner_filter_the_list_cannot_use_is_shown_at_its_field(sign_in):
    page = sign_in("operator").get("/ui/?owner=a%00b")

    assert page.status_code == 422
    assert 'aria-invalid="true"' in control(page.text, "owner")
    assert field_error(page.text, "owner") == "must not contain NUL (\\u0000)"


def test_a_user_sees_no_owner_column_or_filter_on_their_own_jobs(sign_in, submit):
    submit(manifest(1))

    page = sign_in("user").get("/ui/").text

    assert "<th>Owner</th>" not in page and 'name="owner"' not in page


# --- CSRF -----------------------------------------------------------------------------------


def test_a_form_post_without_the_sessions_csrf_token_is_refused(sign_in, submit, job_row):
    job = submit(manifest(1))
    browser = sign_in("user")

    for form in [{}, {"csrf_token": "forged"}]:
        answer = browser.post(f"/ui/jobs/{job['id']}/cancel", data=form)

        assert answer.status_code == 403
        assert "CSRF" in answer.text
    assert job_row(job["id"])["status"] == "queued"


@pytest.mark.parametrize("token", ["\u00e9", "\u00e9" * 43, "\U0001f600", "\ufffd"])
def test_a_csrf_token_beyond_ascii_is_refused_like_any_forged_one(client, tokens, token):
    client.get("/ui/sign-in")

    answer = client.post("/ui/sign-in", data={"csrf_token": token, "token": tokens["user"]})

    assert answer.status_code == 403
    assert "CSRF" in answer.text


def test_a_strangers_form_post_is_sent_to_sign_in_before_its_body_is_read(client, monkeypatch):
    spooled = []
    monkeypatch.setattr(uploads.Spool, "write", lambda self, data: spooled.append(data))
    client.get("/ui/sign-in")  # a session with a CSRF token, but nobody signed in

    answer = client.post(
        "/ui/submit",
        data={"csrf_token": "whatever", "file": (io.BytesIO(DATA), "data.csv")},
        content_type="multipart/form-data",
    )

    assert answer.status_code == 302 and "/ui/sign-in" in answer.headers["Location"]
    assert spooled == []


def test_a_strangers_form_post_comes_back_after_sign_in_to_a_page_get_can_show(client, submit):
    job = submit(manifest(1))
    client.get("/ui/sign-in")

    for action, page in [
        (f"/ui/jobs/{job['id']}/cancel", f"/ui/jobs/{job['id']}"),
        (f"/ui/jobs/{job['id']}/retry", f"/ui/jobs/{job['id']}"),
        ("/ui/submit", "/ui/submit"),
        ("/ui/sign-out", "/ui/"),
    ]:
        answer = client.post(action, data={"csrf_token": "whatever"})

        assert answer.status_code == 302, action
        assert next_of(answer) == page, action


def test_a_stale_csrf_token_page_links_back_to_the_form_it_came_from(sign_in, submit):
    job = submit(manifest(1))
    browser = sign_in("user")

    submitted = browser.post(
        "/ui/submit", data={"csrf_token": "stale"}, content_type="multipart/form-data"
    )
    cancelled = browser.post(f"/ui/jobs/{job['id']}/cancel", data={"csrf_token": "stale"})

    assert submitted.status_code == 403 and 'id="back" href="/ui/submit"' in submitted.text
    assert cancelled.status_code == 403
    assert f'id="back" href="/ui/jobs/{job["id"]}"' in cancelled.text


def test_a_sign_in_sent_as_multipart_is_refused_unread(client, tokens):
    form = client.get("/ui/sign-in")

    answer = client.post(
        "/ui/sign-in",
        data={"csrf_token": csrf_of(form), "token": tokens["user"]},
        content_type="multipart/form-data",
    )

    assert answer.status_code == 415
    assert client.get("/ui/").status_code == 302


def test_a_query_string_of_raw_bytes_is_carried_to_sign_in_not_a_500(client):
    # As a WSGI server hands over what a proxy let through: bytes, one per latin-1 character.
    answer = client.get("/ui/", environ_overrides={"QUERY_STRING": "status=\xff"})

    assert answer.status_code == 302
    assert "/ui/sign-in" in answer.headers["Location"]


def test_a_sign_in_without_the_csrf_token_is_refused(client, tokens):
    answer = client.post("/ui/sign-in", data={"token": tokens["user"]})

    assert answer.status_code == 403
    assert client.get("/ui/").status_code == 302


def test_cancel_with_the_csrf_token_cancels_the_job_and_shows_it_again(sign_in, submit, job_row):
    job = submit(manifest(2))
    browser = sign_in("user")
    page = browser.get(f"/ui/jobs/{job['id']}")
    assert 'id="cancel"' in page.text

    answer = browser.post(f"/ui/jobs/{job['id']}/cancel", data={"csrf_token": csrf_of(page)})

    assert (answer.status_code, answer.headers["Location"]) == (303, f"/ui/jobs/{job['id']}")
    assert job_row(job["id"])["status"] == "cancelled"
    assert 'id="cancel"' not in browser.get(f"/ui/jobs/{job['id']}").text


def test_retry_with_the_csrf_token_requeues_a_failed_job(
    sign_in, submit, claim, task_call, job_row
):
    job = submit(manifest(1))
    claimed = claim()[0]
    failure = {
        "worker_id": WORKER,
        "attempt": claimed["attempt"],
        "lease_token": claimed["lease_token"],
        "error_code": "boom",
    }
    assert (
        task_call(claimed["task_id"], "failure", {**failure, "retryable": False}).status_code == 200
    )
    browser = sign_in("user")
    page = browser.get(f"/ui/jobs/{job['id']}")
    assert 'id="retry"' in page.text and 'id="cancel"' not in page.text

    answer = browser.post(f"/ui/jobs/{job['id']}/retry", data={"csrf_token": csrf_of(page)})

    assert (answer.status_code, answer.headers["Location"]) == (303, f"/ui/jobs/{job['id']}")
    assert job_row(job["id"])["status"] == "queued"


def test_a_succeeded_manifest_job_points_to_its_result_manifests(sign_in, submit, claim, complete):
    job = submit(manifest(1))
    complete(claim()[0])

    page = sign_in("user").get(f"/ui/jobs/{job['id']}").text

    assert 'id="manifest-results"' in page and f"/api/v1/jobs/{job['id']}/results" in page
    assert 'id="cancel"' not in page and 'id="retry"' not in page


def chunk_row(html: str, index: int) -> list[str]:
    """The cells of one chunk's row in the job page's chunk table, as text."""
    row = re.search(rf'<tr data-chunk="{index}".*?</tr>', html, re.S).group()
    return [shown_text(cell).strip() for cell in re.findall(r"<td\b[^>]*>(.*?)</td>", row, re.S)]


def test_a_manifest_jobs_chunks_show_their_input_and_result_uris_not_records(
    sign_in, submit, claim, complete
):
    # Parameters named like a CSV chunk's bounds are the task's own, not records.
    body = manifest(2)
    body["tasks"][0]["parameters"] = {"record_start": 5, "record_end": 9}
    job = submit(body)
    done = complete(claim()[0])

    page = sign_in("user").get(f"/ui/jobs/{job['id']}").text

    assert "<th>Input</th><th>Result</th>" in page and "<th>Records</th>" not in page
    assert chunk_row(page, 0)[3:5] == ["s3://in/0", f"s3://out/{done['task_id']}/out"]
    assert chunk_row(page, 1)[3:5] == ["s3://in/1", "—"]
    assert "5–9" not in page


def test_a_jobs_chunks_show_their_args_stored_result_and_escaped_traceback(
    sign_in, submit, claim, task_call
):
    job = submit({"workload": "echo", "tasks": [{"args": {"x": 1}}, {"args": [HOSTILE]}]})
    done, failed = sorted(claim(capacity=2), key=lambda t: t["chunk_index"])
    value = {"rows": "y" * 300}
    task_call(done["task_id"], "result", {**_lease_of(done), "value": value})
    trace = f'Traceback (most recent call last):\n  raise ValueError("{HOSTILE}")'
    failure = {"error_code": "worker_error", "retryable": True, "details": {"traceback": trace}}
    task_call(failed["task_id"], "failure", {**_lease_of(failed), **failure})
    browser = sign_in("user")

    page = browser.get(f"/ui/jobs/{job['id']}").text

    args, result = chunk_row(page, 0)[3:5]
    assert args == '{"x":1}'
    assert result.startswith('{"rows":"yyy') and result.endswith("…") and len(result) == 200
    link = f"/ui/tasks/{done['task_id']}/result"
    assert f'href="{link}"' in page
    assert HOSTILE not in page and "&lt;script&gt;" in page
    assert f'raise ValueError("{HOSTILE}")' in shown_text(chunk_row_html(page, 1))
    whole = browser.get(link)
    assert whole.status_code == 200 and whole.get_json() == value
    assert sign_in("other").get(link).status_code == 404


def _lease_of(claimed: dict) -> dict:
    return {
        "worker_id": WORKER,
        "attempt": claimed["attempt"],
        "lease_token": claimed["lease_token"],
    }


def chunk_row_html(html: str, index: int) -> str:
    """One chunk's row in the job page's chunk table, as markup."""
    return re.search(rf'<tr data-chunk="{index}".*?</tr>', html, re.S).group()


@settings(CHUNKWISE_RETRY_DELAY_SECONDS="60", CHUNKWISE_RETRY_DELAY_MAX_SECONDS="60")
def test_a_chunk_waiting_out_a_retry_says_when_it_will_run(sign_in, submit, claim, task_call):
    job = submit(manifest(2, max_attempts=3))
    leased = claim()[0]
    failure = {"worker_id": WORKER, "attempt": 1, "error_code": "down", "retryable": True}
    failure["lease_token"] = leased["lease_token"]
    assert task_call(leased["task_id"], "failure", failure).status_code == 200

    page = sign_in("user").get(f"/ui/jobs/{job['id']}").text

    assert re.fullmatch(r"pending retry at \S.*", chunk_row(page, leased["chunk_index"])[1])
    assert chunk_row(page, 1 - leased["chunk_index"])[1] == "pending"


def test_a_scheduled_jobs_page_says_when_it_may_start(sign_in, submit):
    when = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    scheduled = submit(manifest(1, not_before=when.isoformat()))
    unscheduled = submit(manifest(1))
    browser = sign_in("user")

    page = browser.get(f"/ui/jobs/{scheduled['id']}").text

    assert f'<td id="not-before">{when:%Y-%m-%d %H:%M:%S}' in page
    assert chunk_row(page, 0)[1] == f"pending starts at {when:%Y-%m-%d %H:%M:%S} UTC"
    assert 'id="not-before"' not in browser.get(f"/ui/jobs/{unscheduled['id']}").text


def test_a_dependent_jobs_page_links_its_prerequisites_and_says_its_chunks_wait(sign_in, submit):
    first = submit(manifest(1))
    then = submit(manifest(1, depends_on=[first["id"]]))
    browser = sign_in("user")

    page = browser.get(f"/ui/jobs/{then['id']}").text
    before = browser.get(f"/ui/jobs/{first['id']}").text

    link = f'<a href="/ui/jobs/{first["id"]}"><code>{first["id"]}</code></a>'
    assert f'<td id="depends-on">{link} <span class="status status-queued">queued</span>' in page
    assert chunk_row(page, 0)[1] == "pending waits for the jobs it depends on"
    assert 'id="depends-on"' not in before
    assert f'<td id="needed-by"><a href="/ui/jobs/{then["id"]}">' in before
    assert 'id="needed-by"' not in page


def test_a_jobs_page_links_the_whole_list_of_a_fan_out_it_shows_the_first_of(sign_in, submit):
    first = submit(manifest(1))
    waiting = [submit(manifest(1, depends_on=[first["id"]])) for _ in range(101)]
    browser = sign_in("user")

    page = browser.get(f"/ui/jobs/{first['id']}").text
    listed = browser.get(f"/ui/?depends_on={first['id']}").text
    unusable = browser.get("/ui/?depends_on=not-a-job")

    assert page.count('<a href="/ui/jobs/') - page.count(f'<a href="/ui/jobs/{first["id"]}') == 100
    assert f'id="all-needed-by" href="/ui/?depends_on={first["id"]}"' in page
    assert f'value="{first["id"]}"' in control(listed, "depends_on")
    assert waiting[-1]["id"] in listed and f'<a href="/ui/jobs/{first["id"]}"' not in listed
    assert unusable.status_code == 422
    assert field_error(unusable.text, "depends_on") == "Not a valid UUID."


def test_a_job_its_prerequisites_failure_failed_links_the_job_whose_retry_brings_it_back(
    sign_in, submit, claim, task_call
):
    first = submit(manifest(1))
    then = submit(manifest(1, depends_on=[first["id"]]))
    [task] = claim()
    failure = {
        "worker_id": WORKER,
        "attempt": task["attempt"],
        "lease_token": task["lease_token"],
        "error_code": "boom",
    }
    assert task_call(task["task_id"], "failure", {**failure, "retryable": False}).status_code == 200
    browser = sign_in("user")

    page = browser.get(f"/ui/jobs/{then['id']}").text
    cause = browser.get(f"/ui/jobs/{first['id']}").text

    hint = shown_text(page.split('<p id="brought-back">', 1)[1].split("</p>", 1)[0])
    assert hint.startswith("This job never ran. Retrying that job (or, if it never ran either")
    assert f'Retrying <a href="/ui/jobs/{first["id"]}">that job</a>' in page
    assert 'id="retry"' not in page  # it would be refused while the first job is failed
    assert 'id="retry"' in cause


def test_a_jobs_page_shows_only_the_related_jobs_the_viewer_may_see(sign_in, submit):
    first = submit(manifest(1))
    theirs = submit(manifest(1, depends_on=[first["id"]]), as_="operator")

    as_owner = sign_in("user").get(f"/ui/jobs/{first['id']}").text
    as_operator = sign_in("operator").get(f"/ui/jobs/{first['id']}").text

    assert 'id="needed-by"' not in as_owner
    assert f'<td id="needed-by"><a href="/ui/jobs/{theirs["id"]}">' in as_operator


def test_a_timed_jobs_page_shows_its_timeout_and_a_running_chunk_its_deadline(
    sign_in, submit, claim
):
    timed = submit(manifest(2, timeout_seconds=600))
    [leased] = claim()
    deadline = datetime.fromisoformat(leased["deadline"])
    browser = sign_in("user")

    page = browser.get(f"/ui/jobs/{timed['id']}").text

    assert '<td id="timeout">10 min 0 s an attempt</td>' in page
    assert chunk_row(page, leased["chunk_index"])[6].endswith(
        f"ends by {deadline:%Y-%m-%d %H:%M:%S} UTC"
    )
    assert chunk_row(page, 1 - leased["chunk_index"])[6] == "—"
    assert 'id="timeout"' not in browser.get(f"/ui/jobs/{submit(manifest(1))['id']}").text


@pytest.fixture
def put_schedule(client, headers):
    """PUT a schedule through the API as the user."""

    def put(name: str, cron: str = "0 3 * * *", **extra) -> dict:
        body = {"cron": cron, "job": manifest(1), **extra}
        answer = client.put(f"/api/v1/schedules/{name}", json=body, headers=headers["user"])
        assert answer.status_code == 201, answer.get_json()
        return answer.get_json()

    return put


def schedule_row_cells(html: str, name: str) -> list[str]:
    """The cells of one schedule's row on the schedules page, as text."""
    row = re.search(rf'<tr data-schedule="{re.escape(name)}".*?</tr>', html, re.S).group()
    return [shown_text(cell).strip() for cell in re.findall(r"<td\b[^>]*>(.*?)</td>", row, re.S)]


def test_the_schedules_page_lists_the_users_schedules_with_their_runs(
    sign_in, put_schedule, rt, db
):
    nightly = put_schedule("nightly")
    put_schedule("later", paused=True, timezone="Asia/Tokyo")
    db.execute(
        "UPDATE schedules SET next_run_at = now() - interval '1 second' WHERE name = 'nightly'"
    )
    schedules.run_due_schedules(rt)
    last_job = str(
        db.execute("SELECT last_job_id FROM schedules WHERE name = 'nightly'").fetchone()[
            "last_job_id"
        ]
    )

    page = sign_in("user").get("/ui/schedules").text

    cells = schedule_row_cells(page, "nightly")
    assert cells[:2] == ["nightly", "0 3 * * *"] and cells[2].endswith("03:00:00 UTC")
    assert cells[4] == last_job and f'href="/ui/jobs/{last_job}"' in page
    assert schedule_row_cells(page, "later")[1:3] == ["0 3 * * * Asia/Tokyo", "paused"]
    assert nightly["name"] not in sign_in("other").get("/ui/schedules").text
    as_operator = sign_in("operator").get("/ui/schedules").text
    assert schedule_row_cells(as_operator, "nightly")[1] == "compute_user"


def test_pausing_resuming_and_deleting_a_schedule_from_its_page(sign_in, put_schedule, db):
    put_schedule("nightly")
    browser = sign_in("user")
    token = csrf_of(browser.get("/ui/schedules"))

    paused = browser.post("/ui/schedules/nightly/pause", data={"csrf_token": token})
    assert (paused.status_code, paused.headers["Location"]) == (303, "/ui/schedules")
    assert db.execute("SELECT paused FROM schedules").fetchone()["paused"] is True
    assert ">Resume</button>" in browser.get("/ui/schedules").text

    db.execute("UPDATE schedules SET next_run_at = now() - interval '1 day'")
    browser.post("/ui/schedules/nightly/resume", data={"csrf_token": token})
    row = db.execute("SELECT paused, next_run_at > now() AS ahead FROM schedules").fetchone()
    assert row == {"paused": False, "ahead": True}

    browser.post("/ui/schedules/nightly/delete", data={"csrf_token": token})
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 0
    actions = db.execute(
        "SELECT action FROM audit_log WHERE action LIKE 'schedule.%' ORDER BY id"
    ).fetchall()
    assert [a["action"] for a in actions] == [
        "schedule.put",
        "schedule.pause",
        "schedule.resume",
        "schedule.delete",
    ]


def test_run_now_on_the_schedules_page_submits_the_job_and_shows_it(sign_in, put_schedule, db):
    put_schedule("nightly")
    browser = sign_in("user")
    token = csrf_of(browser.get("/ui/schedules"))

    ran = browser.post("/ui/schedules/nightly/run", data={"csrf_token": token})

    job = db.execute("SELECT id, labels FROM jobs").fetchone()
    assert (ran.status_code, ran.headers["Location"]) == (303, f"/ui/jobs/{job['id']}")
    assert job["labels"] == {"schedule": "nightly"}


def test_a_schedule_action_without_the_csrf_token_or_on_anothers_schedule_is_refused(
    sign_in, put_schedule, db
):
    put_schedule("nightly")
    mine, theirs = sign_in("user"), sign_in("other")

    forged = mine.post("/ui/schedules/nightly/delete", data={"csrf_token": "forged"})
    foreign = theirs.post(
        "/ui/schedules/nightly/delete", data={"csrf_token": csrf_of(theirs.get("/ui/schedules"))}
    )
    malformed = mine.post(
        "/ui/schedules/-bad/pause", data={"csrf_token": csrf_of(mine.get("/ui/schedules"))}
    )

    assert forged.status_code == 403 and foreign.status_code == 404
    assert malformed.status_code == 422 and "name:" in malformed.text
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 1


def test_an_operator_pauses_runs_and_deletes_another_users_schedule_from_the_page(
    sign_in, put_schedule, db
):
    put_schedule("nightly")
    operator = sign_in("operator")
    page = operator.get("/ui/schedules")
    row = re.search(r'<tr data-schedule="nightly".*?</tr>', page.text, re.S)[0]
    token = csrf_of(page)

    paused = operator.post(
        "/ui/schedules/nightly/pause?owner=compute_user", data={"csrf_token": token}
    )
    ran = operator.post("/ui/schedules/nightly/run?owner=compute_user", data={"csrf_token": token})
    job = db.execute("SELECT j.id, u.name FROM jobs j JOIN users u ON u.id = owner_id").fetchone()
    paused_then = db.execute("SELECT paused FROM schedules").fetchone()["paused"]
    operator.post("/ui/schedules/nightly/delete?owner=compute_user", data={"csrf_token": token})

    assert 'action="/ui/schedules/nightly/pause?owner=compute_user"' in row
    assert "Delete compute_user's schedule nightly?" in row
    assert paused.status_code == 303 and paused_then is True
    assert (ran.headers["Location"], job["name"]) == (f"/ui/jobs/{job['id']}", "compute_user")
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 0
    audit = db.execute(
        "SELECT actor, action FROM audit_log WHERE action LIKE 'schedule.%' ORDER BY id"
    ).fetchall()
    assert [(a["actor"], a["action"]) for a in audit] == [
        ("compute_user", "schedule.put"),
        ("operator", "schedule.pause"),
        ("operator", "schedule.run"),
        ("operator", "schedule.delete"),
    ]


def test_a_user_naming_another_owner_on_the_schedules_page_is_refused(sign_in, put_schedule, db):
    put_schedule("nightly")
    other = sign_in("other")

    answer = other.post(
        "/ui/schedules/nightly/pause?owner=compute_user",
        data={"csrf_token": csrf_of(other.get("/ui/schedules"))},
    )

    assert answer.status_code == 403
    assert db.execute("SELECT paused FROM schedules").fetchone()["paused"] is False


def test_the_queue_page_counts_the_schedules(sign_in, put_schedule):
    put_schedule("nightly")
    put_schedule("later", paused=True)

    page = sign_in("operator").get("/ui/queue").text

    assert '<td id="schedules">1 active, 1 paused; 0 failing</td>' in page


def test_the_queue_page_counts_the_chunks_waiting_by_workload(sign_in, submit):
    submit(manifest(2, not_before=(datetime.now(UTC) + timedelta(hours=1)).isoformat()))

    page = sign_in("operator").get("/ui/queue").text

    assert re.search(r'<td id="waiting">echo 2</td>', page)


def test_an_operator_pauses_and_resumes_a_workload_from_the_queue_page(sign_in, submit, claim):
    submit(manifest(1))
    browser = sign_in("operator")
    csrf = csrf_of(browser.get("/ui/queue"))

    paused = browser.post("/ui/workloads/echo/pause", data={"csrf_token": csrf})

    assert paused.status_code == 303 and paused.location.endswith("/ui/queue#workloads")
    row = re.search(r'<tr id="workload-echo">.*?</tr>', browser.get("/ui/queue").text, re.S)[0]
    assert "paused</span> by operator since" in row and ">Resume</button>" in row
    assert claim() == []

    browser.post("/ui/workloads/echo/resume", data={"csrf_token": csrf})

    row = re.search(r'<tr id="workload-echo">.*?</tr>', browser.get("/ui/queue").text, re.S)[0]
    assert "running</span>" in row and ">Pause</button>" in row
    assert len(claim()) == 1


@settings(CHUNKWISE_WORKLOAD_RATE_LIMITS="echo=30/min")
def test_the_queue_page_shows_each_workloads_rate_limit(sign_in):
    page = sign_in("operator").get("/ui/queue").text

    echo = re.search(r'<tr id="workload-echo">.*?</tr>', page, re.S)[0]
    render = re.search(r'<tr id="workload-render">.*?</tr>', page, re.S)[0]
    assert "<td>0.5</td>" in echo and "<td>no limit</td>" in render


def test_a_user_posting_a_workload_pause_is_refused_and_nothing_pauses(sign_in, db):
    browser = sign_in("user")

    answer = browser.post(
        "/ui/workloads/echo/pause", data={"csrf_token": csrf_of(browser.get("/ui/"))}
    )

    assert answer.status_code == 403
    assert db.execute("SELECT count(*) AS n FROM workload_pauses").fetchone()["n"] == 0


def test_pausing_a_workload_not_served_here_from_the_page_is_404(sign_in, db):
    browser = sign_in("operator")

    answer = browser.post(
        "/ui/workloads/nope/pause", data={"csrf_token": csrf_of(browser.get("/ui/queue"))}
    )

    assert answer.status_code == 404 and "workload nope is not served here" in answer.text
    assert db.execute("SELECT count(*) AS n FROM workload_pauses").fetchone()["n"] == 0


def test_a_workload_pause_without_the_csrf_token_is_refused(sign_in, db):
    answer = sign_in("operator").post("/ui/workloads/echo/pause", data={})

    assert answer.status_code == 403
    assert db.execute("SELECT count(*) AS n FROM workload_pauses").fetchone()["n"] == 0


def test_a_csv_jobs_chunks_show_their_record_ranges(sign_in):
    browser = sign_in("user")
    answer = submit_through_form(browser)
    page = browser.get(f"/ui/jobs/{job_id_of(answer)}").text

    assert "<th>Records</th>" in page and "<th>Result</th>" not in page
    assert chunk_row(page, 0)[3] == "0–20" and chunk_row(page, 1)[3] == "20–40"


def test_cancelling_a_finished_job_shows_the_services_refusal(sign_in, submit, claim, complete):
    job = submit(manifest(1))
    complete(claim()[0])
    browser = sign_in("user")
    csrf = csrf_of(browser.get("/ui/"))

    answer = browser.post(f"/ui/jobs/{job['id']}/cancel", data={"csrf_token": csrf})

    assert answer.status_code == 409
    assert "a succeeded job cannot be cancelled" in answer.text


# --- submitting -----------------------------------------------------------------------------


def test_a_job_submitted_through_the_form_is_the_job_the_api_shows(sign_in, client, headers):
    browser = sign_in("user")

    job_id = job_id_of(submit_through_form(browser, labels="team=finance\nrun=nightly"))

    job = client.get(f"/api/v1/jobs/{job_id}", headers=headers["user"]).get_json()
    assert (job["status"], job["chunks_total"], job["priority"]) == ("queued", 2, 3)
    assert job["labels"] == {"team": "finance", "run": "nightly"}
    assert job["parameters"]["column"] == "value"
    page = browser.get(f"/ui/jobs/{job_id}")
    assert job["input_digest"] in page.text and f'id="revision">{job["revision"]}<' in page.text


def test_a_job_scheduled_through_the_form_starts_at_that_utc_time(sign_in, client, headers):
    when = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0, tzinfo=None)

    job_id = job_id_of(submit_through_form(sign_in("user"), not_before=when.isoformat()))

    job = client.get(f"/api/v1/jobs/{job_id}", headers=headers["user"]).get_json()
    assert datetime.fromisoformat(job["not_before"]) == when.replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("start", "problem"),
    [("soon", "Not a valid datetime."), ("2001-01-01T00:00", "must be within a year of now")],
)
def test_a_start_time_the_form_cannot_use_is_shown_at_its_box(sign_in, db, start, problem):
    answer = submit_through_form(sign_in("user"), not_before=start)

    assert answer.status_code == 422
    assert problem in answer.text and 'aria-invalid="true"' in control(answer.text, "not_before")
    assert f'value="{start}"' in control(answer.text, "not_before")
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_resubmitted_form_returns_the_job_it_made(sign_in, db):
    browser = sign_in("user")
    form = browser.get("/ui/submit")
    key = re.search(r'name="submission_key" value="([^"]+)"', form.text).group(1)

    def post():
        return browser.post(
            "/ui/submit",
            data={
                "csrf_token": csrf_of(form),
                "submission_key": key,
                "file": (io.BytesIO(DATA), "data.csv"),
                "column": "value",
                "chunks": "2",
            },
            content_type="multipart/form-data",
        )

    assert job_id_of(post()) == job_id_of(post())
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1


def test_a_submission_key_longer_than_the_idempotency_header_allows_is_shown_on_the_form(
    sign_in, db
):
    browser = sign_in("user")
    form = browser.get("/ui/submit")

    answer = browser.post(
        "/ui/submit",
        data={
            "csrf_token": csrf_of(form),
            "submission_key": "k" * 4000,
            "file": (io.BytesIO(DATA), "data.csv"),
            "column": "value",
        },
        content_type="multipart/form-data",
    )

    assert answer.status_code == 422
    assert "submission_key" in answer.text and "1 to 200 characters" in answer.text
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_form_the_service_refuses_is_shown_again_with_the_reason(sign_in, db):
    browser = sign_in("user")

    answer = submit_through_form(browser, column="no_such_column")

    assert answer.status_code == 422
    assert "no_such_column" in answer.text and 'value="no_such_column"' in answer.text
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


@settings(CHUNKWISE_MAX_QUEUED_CHUNKS="3")
def test_a_job_the_full_queue_refuses_is_shown_on_the_form_as_429(sign_in, db):
    browser = sign_in("user")
    job_id_of(submit_through_form(browser))

    answer = submit_through_form(browser)

    assert answer.status_code == 429
    assert "exceed the limit of 3" in answer.text
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1


@settings(CHUNKWISE_MAX_QUEUED_CHUNKS="12", CHUNKWISE_USER_MAX_QUEUED_PERCENT="25")
def test_a_job_past_the_users_share_is_shown_on_the_form_as_429(sign_in, db):
    browser = sign_in("user")
    job_id_of(submit_through_form(browser))

    answer = submit_through_form(browser)

    assert answer.status_code == 429
    assert "exceed your limit of 3" in answer.text
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1


def test_a_bad_label_is_named_by_its_line_and_its_reason(sign_in):
    browser = sign_in("user")

    blank_line_before = submit_through_form(browser, labels="team=a\n\nnokey")
    too_long = submit_through_form(browser, labels="k=" + "v" * 300)
    repeated = submit_through_form(browser, labels="team=a\nrun=1\nteam=b")

    assert blank_line_before.status_code == 422
    assert field_error(blank_line_before.text, "labels") == "line 3 (nokey): must be key=value"
    assert field_error(repeated.text, "labels") == "line 3 (team=b): the key 'team' is given twice"
    assert field_error(too_long.text, "labels").startswith("line 1 (k=vvv")
    assert field_error(too_long.text, "labels").endswith("…): must be key=value")
    for page in (blank_line_before, too_long):
        assert "label: " not in shown_text(page.text)


def test_every_refused_field_is_marked_and_described_at_its_control_in_the_forms_words(sign_in, db):
    browser = sign_in("user")

    answer = submit_through_form(browser, column="nope", chunks="99", priority="999", labels="bad")

    assert answer.status_code == 422
    for name in ("column", "chunks", "priority", "labels"):
        tag = control(answer.text, name)
        assert 'aria-invalid="true"' in tag and f'aria-describedby="{name}-error"' in tag
    assert "'nope' is not in the header" in field_error(answer.text, "column")
    assert field_error(answer.text, "chunks") == "must be a whole number from 1 to 64"
    assert field_error(answer.text, "priority") == "must be a whole number from 0 to 255"
    summary = shown_text(answer.text)
    assert "Chunks: must be a whole number from 1 to 64" in summary
    assert "Labels: line 1 (bad): must be key=value" in summary
    assert "Must be greater than" not in summary
    assert "aria-invalid" not in control(answer.text, "delimiter")
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_missing_file_and_a_missing_column_are_both_shown_at_their_fields(sign_in):
    browser = sign_in("user")
    form = browser.get("/ui/submit")

    answer = browser.post(
        "/ui/submit",
        data={"csrf_token": csrf_of(form), "column": "", "chunks": "0"},
        content_type="multipart/form-data",
    )

    assert answer.status_code == 422
    assert field_error(answer.text, "file") == "choose a CSV file to upload"
    assert field_error(answer.text, "column") == "required"
    assert field_error(answer.text, "chunks") == "must be a whole number from 1 to 64"


@settings(CHUNKWISE_MAX_UPLOAD_BYTES=str(2**20))
def test_a_body_too_large_to_read_shows_the_form_with_the_limit_at_the_file_field(
    sign_in, db, temp_dir
):
    browser = sign_in("user")

    answer = submit_through_form(browser, data=b"value\n" + b"1\n" * 3 * 2**19)

    assert answer.status_code == 413
    assert 'aria-invalid="true"' in control(answer.text, "file")
    assert field_error(answer.text, "file") == "larger than the 1 MiB limit"
    assert "CSV file: larger than the 1 MiB limit" in shown_text(answer.text)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    assert list(temp_dir.glob("upload-*")) == []


@settings(CHUNKWISE_MAX_UPLOAD_BYTES=str(2**20))
def test_a_file_over_the_limit_shows_the_form_again_with_its_other_values(sign_in, db):
    browser = sign_in("user")

    answer = submit_through_form(browser, data=b"value\n" + b"1\n" * 3 * 2**18, labels="team=big")

    assert answer.status_code == 413
    assert field_error(answer.text, "file") == "larger than the 1 MiB limit"
    assert ">team=big</textarea>" in answer.text and 'value="value"' in answer.text
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_form_without_a_file_is_refused(sign_in):
    browser = sign_in("user")
    form = browser.get("/ui/submit")

    answer = browser.post(
        "/ui/submit",
        data={"csrf_token": csrf_of(form), "column": "value"},
        content_type="multipart/form-data",
    )

    assert answer.status_code == 422
    assert "choose a CSV file" in answer.text


# --- escaping and headers -------------------------------------------------------------------


def test_user_controlled_text_is_shown_escaped(sign_in):
    browser = sign_in("user")
    job_id = job_id_of(submit_through_form(browser, labels=f"note={HOSTILE}"))
    refused = submit_through_form(browser, column=HOSTILE)

    for page in [browser.get("/ui/"), browser.get(f"/ui/jobs/{job_id}"), refused]:
        assert HOSTILE not in page.text
        assert "&lt;script&gt;document.title=" in page.text


def test_parameters_are_shown_as_the_apis_json_and_none_as_a_dash(sign_in, submit):
    job = submit(manifest(1, parameters={"a": [1, None, True], "s": "x"}))
    bare = submit(manifest(1))
    browser = sign_in("user")

    page = browser.get(f"/ui/jobs/{job['id']}").text
    bare_page = browser.get(f"/ui/jobs/{bare['id']}").text

    parameters = shown_text(re.search(r'id="parameters">(.*?)</table>', page, re.S).group(1))
    assert "[1, null, true]" in parameters and '"x"' in parameters
    assert "None" not in parameters and "True" not in parameters and "'x'" not in parameters
    assert re.search(r'id="parameters">\s*—\s*<', bare_page)


def test_every_progress_bar_is_named_and_a_jobs_live_figures_are_announced(sign_in, submit, claim):
    job = submit(manifest(1))
    claim()
    browser = sign_in("operator")

    for path in ["/ui/", f"/ui/jobs/{job['id']}", "/ui/queue", "/ui/workers"]:
        bars = re.findall(r"<progress\b[^>]*>", browser.get(path).text)

        assert bars, path
        assert all(re.search(r'aria-label="[^"]+"', bar) for bar in bars), path
    page = browser.get(f"/ui/jobs/{job['id']}").text
    live = re.search(r'<div class="live" role="status" aria-live="polite">(.*?)</div>', page, re.S)
    assert live is not None
    for field in ("status", "progress", "percent", "chunks"):
        assert f'data-field="{field}"' in live.group(1)


def overrides_outside_isolation(html: str) -> list[str]:
    """Text holding a right-to-left override that no <bdi> keeps to itself (SVG aside)."""
    html = re.sub(r"<svg\b.*?</svg>|<bdi>.*?</bdi>", "", html, flags=re.S)
    return [text for text in re.split(r"<[^>]*>", html) if RLO in text]


def test_user_supplied_text_is_isolated_so_a_bidi_override_cannot_reorder_its_neighbours(
    sign_in, submit, claim, task_call, db
):
    job = submit(manifest(1, labels={f"k{RLO}ey": f"x{RLO}abc"}, parameters={"p": f"{RLO}exe"}))
    claimed = claim(worker_id="worker")[0]
    failure = {
        "worker_id": "worker",
        "attempt": claimed["attempt"],
        "lease_token": claimed["lease_token"],
        "error_code": f"e{RLO}rr",
    }
    task_call(
        claimed["task_id"],
        "failure",
        {**failure, "error_message": f"{RLO}oops", "retryable": False},
    )
    # The API refuses such a worker id now; one stored before it did is still shown.
    for table, column in [("workers", "id"), ("task_attempts", "worker_id")]:
        db.execute(
            f"UPDATE {table} SET {column} = %s WHERE {column} = 'worker'",  # noqa: S608
            (f"worker-{RLO}evil",),
        )
    browser = sign_in("operator")

    for path in ["/ui/", f"/ui/jobs/{job['id']}", "/ui/workers"]:
        page = browser.get(path).text

        assert RLO in page, path
        assert overrides_outside_isolation(page) == [], path


def test_an_attempts_worker_id_and_trace_id_are_on_the_job_page(sign_in, submit, claim, complete):
    job = submit(manifest(2))
    claimed = claim()[0]
    complete(claimed)
    claim(worker_id="<b>worker</b>")

    page = sign_in("user").get(f"/ui/jobs/{job['id']}").text

    assert claimed["trace_id"] in page
    assert f'data-worker="{WORKER}" data-chunk="0" data-state="completed"' in page
    assert 'data-worker="&lt;b&gt;worker&lt;/b&gt;" data-chunk="1" data-state="running"' in page
    assert "<b>worker</b>" not in page


def test_a_long_worker_id_is_cut_to_the_timelines_label_column_with_the_whole_id_in_a_title(
    sign_in, submit, claim
):
    job = submit(manifest(1))
    worker = "w" * 200
    claim(worker_id=worker)

    page = sign_in("user").get(f"/ui/jobs/{job['id']}").text

    clipped = re.search(r'<g clip-path="url\(#lane-labels\)">(.*?)</g>', page, re.S)
    label = re.search(r'<text class="lane-label"[^>]*>(.*?)</text>', clipped.group(1)).group(1)
    assert f"<title>{worker}</title>" in label
    assert label.endswith("…") and len(re.sub(r"<title>.*?</title>", "", label)) <= 26


def test_every_dashboard_response_has_a_strict_csp_and_refuses_framing(sign_in, client):
    browser = sign_in("user")

    for answer in [
        client.get("/ui/sign-in"),
        browser.get("/ui/"),
        browser.get("/ui/submit"),
        browser.get("/ui/queue"),
        browser.get("/ui/jobs/6f1c1a1e-0000-4000-8000-000000000000"),
        browser.get("/ui/static/ui.js"),
    ]:
        policy = answer.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert "script-src 'self'" in policy and "style-src 'self'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"


def test_a_large_jobs_page_shows_its_chunks_a_hundred_at_a_time(sign_in, submit):
    job = submit(manifest(150))
    browser = sign_in("user")

    first = browser.get(f"/ui/jobs/{job['id']}").text
    following = re.search(r'id="next-chunks" href="([^"]+)"', first)
    second = browser.get(unescape(following[1])).text

    assert first.count("<tr data-chunk=") == 100 and "0–99 of 150" in first
    assert 'id="first-chunks"' not in first
    assert second.count("<tr data-chunk=") == 50 and "100–149 of 150" in second
    assert 'id="next-chunks"' not in second and 'id="first-chunks"' in second


def test_a_small_jobs_page_shows_every_chunk_without_paging(sign_in, submit):
    job = submit(manifest(3))

    page = sign_in("user").get(f"/ui/jobs/{job['id']}").text

    assert page.count("<tr data-chunk=") == 3
    assert "of 3" not in page and "next-chunks" not in page and "first-chunks" not in page


def test_a_job_page_whose_id_is_not_a_uuid_names_it_and_links_nowhere_back(sign_in):
    answer = sign_in("user").get("/ui/jobs/not-a-uuid")

    assert answer.status_code == 422
    assert "job_id: must be a UUID" in answer.text
    assert "Back to the job" not in answer.text


def test_dashboard_paths_no_route_matches_carry_the_same_security_headers(sign_in, client):
    browser = sign_in("user")

    for answer, status in [
        (client.get("/ui/no-such-page"), 404),
        (browser.get("/ui/jobs/not-a-uuid"), 422),
        (browser.put("/ui/"), 405),
        (browser.get("/ui/jobs/6f1c1a1e-0000-4000-8000-000000000000/cancel"), 405),
    ]:
        assert answer.status_code == status
        assert "default-src 'none'" in answer.headers["Content-Security-Policy"]
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["Cache-Control"] == "no-store"
    assert "Content-Security-Policy" not in client.get("/api/v1/no-such-thing").headers


def test_a_dashboard_path_no_route_matches_is_a_page_and_an_api_path_json(sign_in, client):
    browser = sign_in("user")

    for answer, status in [
        (client.get("/ui/no-such-page"), 404),
        (browser.get("/ui/jobs/6f1c1a1e-0000-4000-8000-000000000000/nothing"), 404),
        (browser.put("/ui/"), 405),
    ]:
        assert answer.status_code == status
        assert answer.mimetype == "text/html"
        assert f'<h1 class="error-status">{status}</h1>' in answer.text
    assert "GET" in browser.put("/ui/").headers["Allow"]
    api = client.get("/api/v1/no-such-thing")
    assert (api.status_code, api.get_json()["error"]["code"]) == (404, "not_found")
    assert client.put("/api/v1/queue").get_json()["error"]["code"] == "method_not_allowed"


def test_pages_hold_no_inline_script_or_style_for_the_csp_to_block(sign_in, submit, claim):
    job = submit(manifest(1))
    claim()
    browser = sign_in("operator")

    for path in ["/ui/", "/ui/submit", "/ui/queue", "/ui/workers", f"/ui/jobs/{job['id']}"]:
        html = browser.get(path).text

        assert re.findall(r"<script(?![^>]*\bsrc=)", html) == [], path
        assert " style=" not in html and "<style" not in html, path
        assert re.findall(r"\son[a-z]+=", html) == [], path


def test_the_api_sends_no_dashboard_cookie_and_ignores_one(client, headers, sign_in):
    answer = client.get("/api/v1/jobs", headers=headers["user"])
    assert "Set-Cookie" not in answer.headers

    browser = sign_in("user")
    assert browser.get("/api/v1/jobs").status_code == 401


# --- live updates ---------------------------------------------------------------------------


def test_the_job_watch_answers_at_once_with_a_version_the_page_does_not_know(sign_in, submit):
    job = submit(manifest(1))

    answer = sign_in("user").get(f"/ui/jobs/{job['id']}/watch?version=stale")

    assert answer.status_code == 200
    body = answer.get_json()
    assert body["job"]["id"] == job["id"] and body["version"] != "stale"


def test_the_polled_list_is_the_apis_list(sign_in, submit, client, headers):
    submit(manifest(1))
    submit(manifest(2, labels={"team": "a"}))

    polled = sign_in("user").get("/ui/jobs.json?label=team=a").get_json()
    api = client.get("/api/v1/jobs?label=team=a", headers=headers["user"]).get_json()

    assert [j["id"] for j in polled["jobs"]] == [j["id"] for j in api["jobs"]]
    assert len(polled["jobs"]) == 1


def test_the_list_page_filters_by_workload_and_keeps_it_in_its_box(sign_in, submit):
    render = submit(manifest(1, workload="render"))
    echo = submit(manifest(1))
    browser = sign_in("user")

    page = browser.get("/ui/?workload=render").text
    unusable = browser.get("/ui/?workload=" + "w" * 101)

    assert render["id"] in page and echo["id"] not in page
    assert 'value="render"' in control(page, "workload")
    assert ">clear</a>" in page
    assert unusable.status_code == 422
    assert 'aria-invalid="true"' in control(unusable.text, "workload")


def test_the_list_pages_workload_box_suggests_every_served_workload(sign_in):
    page = sign_in("user").get("/ui/").text

    assert 'list="served-workloads"' in control(page, "workload")
    suggestions = page.split('<datalist id="served-workloads">', 1)[1].split("</datalist>", 1)[0]
    assert suggestions == "".join(
        f'<option value="{name}">' for name in ("csv_stats", "echo", "render")
    )


def test_the_list_page_filters_by_status_and_label(sign_in, submit, client, headers):
    kept = submit(manifest(1, labels={"team": "a"}))
    cancelled = submit(manifest(1, labels={"team": "b"}))
    client.post(f"/api/v1/jobs/{cancelled['id']}/cancel", headers=headers["user"])
    browser = sign_in("user")

    by_status = browser.get("/ui/?status=cancelled&label=").text
    by_label = browser.get("/ui/?status=&label=team%3Da").text
    unusable = browser.get("/ui/?label=no-equals-sign")

    assert cancelled["id"] in by_status and kept["id"] not in by_status
    assert kept["id"] in by_label and cancelled["id"] not in by_label
    assert unusable.status_code == 422 and "must be key=value" in unusable.text


def test_a_filter_the_list_cannot_use_is_shown_at_its_field_on_the_list_page(sign_in):
    browser = sign_in("user")

    bad_status = browser.get("/ui/?status=bogus&label=team%3Da")
    bad_label = browser.get("/ui/?label=nokey")
    bad_cursor = browser.get("/ui/?cursor=garbage")

    for page in (bad_status, bad_label, bad_cursor):
        assert page.status_code == 422
        assert '<form class="filters"' in page.text
    assert 'aria-invalid="true"' in control(bad_status.text, "status")
    assert field_error(bad_status.text, "status") == "not a job status: choose one from the list"
    assert '<option value="bogus" selected>' in bad_status.text
    assert 'value="team=a"' in control(bad_status.text, "label")
    assert 'value="nokey"' in control(bad_label.text, "label")
    assert 'aria-invalid="true"' in control(bad_label.text, "label")
    assert field_error(bad_label.text, "label") == "must be key=value"
    assert "start again from the first page" in shown_text(bad_cursor.text)


def test_a_filter_given_twice_is_refused_at_its_field_as_the_api_refuses_it(sign_in):
    page = sign_in("user").get("/ui/?status=queued&status=failed")

    assert page.status_code == 422
    assert field_error(page.text, "status") == "give this parameter once"


def test_a_later_page_of_the_whole_list_offers_no_clear_link(sign_in, submit, client, headers):
    submit(manifest(1))
    submit(manifest(1))
    listed = client.get("/api/v1/jobs?limit=1", headers=headers["user"]).get_json()

    page = sign_in("user").get("/ui/", query_string={"cursor": listed["next_cursor"]})

    assert page.status_code == 200
    assert ">clear</a>" not in page.text


def test_a_later_page_links_back_to_the_newest_jobs_under_the_same_filters(
    sign_in, submit, client, headers
):
    for _ in range(2):
        submit(manifest(1, labels={"team": "a"}))
    listed = client.get("/api/v1/jobs?limit=1", headers=headers["user"]).get_json()

    later = sign_in("user").get(
        "/ui/", query_string={"cursor": listed["next_cursor"], "label": "team=a"}
    )
    first = sign_in("user").get("/ui/", query_string={"label": "team=a"})

    newest = re.search(r'<a href="([^"]+)">← Newest jobs</a>', later.text)
    assert newest and parse_qs(urlsplit(unescape(newest.group(1))).query) == {"label": ["team=a"]}
    assert "Newest jobs" not in first.text
