"""The staff pages in a real headless chromium, driven over the DevTools protocol.

Log in with a plain HTTP form post (CSRF and all), hand the session cookie to chromium,
load /dashboard/ and the admin, check what was drawn, and keep screenshots under
test-artifacts/ for a human to look at.
"""

from __future__ import annotations

import asyncio
import base64
import http.cookiejar
import json
import math
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import CLS, MINILM, MLM
from tests.integration.test_metrics import burst
from tests.stack import ROOT, Stack, stop_process, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]

ARTIFACTS = ROOT / "test-artifacts"
USERNAME, PASSWORD = "ops", "dashboard-test-password-1"
WIDTH = 1440
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                  "--remote-debugging-port=0")


def chromium_binary() -> str | None:
    """Debian's chromium, or another Chrome on PATH."""
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


class Browser:
    """One headless chromium and a DevTools session on its first page."""

    def __init__(self, binary: str, profile: Path) -> None:
        from websockets.sync.client import connect

        self.process = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        port = wait_until(lambda: port_file.read_text().split()[0], 30, "chromium's DevTools port")
        pages = wait_until(lambda: [t for t in json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
                                    if t["type"] == "page"], 10, "a chromium page")
        self.socket = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        self.next_id = 0
        self.send("Page.enable")
        self.resize(1000)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events in between are skipped)."""
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        """Navigate and wait until the new document has loaded."""
        self.send("Page.navigate", url=url)
        wait_until(lambda: self.evaluate("location.href") == url and self.evaluate("document.readyState") == "complete",
                   30, f"{url} to load")

    def resize(self, height: int) -> None:
        """Viewport of WIDTH x height CSS pixels."""
        self.send("Emulation.setDeviceMetricsOverride", width=WIDTH, height=height, deviceScaleFactor=1, mobile=False)

    def screenshot(self, name: str) -> Path:
        """The whole page as test-artifacts/<name>.png."""
        height = self.send("Page.getLayoutMetrics")["cssContentSize"]["height"]
        self.resize(min(8000, math.ceil(height)))
        data = self.send("Page.captureScreenshot", format="png")["data"]
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        path.write_bytes(base64.b64decode(data))
        self.resize(1000)
        return path

    def close(self) -> None:
        """Close the session and stop chromium (by its PID)."""
        self.socket.close()
        stop_process(self.process, timeout_s=10)


def login(base_url: str) -> str:
    """The session id of a staff login through the admin's own form."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{base_url}/admin/login/").read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"csrfmiddlewaretoken": csrf, "username": USERNAME, "password": PASSWORD,
                                   "next": "/admin/"}).encode()
    opener.open(urllib.request.Request(f"{base_url}/admin/login/", data=form, headers={"Referer": base_url}))
    session = {c.name: c.value for c in jar}.get("sessionid")
    assert session, "the admin login did not set a session cookie"
    return session


@pytest.fixture(scope="module")
def browser(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """chromium logged in as a superuser of the stack."""
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium)")
    stack.manage("createsuperuser", "--noinput", "--username", USERNAME, "--email", "ops@example.com",
                 env={"DJANGO_SUPERUSER_PASSWORD": PASSWORD})
    session = login(stack.url)
    running = Browser(binary, tmp_path_factory.mktemp("chromium-profile"))
    try:
        running.send("Network.setCookie", name="sessionid", value=session, url=stack.url + "/", httpOnly=True)
        yield running
    finally:
        running.close()


# Pixels of a uPlot canvas close to a series colour: proof the line itself was drawn.
COLOURED_PIXELS = """(() => {
  const [r, g, b] = %s;
  const canvas = document.querySelector('#task-%s [data-chart="%s"] canvas');
  const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let n = 0;
  const near = (i) => Math.abs(px[i] - r) < 25 && Math.abs(px[i + 1] - g) < 25 && Math.abs(px[i + 2] - b) < 25;
  for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 200 && near(i)) n++;
  return n;
})()"""


