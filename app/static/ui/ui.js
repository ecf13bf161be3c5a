// Live updates for the dashboard, without a build step: the jobs list polls the same list
// as JSON every two seconds; a job's page waits on the job watch (an answer as soon as the
// job changes) and reloads itself to redraw its chunks, timeline and result. Forms marked
// data-confirm (Cancel job) ask before they are sent.
"use strict";

(function () {
  const FINISHED = ["succeeded", "failed", "cancelled"];
  const LIST_POLL_MS = 2000;
  const RETRY_MS = 2000;
  // While chunks keep changing, the job page is redrawn at most this often.
  const REDRAW_MS = 3000;

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  function timestamp(iso) {
    if (!iso) return "—";
    return new Date(iso).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  function showJob(container, job) {
    container.dataset.status = job.status;
    const field = (name) => container.querySelector(`[data-field="${name}"]`);
    const status = field("status");
    if (status) {
      status.textContent = job.status;
      status.className = "status status-" + job.status;
    }
    if (field("progress")) field("progress").value = job.progress;
    if (field("percent")) field("percent").textContent = Math.round(job.progress * 100) + "%";
    if (field("chunks")) field("chunks").textContent = job.chunks_completed + "/" + job.chunks_total;
    if (field("finished")) field("finished").textContent = timestamp(job.completed_at);
  }

  async function getJson(url) {
    const answer = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (answer.redirected) {
      // The session ended: the reload lands on the sign-in page.
      window.location.reload();
      return null;
    }
    return answer.ok ? answer.json() : null;
  }

  async function pollJobList(table) {
    const rows = () => Array.from(table.querySelectorAll("tr[data-job-id]"));
    while (rows().some((row) => !FINISHED.includes(row.dataset.status))) {
      await sleep(LIST_POLL_MS);
      // A tab nobody looks at asks nothing; it catches up when it is shown again.
      if (document.hidden) continue;
      let body = null;
      try {
        body = await getJson(table.dataset.poll);
      } catch (error) {
        continue;
      }
      if (!body) continue;
      const byId = new Map(body.jobs.map((job) => [job.id, job]));
      for (const row of rows()) {
        const job = byId.get(row.dataset.jobId);
        if (job) showJob(row, job);
      }
    }
  }

  async function watchJob(section) {
    const shownStatus = section.dataset.status;
    const loadedAt = Date.now();
    let version = section.dataset.version;
    while (!FINISHED.includes(section.dataset.status)) {
      let body = null;
      try {
        body = await getJson(section.dataset.watch + "?version=" + encodeURIComponent(version));
      } catch (error) {
        body = null;
      }
      if (!body) {
        await sleep(RETRY_MS);
        continue;
      }
      if (body.version === version) {
        // The coordinator had no place to wait in: it says when to ask again.
        if (body.retry_after) await sleep(body.retry_after * 1000);
        continue;
      }
      version = body.version;
      showJob(section, body.job);
      if (body.job.status !== shownStatus || Date.now() - loadedAt > REDRAW_MS) {
        window.location.reload();
        return;
      }
    }
  }

  // A cancel cannot be undone, so its form asks first. Here, because the CSP allows no inline
  // handler; without JavaScript the form posts at once, as before.
  function confirmBeforeSending(form) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("form[data-confirm]").forEach(confirmBeforeSending);
    const table = document.getElementById("jobs");
    if (table && table.dataset.poll) pollJobList(table);
    const live = document.getElementById("live");
    if (live && live.dataset.watch) watchJob(live);
  });
})();
