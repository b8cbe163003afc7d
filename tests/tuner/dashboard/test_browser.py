"""The dashboard as a person uses it: the real server over a database filled by real tune
jobs, a real headless Chromium (Debian's, driven by Playwright). Each page's content is
checked, the browser console must stay free of errors, and a job started during the test
shows as running, then done, without a reload. Screenshots go to $TUNEFARM_SCREENSHOTS (the
docs' pictures: TUNEFARM_SCREENSHOTS=docs/img), else to a temporary folder."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from database import Storage
from database.jobs import start_job, update_job
from database.models import utcnow
from tests.conftest import DATA
from tests.tuner.dashboard.server import XSS, serve

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = Path(os.environ.get("TUNEFARM_SCREENSHOTS") or Path(tempfile.gettempdir(), "tf-shots"))
ROOT = Path(__file__).parents[3]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install chromium)"
    ),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


class Page:
    """A browser tab that records console errors and uncaught exceptions."""

    def __init__(self, browser: Any, base: str) -> None:
        self.base = base
        self.context = browser.new_context(viewport={"width": 1360, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: str) -> Any:
        response = self.page.goto(self.base + path, wait_until="networkidle")
        assert response is not None and response.status == 200, path
        return self.page

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"dashboard-{name}.png"), full_page=True)

    def close(self) -> None:
        self.context.close()
        assert not self.errors, self.errors


def copy_sqlite(source: Path, dest: Path) -> None:
    """A consistent copy of a SQLite database, its write-ahead log included."""
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(dest)) as dst,
    ):
        src.backup(dst)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _jobs(path: Path) -> dict[int, str]:
    """The jobs of a SQLite database, id -> name (the tuned fixture may hold one or two)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT id, name FROM jobs ORDER BY id").fetchall())


