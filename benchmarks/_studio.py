"""What the studio-timing benchmarks share (`bench_race_studio.py`, `bench_lesson_studio.py`): the
studio served on a free port and a fresh sessions folder, headless Chromium, a job's status line read
every second until its closing line, and CPU seconds read from /proc."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"]
FINAL = re.compile(r"\[(done|stopped|failed)\]")
"""A job's closing status line."""


def add_studio_options(ap: argparse.ArgumentParser, job: str) -> None:
    """`--threads` and `--timeout` (seconds to follow the `job` before giving up)."""
    ap.add_argument("--threads", type=int, default=None, help="the studio's torch threads (default: its own, 2 here)")
    ap.add_argument("--timeout", type=float, default=3600.0, help=f"seconds to follow the {job} before giving up")


def check_studio_options(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (`ap.error`, exit 2) bad `--threads`/`--timeout`, a missing Chromium or Playwright, before
    the studio loads its model."""
    if args.threads is not None and args.threads < 1:
        ap.error(f"--threads must be ≥ 1, got {args.threads}")
    if args.timeout <= 0:
        ap.error(f"--timeout must be > 0, got {args.timeout}")
    if not os.path.exists(CHROMIUM):
        ap.error(f"{CHROMIUM} is not installed (apt-get install chromium)")
    if importlib.util.find_spec("playwright") is None:
        ap.error("playwright is not installed in this environment (make install puts it in .venv)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def chromium_cpu() -> float:
    """CPU seconds so far of every running Chromium process (the headless browser's renderer, GPU and
    browser processes; these benchmarks start the only Chromium on the machine they expect)."""
    total = 0.0
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                comm = (proc / "comm").read_text().strip()
            except OSError:
                continue
            if comm.startswith(("chromium", "chrome")):
                total += cpu_seconds(int(proc.name))
    return total


def wait_until_served(url: str, server: subprocess.Popen, timeout: float) -> None:
    """Return once `url` answers; raise RuntimeError when the studio exits or `timeout` s pass."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if server.poll() is not None:
            raise RuntimeError(f"the studio exited with {server.returncode} before it served {url}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(2)
    raise RuntimeError(f"the studio did not answer at {url} within {timeout:.0f} s")


@contextlib.contextmanager
def served_studio(threads: int | None) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """(URL, server process, sessions folder) of `empo2-studio app` on a free port and a fresh sessions
    folder (`threads`: its OMP_NUM_THREADS; None: torch's own), stopped and removed on exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    with tempfile.TemporaryDirectory(prefix="empo2-studio-bench-") as tmp:
        sessions = Path(tmp) / "sessions"
        cmd = [str(Path(sys.executable).with_name("empo2-studio")), "app", "--port", str(port), "--sessions-dir", str(sessions)]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)} if threads else dict(os.environ)
        with open(Path(tmp) / "studio.log", "w") as log:
            server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                wait_until_served(url, server, timeout=600)
                yield url, server, sessions
            finally:
                server.terminate()
                server.wait(timeout=60)


def played_in_studio(threads: int | None, play: Callable[[str], dict], key: str,
                     read_sessions: Callable[[Path], dict]) -> dict:
    """`play(url)`'s record of a job played in a served studio's page (`served_studio`), with the
    studio process's CPU seconds over it ("studio_cpu_s") and, under `key`, `read_sessions` of the
    sessions folder the job wrote (read before the folder is removed)."""
    with served_studio(threads) as (url, server, sessions):
        studio0 = cpu_seconds(server.pid)
        record = play(url)
        record["studio_cpu_s"] = round(cpu_seconds(server.pid) - studio0, 1)
        record[key] = read_sessions(sessions)
    return record


@contextlib.contextmanager
def opened_page(url: str, tab: str) -> Iterator:
    """A headless Chromium page on `url` with `tab` opened (Playwright's sync API), closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(240_000)
            page.goto(url)
            page.get_by_role("tab", name=tab).click()
            yield page
        finally:
            browser.close()


def follow(page, status_id: str, timeout: float, phases: dict[str, str]) -> dict:
    """Read `#status_id` every second until its closing line (or `timeout` s): wall seconds, when the
    first progress line and each of `phases` (name → pattern) first showed, and the last text."""
    status = page.locator(f"#{status_id}")
    t0 = time.monotonic()
    seen: dict[str, float] = {}
    first_progress, text = None, ""
    while time.monotonic() - t0 < timeout:
        page.wait_for_timeout(1000)
        text = status.inner_text()
        now = round(time.monotonic() - t0, 1)
        if first_progress is None and re.search(r"\[running\]|elapsed", text):
            first_progress = now
        for phase, pattern in phases.items():
            if phase not in seen and re.search(pattern, text):
                seen[phase] = now
        if FINAL.search(text):
            break
    return {"wall_s": round(time.monotonic() - t0, 1), "first_progress_s": first_progress, "phases_s": seen,
            "status": text.strip()}  # fmt: skip
