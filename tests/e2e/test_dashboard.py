"""The dashboard in a real browser (Debian's chromium, driven by Playwright) on the real stack.

Each test signs in through the form, as a person would, against gunicorn and real workers.
Screenshots go to $UI_SCREENSHOTS_DIR when it is set (docs/images/ui/ for the docs), else to
the test's temporary directory. Chromium missing is a failure, never a skip: CI installs it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Response, expect, sync_playwright

from devstack.observe import FAST, SHORT_POLL, events, totals_of, wait_for
from devstack.sample_csv import generate_csv
from devstack.stack import BIN, REPO, LocalStack

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
JOB_URL = re.compile(r"/ui/jobs/([0-9a-f-]{36})$")
LOAD_FAILED = "Failed to load resource: the server responded with a status of"
HOSTILE_LABEL = "<script>alert('label')</script><img src=x onerror=alert('img')>"
VIEWPORT = {"width": 1280, "height": 860}
# Manifest jobs of the `echo` workload are admitted; no worker here serves them.
ECHO_ALLOWED = {**FAST, "CHUNKWISE_ALLOWED_WORKLOADS": "echo"}
ECHO_JOB = {
    "workload": "echo",
    "input_uri": "s3://in/",
    "parameters": {},
    "tasks": [{"input_uri": "s3://in/0", "input_sha256": "0" * 64}],
}


@pytest.fixture(scope="module")
def chromium() -> Browser:
    """One headless chromium for the module's tests."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def shots(tmp_path) -> Path:
    """Where this test's screenshots go."""
    directory = Path(os.environ.get("UI_SCREENSHOTS_DIR") or tmp_path / "screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


class Dashboard:
    """Browser sessions on the stack's dashboard, each watched for script and CSP errors."""

    def __init__(self, browser: Browser, stack: LocalStack, shots: Path):
        self.browser = browser
        self.stack = stack
        self.shots = shots
        self.console_errors: list[str] = []
        self.dialogs: list[str] = []
        # How to answer a confirm() a test expects (True: OK, False: Cancel), and what it asked.
        self.confirm_answer: bool | None = None
        self.confirmations: list[str] = []

    def page(self) -> Page:
        """A new browser session (its own cookies) on a blank page."""
        context = self.browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.console_errors.append(str(error)))
        page.on("dialog", self._dialog)
        page.on("response", self._response)
        return page

    def _console(self, message: ConsoleMessage) -> None:
        # A 403 or 404 page is logged as a failed load; the tests open those on purpose.
        if message.type == "error" and not message.text.startswith(LOAD_FAILED):
            self.console_errors.append(message.text)

    def _response(self, response: Response) -> None:
        if "/ui/static/" in response.url and response.status >= 400:
            self.console_errors.append(f"{response.status} for {response.url}")

    def _dialog(self, dialog) -> None:
        if dialog.type == "confirm" and self.confirm_answer is not None:
            self.confirmations.append(dialog.message)
            if self.confirm_answer:
                dialog.accept()
            else:
                dialog.dismiss()
            return
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def sign_in(self, token: str, shot: str | None = None) -> Page:
        """Sign in through the form in a new session; land on the jobs list."""
        page = self.page()
        page.goto(f"{self.stack.url}/ui/")
        expect(page).to_have_url(re.compile(r"/ui/sign-in"))
        page.fill("input[name=token]", token)
        if shot:
            self.shoot(page, shot)
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text(re.compile("jobs"))
        return page

    def shoot(self, page: Page, name: str) -> None:
        """Save a full-page screenshot."""
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def submit_csv(
        self, page: Page, data: bytes, *, chunks: int, labels: str = "", shot: str | None = None
    ) -> str:
        """Fill in and send the submit form; return the new job's id from its page's URL."""
        page.click("text=Submit a CSV")
        page.set_input_files(
            "input[name=file]",
            files=[{"name": "sample.csv", "mimeType": "text/csv", "buffer": data}],
        )
        page.fill("input[name=column]", "value")
        page.fill("input[name=chunks]", str(chunks))
        page.fill("textarea[name=labels]", labels)
        if shot:
            self.shoot(page, shot)
        page.click("form.submit button[type=submit]")
        page.wait_for_url(JOB_URL)
        return JOB_URL.search(page.url).group(1)

    def assert_no_script_errors(self) -> None:
        """No CSP refusal, no script error, no dialog a page's content opened."""
        assert self.console_errors == []
        assert self.dialogs == []


@pytest.fixture
def dashboard(chromium, stack, shots) -> Dashboard:
    """The stack's dashboard in chromium."""
    board = Dashboard(chromium, stack, shots)
    yield board
    board.assert_no_script_errors()