def test_dashboard_draws_live_charts_and_workers(stack: Stack, token: str, browser: Browser) -> None:
    for _ in range(3):  # traffic over a few seconds, in concurrent bursts so batches form
        assert asyncio.run(burst(f"{stack.url}/models/{MINILM}", token, 24)) == [200] * 24
    browser.goto(f"{stack.url}/dashboard/")
    assert browser.evaluate("document.title").startswith("Live metrics")
    wait_until(lambda: browser.evaluate("window.dashboard.updates") >= 2, 20, "two refreshes of the dashboard")
    assert browser.evaluate("window.dashboard.failures") == 0, browser.evaluate("window.dashboard.lastError")
    cards = browser.evaluate("[...document.querySelectorAll('.dash-task')].map(c => c.dataset.model)")
    assert {MINILM, MLM, CLS} <= set(cards)
    key = f"{MINILM}/feature-extraction"
    drawn = browser.evaluate(f"""(() => {{
      const charts = window.dashboard.charts[{json.dumps(key)}];
      const sum = (a) => a.reduce((s, v) => s + (v || 0), 0);
      const series = (chart, label) => chart.data[chart.series.findIndex((s) => s.label === label)];
      return {{ names: Object.keys(charts), rps: sum(series(charts.rps, "answered")),
               p99: sum(series(charts.latency, "p99")), batched: sum(series(charts.batch, "requests").slice(1)),
               max: series(charts.depth, "max_queue_size").at(-1) }};
    }})()""")
    assert sorted(drawn["names"]) == ["batch", "depth", "latency", "rejected", "rps", "split"]
    assert drawn["rps"] >= 72 and drawn["p99"] > 0 and drawn["batched"] > 0 and drawn["max"] > 0
    card = f"{MINILM}--feature-extraction"
    assert browser.evaluate(COLOURED_PIXELS % ("[65, 118, 144]", card, "rps")) > 20, "no request-rate line drawn"
    assert browser.evaluate(COLOURED_PIXELS % ("[121, 174, 200]", card, "batch")) > 50, "no batch-size bars drawn"
    workers = browser.evaluate("[...document.querySelectorAll('#dash-workers tbody tr')].map(r => r.innerText)")
    assert len(workers) == len(stack.workers) and f"{MINILM}: ready" in workers[0]
    print("screenshot:", browser.screenshot("dashboard"))


def test_model_change_list_shows_throughput_and_runs_a_test_input(stack: Stack, token: str, browser: Browser) -> None:
    assert asyncio.run(burst(f"{stack.url}/models/{CLS}", token, 16)) == [200] * 16
    changelist = f"{stack.url}/admin/models_registry/registeredmodel/"
    browser.goto(changelist)
    rows = browser.evaluate("""Object.fromEntries([...document.querySelectorAll('#result_list tbody tr')].map(r =>
        [r.querySelector('.field-name').innerText, [r.querySelector('.field-live_state').innerText,
         parseFloat(r.querySelector('.field-throughput').innerText)]]))""")
    assert rows[CLS][0] == "ready" and rows[CLS][1] > 0, rows
    widths = browser.evaluate("""[document.documentElement.scrollWidth, document.querySelector('.results').scrollWidth,
                                  document.querySelector('.results').clientWidth]""")
    assert widths[0] <= WIDTH and widths[1] <= widths[2], f"the model list scrolls sideways at {WIDTH} px: {widths}"
    print("screenshot:", browser.screenshot("admin-models"))
    browser.evaluate(f"""(() => {{
      for (const row of document.querySelectorAll('#result_list tbody tr'))
        if ([{json.dumps(MINILM)}, {json.dumps(MLM)}].includes(row.querySelector('.field-name').innerText))
          row.querySelector('input.action-select').click();
      document.querySelector('select[name=action]').value = 'run_test_input';
      document.querySelector('#changelist-form button[name=index]').click();
    }})()""")
    wait_until(lambda: browser.evaluate("document.readyState") == "complete"
               and browser.evaluate("document.querySelectorAll('ul.messagelist li').length") >= 2,
               60, "the test-input action's messages")
    messages = browser.evaluate(
        "[...document.querySelectorAll('ul.messagelist li')].map(li => [li.className, li.innerText])")
    by_task = {text.split(" ")[0].lower(): (level, text) for level, text in messages}  # the admin capitalises
    assert by_task[f"{MINILM}/feature-extraction"][0] == "success", messages
    assert by_task[f"{MLM}/fill-mask"][0] == "success" and "[MASK]" in by_task[f"{MLM}/fill-mask"][1], messages
    embedded = by_task[f"{MINILM}/feature-extraction"][1]
    assert "compute" in embedded and "384 floats" in embedded, embedded
    print("screenshot:", browser.screenshot("admin-test-input"))