@pytest.fixture(scope="module")
def browse_db(dyn_tuned_db: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The symbolic-kernel model tuned at two buckets, plus a failed job named in HTML."""
    path = tmp_path_factory.mktemp("dash") / "browse.db"
    copy_sqlite(Path(dyn_tuned_db.removeprefix("sqlite:///")), path)
    storage = Storage(f"sqlite:///{path}")
    job_id = start_job(storage, name=XSS, model=XSS, target_json="{}", budget=8, submitted_by=XSS)
    update_job(storage, job_id, status="failed", finished_at=utcnow(), error=XSS)
    storage.dispose()
    return path


def test_every_page_renders_its_data_escaped_and_leaves_the_database_as_it_was(
    browser: Any, browse_db: Path
) -> None:
    before = _sha(browse_db)
    jobs = _jobs(browse_db)
    (xss_job,) = (i for i, name in jobs.items() if name == XSS)
    with serve(f"sqlite:///{browse_db}") as base:
        tab = Page(browser, base)
        page = tab.open("/")
        rows = page.locator("#jobs tbody tr")
        assert rows.count() == len(jobs)
        first = page.locator("#jobs tbody tr", has=page.locator('a[href="/jobs/1"]'))
        assert first.locator(".status").inner_text() == "done"
        # the HTML name is text: visible as written, no element made of it
        assert page.get_by_text(XSS, exact=True).first.is_visible()
        assert page.locator("img[src=x]").count() == 0
        speedup = first.locator("td").nth(7).inner_text()
        assert speedup.endswith("x") and float(speedup[:-1]) > 0
        page.wait_for_timeout(2500)  # one live refresh: the rows stay, still escaped
        assert rows.count() == len(jobs) and page.locator("img[src=x]").count() == 0
        assert page.locator("#live").inner_text().startswith("live ·")
        tab.shot("jobs")

        page = tab.open("/jobs/1")
        assert page.locator("#kernels tbody tr").count() >= 4  # kernels x buckets n=4, n=16
        assert "n=16" in page.locator("#kernels").inner_text()
        for chart in ("model-time", "model-trials", "tasks-time", "tasks-trials"):
            assert page.locator(f"#chart-{chart} svg path").count() >= 1, chart
        assert page.locator("#phases .phase").count() >= 3
        # how each task ended, as the finished job stored it (job_tasks)
        converged = page.locator("#kernels tbody td.conv").all_inner_texts()
        assert len(converged) >= 4
        assert all(t == "no" or t.startswith("yes") for t in converged), converged
        tab.shot("job")

        page = tab.open("/models")
        assert page.locator("table.grid tbody tr").count() == 2
        page = tab.open("/models/dyn")
        assert page.locator("#coverage thead th").all_inner_texts()[1:] == ["n=4", "n=16"]
        assert page.locator("#coverage td.tuned").count() >= 1
        assert page.locator("#tuned-share").inner_text().endswith("%")
        # weighted by the tasks' calls per model run, which the finished job stored
        assert page.locator("p.summary").get_attribute("data-share-of") == "calls"
        tab.shot("coverage")

        page.locator("#coverage td.tuned a").first.click()
        page.wait_for_load_state("networkidle")
        assert page.locator("#records tbody tr").count() >= 2
        assert page.locator("#chart-timeline svg circle").count() >= 2
        assert "[" in page.locator("pre.trace").inner_text()
        tab.shot("workload")

        page = tab.open("/devices")
        assert page.locator("#devices tbody tr").count() == 1
        assert "llvm" in page.locator("#devices").inner_text()
        tab.shot("devices")

        page = tab.open(f"/models/{XSS}")
        assert page.locator("img[src=x]").count() == 0
        page = tab.open(f"/jobs/{xss_job}")
        assert page.locator("p.error").inner_text() == XSS
        tab.close()
    assert _sha(browse_db) == before


def test_a_job_started_during_the_test_shows_running_then_done(
    browser: Any, browse_db: Path, tmp_path: Path
) -> None:
    path = tmp_path / "live.db"
    copy_sqlite(browse_db, path)
    url = f"sqlite:///{path}"
    live = max(_jobs(path)) + 1  # the job this test starts
    with serve(url) as base:
        tab = Page(browser, base)
        page = tab.open("/")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        tune = [sys.executable, "-m", "tuner.cli", "tune", str(DATA / "dyn_kernels.py")]
        tune += ["--shape", "n=4,16", "--trials", "72", "--db", url, "--seed", "1"]
        tune += ["--job", "live-job", "--min-repeat-ms", "5"]
        proc = subprocess.Popen(
            tune, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            row = page.locator("#jobs tbody tr", has_text="live-job")
            row.locator(".status.running").wait_for(timeout=120_000)
            row.locator(".status.done").wait_for(timeout=300_000)
            out = proc.communicate(timeout=60)[0].decode()
            assert proc.returncode == 0, out[-2000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert row.locator("td").nth(4).inner_text() == "72 / 72"
        page = tab.open(f"/compare?a=1&b={live}")
        assert page.locator("#ratios tbody tr").count() >= 4
        for axis in ("time", "trials"):
            assert page.locator(f"#chart-compare-{axis} svg path").count() == 2
        tab.shot("compare")
        tab.close()

    # the live job's database beside the first one: a job of each compared, both untouched
    before = _sha(browse_db), _sha(path)
    with serve(f"sqlite:///{browse_db}", compare=url) as base:
        tab = Page(browser, base)
        page = tab.open("/compare-db")
        page.locator("select[name=a]").select_option("1")
        page.locator("select[name=b]").select_option(str(live))
        page.get_by_role("button", name="Compare").click()
        page.wait_for_load_state("networkidle")
        assert page.url.endswith(f"/compare-db?a=1&b={live}")
        assert str(path) in page.locator("#sides").inner_text()
        assert page.locator("#ratios tbody tr").count() >= 4  # matched by hash and bucket
        for axis in ("time", "trials"):
            assert page.locator(f"#chart-compare-{axis} svg path").count() == 2
        tab.shot("compare-db")
        tab.close()
    assert (_sha(browse_db), _sha(path)) == before