def create_user(stack: LocalStack, name: str) -> str:
    """A new user's token, from the flask create-user command."""
    done = subprocess.run(
        [str(BIN / "flask"), "--app", "app", "create-user", name],
        cwd=REPO,
        env=stack.base_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    return next(line for line in done.stdout.splitlines() if line.startswith("cwu_"))


def submit_as(stack: LocalStack, token: str, *, chunks: int) -> str:
    """Submit a CSV job over the API with this token; return its id."""
    answer = stack.api(token).post(
        f"{stack.url}/api/v1/jobs",
        files={"file": ("data.csv", generate_csv(5_000, seed=chunks))},
        data={"column": "value", "chunks": str(chunks)},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def test_a_user_submits_a_csv_through_the_form_and_sees_the_apis_result(stack, jobs, dashboard):
    data = generate_csv(60_000, seed=21)
    page = dashboard.sign_in(stack.tokens.user, shot="sign-in")
    stack.start_worker("worker-1", *SHORT_POLL, "--capacity", "2")
    stack.start_worker("worker-2", *SHORT_POLL, "--capacity", "2")

    job_id = dashboard.submit_csv(
        page, data, chunks=8, labels="team=finance\nrun=nightly", shot="submit"
    )

    expect(page.locator("#live progress")).to_have_js_property("value", 1, timeout=60_000)
    expect(page.locator("#live [data-field=status]")).to_have_text("succeeded")
    expect(page.locator("#live [data-field=percent]")).to_have_text("100%")
    api = jobs.get(job_id)
    shown = {
        key: page.locator(f"#result tr[data-key={key}] td").inner_text()
        for key in ("count", "sum", "min", "max")
    }
    assert shown == {key: str(value) for key, value in api["result"].items()}
    assert api["result"] == totals_of(data)
    expect(page.locator("#chunks tbody tr[data-state=completed]")).to_have_count(8)
    expect(page.locator("#input-digest")).to_have_text(api["input_digest"])
    dashboard.shoot(page, "job")
    page.click("nav >> text=Jobs")
    row = page.locator(f"tr[data-job-id='{job_id}']")
    expect(row.locator("[data-field=status]")).to_have_text("succeeded")
    expect(row.locator("[data-field=chunks]")).to_have_text("8/8")


def test_the_jobs_list_follows_a_running_job_without_reloading(stack, jobs, dashboard):
    page = dashboard.sign_in(stack.tokens.user)
    job = jobs.submit(generate_csv(20_000, seed=22), 4)
    page.reload()
    row = page.locator(f"tr[data-job-id='{job['id']}']")
    expect(row.locator("[data-field=status]")).to_have_text("queued")
    expect(row.locator("[data-field=percent]")).to_have_text("0%")
    page.evaluate("window.sameDocument = true")

    stack.start_worker("worker-1", *SHORT_POLL, "--capacity", "2")

    expect(row.locator("[data-field=status]")).to_have_text("succeeded", timeout=30_000)
    expect(row.locator("progress")).to_have_js_property("value", 1)
    expect(row.locator("[data-field=chunks]")).to_have_text("4/4")
    assert page.evaluate("window.sameDocument") is True


def test_cancelling_a_running_job_from_its_page_asks_first(stack, jobs, dashboard):
    job = jobs.submit(generate_csv(20_000, seed=23), 2)
    # The worker holds its lease, computing nothing more, until the cancel reaches it.
    stack.start_worker(
        "holder", *SHORT_POLL, "--capacity", "1", "--fault", "pause-after-compute=30"
    )
    wait_for(lambda: events(stack, "holder", "fault"), 20, what="the holder to hold its lease")
    page = dashboard.sign_in(stack.tokens.user)
    page.goto(f"{stack.url}/ui/jobs/{job['id']}")
    expect(page.locator("#live [data-field=status]")).to_have_text("running")

    dashboard.confirm_answer = False
    page.click("#cancel")
    page.wait_for_timeout(500)

    assert len(dashboard.confirmations) == 1 and "cannot be undone" in dashboard.confirmations[0]
    assert jobs.get(job["id"])["status"] == "running"
    expect(page.locator("#cancel")).to_be_visible()

    dashboard.confirm_answer = True
    page.click("#cancel")

    expect(page.locator("#live [data-field=status]")).to_have_text("cancelled")
    expect(page.locator("#cancel")).to_have_count(0)
    assert jobs.get(job["id"])["status"] == "cancelled"
    stack.kill("holder")


@pytest.mark.parametrize("stack_env", [ECHO_ALLOWED], ids=["echo jobs allowed"])
def test_long_unbroken_text_does_not_widen_the_job_page_or_the_list(stack, dashboard):
    user, worker = stack.api(stack.tokens.user), stack.api(stack.tokens.worker)
    # The chunk table shows a manifest task's input URI, at its longest.
    task = {"input_uri": "s3://in/" + "u" * 1992, "input_sha256": "0" * 64, "parameters": {}}
    body = {
        "workload": "echo",
        "input_uri": "s3://in/",
        "parameters": {"blob": "x" * 10_000},
        "labels": {"note": "y" * 256},
        "tasks": [task],
    }
    job = user.post(f"{stack.url}/api/v1/jobs", json=body, timeout=10).json()
    worker_id = "w" * 200
    claim = {"worker_id": worker_id, "workloads": ["echo"], "capacity": 1}
    claimed = worker.post(f"{stack.url}/api/v1/tasks/claim", json=claim, timeout=10).json()
    lease = claimed["tasks"][0]
    failure = {
        "worker_id": worker_id,
        "attempt": lease["attempt"],
        "lease_token": lease["lease_token"],
        "error_code": "boom",
    }
    answer = worker.post(
        f"{stack.url}/api/v1/tasks/{lease['task_id']}/failure",
        json={**failure, "error_message": "z" * 3_900, "retryable": True},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    page = dashboard.sign_in(stack.tokens.user)

    for path in (f"/ui/jobs/{job['id']}", "/ui/"):
        page.goto(f"{stack.url}{path}")
        width = page.evaluate("document.documentElement.scrollWidth")

        # A scrollbar's width of slack, no more.
        assert width <= VIEWPORT["width"] + 20, (path, width)


@pytest.mark.parametrize("stack_env", [ECHO_ALLOWED], ids=["echo jobs allowed"])
def test_a_user_pauses_and_deletes_a_schedule_from_its_page(stack, dashboard):
    user = stack.api(stack.tokens.user)
    for name, cron in (("nightly", "0 3 * * *"), ("hourly", "@hourly")):
        body = {"cron": cron, "job": ECHO_JOB}
        answer = user.put(f"{stack.url}/api/v1/schedules/{name}", json=body, timeout=10)
        assert answer.status_code == 201, answer.text
    page = dashboard.sign_in(stack.tokens.user)
    page.click("nav >> text=Schedules")
    nightly = page.locator('tr[data-schedule="nightly"]')

    nightly.locator("button", has_text="Pause").click()
    expect(nightly.locator(".status-paused")).to_have_text("paused")
    dashboard.shoot(page, "schedules")
    dashboard.confirm_answer = True
    nightly.locator("button", has_text="Delete").click()

    expect(page.locator("tr[data-schedule]")).to_have_count(1)
    assert "The jobs it submitted stay" in dashboard.confirmations[0]
    listed = user.get(f"{stack.url}/api/v1/schedules", timeout=10).json()["schedules"]
    assert [(s["name"], s["paused"]) for s in listed] == [("hourly", False)]
    dashboard.assert_no_script_errors()


@pytest.mark.parametrize("stack_env", [ECHO_ALLOWED], ids=["echo jobs allowed"])
def test_an_operator_pauses_another_users_schedule_from_its_page(stack, dashboard):
    user = stack.api(stack.tokens.user)
    answer = user.put(
        f"{stack.url}/api/v1/schedules/nightly",
        json={"cron": "@daily", "job": ECHO_JOB},
        timeout=10,
    )
    assert answer.status_code == 201, answer.text
    page = dashboard.sign_in(stack.tokens.operator)
    page.click("nav >> text=Schedules")
    nightly = page.locator('tr[data-schedule="nightly"][data-owner="compute_user"]')

    nightly.locator("button", has_text="Pause").click()

    expect(nightly.locator(".status-paused")).to_have_text("paused")
    [schedule] = user.get(f"{stack.url}/api/v1/schedules", timeout=10).json()["schedules"]
    assert schedule["paused"] is True
    dashboard.assert_no_script_errors()


@pytest.mark.parametrize("stack_env", [ECHO_ALLOWED], ids=["echo jobs allowed"])
def test_a_pipelines_steps_link_to_each_other_on_their_pages(stack, dashboard):
    user = stack.api(stack.tokens.user)

    def submit(body: dict) -> dict:
        answer = user.post(f"{stack.url}/api/v1/jobs", json=body, timeout=10)
        assert answer.status_code == 201, answer.text
        return answer.json()

    extract, load = submit(ECHO_JOB), submit(ECHO_JOB)
    report = submit({**ECHO_JOB, "depends_on": [extract["id"], load["id"]]})
    page = dashboard.sign_in(stack.tokens.user)
    page.goto(f"{stack.url}/ui/jobs/{report['id']}")

    expect(page.locator("#depends-on a")).to_have_count(2)
    expect(page.locator("tr[data-chunk='0']")).to_contain_text("waits for the jobs it depends on")
    dashboard.shoot(page, "job-dependencies")
    page.locator("#depends-on a").first.click()

    expect(page.locator("#needed-by a")).to_have_text(report["id"])
    page.goto(f"{stack.url}/ui/?depends_on={extract['id']}")
    expect(page.locator("#jobs tbody tr")).to_have_count(1)
    expect(page.locator("#jobs tbody")).to_contain_text(report["id"][:8])
    dashboard.shoot(page, "jobs-waiting-for")
    dashboard.assert_no_script_errors()


def test_a_killed_workers_attempt_shows_as_expired_on_the_timeline(stack, jobs, dashboard):
    job = jobs.submit(generate_csv(20_000, seed=24), 4)
    stack.start_worker(
        "victim", *SHORT_POLL, "--capacity", "1", "--fault", "pause-after-compute=300"
    )
    wait_for(lambda: events(stack, "victim", "fault"), 20, what="the victim to hold its lease")
    stack.kill("victim", signal.SIGKILL)
    stack.start_worker("rescuer-1", *SHORT_POLL, "--capacity", "2")
    stack.start_worker("rescuer-2", *SHORT_POLL, "--capacity", "2")
    jobs.wait(job["id"], "succeeded", timeout=40)

    page = dashboard.sign_in(stack.tokens.user)
    page.goto(f"{stack.url}/ui/jobs/{job['id']}")

    lost = next(
        a for c in jobs.chunks(job["id"]) for a in c["attempts"] if a["worker_id"] == "victim"
    )
    assert lost["state"] == "lease_expired"
    bar = page.locator("#timeline g.attempt[data-worker=victim]")
    expect(bar).to_have_attribute("data-state", "expired")
    expect(bar).to_have_attribute("data-trace-id", lost["trace_id"])
    row = page.locator("#attempts tr[data-worker=victim]")
    expect(row).to_have_attribute("data-state", "expired")
    expect(row).to_contain_text(lost["trace_id"])
    expect(page.locator("#timeline g.attempt[data-state=completed]")).to_have_count(4)
    dashboard.shoot(page, "job-with-expired-lease")


def test_a_user_cannot_open_another_users_job_or_the_operator_pages(stack, dashboard):
    foreign = submit_as(stack, create_user(stack, "someone_else"), chunks=2)
    page = dashboard.sign_in(stack.tokens.user)

    shown = page.goto(f"{stack.url}/ui/jobs/{foreign}")
    assert shown.status == 404
    expect(page.locator(".message")).to_contain_text("does not exist")
    dashboard.shoot(page, "not-found")
    for path in ("/ui/queue", "/ui/workers"):
        assert page.goto(f"{stack.url}{path}").status == 403
        expect(page.locator(".message")).to_have_text("this page is for operators")
    page.goto(f"{stack.url}/ui/")
    expect(page.locator("nav >> text=Queue")).to_have_count(0)
    expect(page.locator(f"tr[data-job-id='{foreign}']")).to_have_count(0)


def test_an_operator_sees_the_queue_and_the_workers_holding_its_leases(stack, dashboard):
    for chunks in (6, 4):
        submit_as(stack, stack.tokens.user, chunks=chunks)
    page = dashboard.sign_in(stack.tokens.operator)
    page.click("nav >> text=Queue")
    expect(page.locator("#chunks-by-state")).to_contain_text("pending")
    # Two workers that lease a chunk each, then hold it without heartbeats.
    for name in ("worker-1", "worker-2"):
        stack.start_worker(
            name, *SHORT_POLL, "--capacity", "2", "--fault", "pause-after-compute=30"
        )
    for name in ("worker-1", "worker-2"):
        wait_for(lambda name=name: events(stack, name, "fault"), 20, what=f"{name} to pause")

    page.reload()
    expect(page.locator("#chunks-by-state")).to_contain_text("leased")
    dashboard.shoot(page, "queue")
    page.click("nav >> text=Workers")
    expect(page.locator("#workers tr[data-worker]")).to_have_count(2)
    dashboard.shoot(page, "workers")
    for name in ("worker-1", "worker-2"):
        stack.kill(name)


def test_an_operator_pauses_a_workload_and_its_job_waits_for_the_resume(stack, jobs, dashboard, db):
    page = dashboard.sign_in(stack.tokens.operator)
    page.click("nav >> text=Queue")
    row = page.locator("#workload-csv_stats")
    row.locator("button", has_text="Pause").click()
    expect(row).to_contain_text("paused by operator since")
    stack.start_worker("worker-1", *SHORT_POLL, "--capacity", "2")
    job = jobs.submit(generate_csv(20_000, seed=24), 4)

    # The worker's claims record it as seen: once one has run after the job was admitted, the
    # job's chunks were there to lease, and the pause kept them pending.
    wait_for(
        lambda: db.execute(
            "SELECT 1 FROM workers WHERE last_seen_at > %s", (job["created_at"],)
        ).fetchone(),
        20,
        what="a claim after the job was admitted",
    )
    assert jobs.get(job["id"])["status"] == "queued"
    page.reload()
    expect(page.locator("#chunks-by-state")).to_contain_text("pending")
    dashboard.shoot(page, "queue-paused")

    row.locator("button", has_text="Resume").click()

    expect(row).to_contain_text("running")
    assert jobs.wait(job["id"], timeout=30)["status"] == "succeeded"


def test_a_worker_token_cannot_sign_in(stack, dashboard):
    page = dashboard.page()
    page.goto(f"{stack.url}/ui/sign-in")
    page.fill("input[name=token]", stack.tokens.worker)

    page.click("button[type=submit]")

    expect(page.locator(".message")).to_have_text("worker tokens cannot sign in to the dashboard")
    page.goto(f"{stack.url}/ui/")
    expect(page).to_have_url(re.compile(r"/ui/sign-in\?next="))


def test_a_label_holding_a_script_is_shown_as_text(stack, jobs, dashboard):
    page = dashboard.sign_in(stack.tokens.user)

    job_id = dashboard.submit_csv(
        page, generate_csv(500, seed=26), chunks=1, labels=f"note={HOSTILE_LABEL}"
    )

    expect(page.locator("#labels .label")).to_have_text(f"note={HOSTILE_LABEL}")
    assert jobs.get(job_id)["labels"] == {"note": HOSTILE_LABEL}
    page.goto(f"{stack.url}/ui/")
    expect(page.locator(f"tr[data-job-id='{job_id}'] .label")).to_have_text(f"note={HOSTILE_LABEL}")
    assert page.locator("img[src=x]").count() == 0
    # The dashboard fixture then checks that no alert() ran and chromium logged no error.


def test_a_bad_record_is_named_by_its_line_on_the_job_page(stack, jobs, dashboard):
    data = generate_csv(20_003, seed=11, malformed_at=12_345)
    stack.start_worker("worker-1", *SHORT_POLL, "--capacity", "2")
    page = dashboard.sign_in(stack.tokens.user)

    done = jobs.submit(generate_csv(5_000, seed=27), 2)
    cancelled = jobs.submit(generate_csv(5_000, seed=28), 2)
    jobs.session.post(f"{stack.url}/api/v1/jobs/{cancelled['id']}/cancel", timeout=10)
    jobs.wait(done["id"], "succeeded", timeout=30)

    job_id = dashboard.submit_csv(page, data, chunks=4, labels="team=finance")

    expect(page.locator("#live [data-field=status]")).to_have_text("failed", timeout=30_000)
    details = jobs.get(job_id)["error"]["details"]
    expect(page.locator("#bad-record")).to_contain_text(
        f"record {details['record']}, line {details['line']}"
    )
    expect(page.locator("#error")).to_contain_text("invalid_input")
    dashboard.shoot(page, "job-failed")
    page.click("nav >> text=Jobs")
    dashboard.shoot(page, "jobs")


@pytest.mark.parametrize(
    "stack_env",
    [{**ECHO_ALLOWED, "CHUNKWISE_MAX_WAITING_REQUESTS": "0"}],
    ids=["no waiting places"],
)
def test_a_job_page_refused_its_watch_asks_again_only_after_retry_after(stack, dashboard):
    job = stack.api().post(f"{stack.url}/api/v1/jobs", json=ECHO_JOB, timeout=10).json()
    page = dashboard.sign_in(stack.tokens.user)
    watches: list[str] = []
    page.on("request", lambda request: "/watch" in request.url and watches.append(request.url))

    page.goto(f"{stack.url}/ui/jobs/{job['id']}")
    page.wait_for_timeout(7000)

    # Each watch is answered at once with retry_after 3: at most three asks in 7 s, where a
    # page that asked again at once would have asked hundreds of times.
    assert 1 <= len(watches) <= 4, len(watches)
