#!/usr/bin/env python3
"""`p2ptrace html` rendered in a real headless Chromium (Debian's `chromium`), driven through the
DevTools protocol over a websocket with the standard library only (no pip, no browser download).

For a synthetic job with fallbacks and a healthy one it asserts: no console error, no uncaught
exception, no network request at all (the page is self-contained); every matrix cell carries the
classes the report's JSON implies (`cell t-<class of most bytes>`, `fallback`, `multi`); clicking a
fallback cell shows its causes and fix; the call-site table lists the report's sites in its order
(or says how to capture them); and a screenshot is written. A missing browser is a failure,
never a skip: CI must have it (scripts/common.sh installs it)."""
import argparse
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


class WebSocket:
    """The client side of RFC 6455, as much as CDP needs: text frames, masked, any length."""

    def __init__(self, host, port, path):
        self.sock = socket.create_connection((host, port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                fail("DevTools closed the websocket handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n")[0]:
            fail(f"DevTools refused the websocket: {head[:200]!r}")

    def send(self, text):
        data = text.encode()
        n = len(data)
        header = bytes([0x81])
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                fail("DevTools closed the websocket")
            buf += chunk
        return bytes(buf)

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            opcode = b0 & 0x0F
            if opcode == 0x9:  # ping: answer, keep reading
                continue
            message += payload
            if b0 & 0x80:
                return message.decode()


class Browser:
    def __init__(self, chromium, workdir):
        self.profile = tempfile.mkdtemp(prefix="chromium-", dir=workdir)
        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "--window-size=1400,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + 60
        while not (os.path.exists(port_file) and len(open(port_file).read().split("\n")) >= 2):
            if self.proc.poll() is not None:
                fail(f"chromium exited with {self.proc.returncode}: {self.proc.stderr.read().decode()[-2000:]}")
            if time.time() > deadline:
                fail("chromium did not open its DevTools port within 60 s")
            time.sleep(0.05)
        port, path = open(port_file).read().split("\n")[:2]
        self.ws = WebSocket("127.0.0.1", int(port), path)
        self.next_id = 0
        self.events = []

    def call(self, method, session=None, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    fail(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_event(self, method, timeout=30):
        deadline = time.time() + timeout
        for e in self.events:
            if e.get("method") == method:
                return e
        while time.time() < deadline:
            e = json.loads(self.ws.recv())
            self.events.append(e)
            if e.get("method") == method:
                return e
        fail(f"no {method} within {timeout} s")

    def close(self):
        try:
            self.call("Browser.close")
        except SystemExit:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def expected_cells(report):
    """(host, src gpu, dst gpu) -> (class of the pair that moved most bytes, any fallback, several paths)."""
    cells = {}
    for p in report["pairs"]:
        if p["src"]["host"] != p["dst"]["host"]:
            continue
        key = (p["src"]["host"], p["src"]["gpu"], p["dst"]["gpu"])
        top, top_bytes, fallback, n = cells.get(key, (None, -1, False, 0))
        if p["bytes"] > top_bytes:
            top, top_bytes = p["transport"], p["bytes"]
        cells[key] = (top, top_bytes, fallback or p["fallback"], n + 1)
    return {k: (v[0], v[2], v[3] > 1) for k, v in cells.items()}


def check_page(browser, html, report, screenshot, want_fallbacks):
    target = browser.call("Target.createTarget", url="about:blank")["targetId"]
    session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Runtime", "Log", "Network", "Page"):
        browser.call(f"{domain}.enable", session)
    browser.events.clear()
    browser.call("Page.navigate", session, url="file://" + os.path.abspath(html))
    browser.wait_event("Page.loadEventFired")

    def js(expr):
        r = browser.call("Runtime.evaluate", session, expression=expr, returnByValue=True)
        if "exceptionDetails" in r:
            fail(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    if js("document.body.dataset.ready") != "1":
        fail("the page's script did not run to its end")
    cells = js("""Array.from(document.querySelectorAll('table.matrix')).map(t => ({host: t.dataset.host,
        rows: Array.from(t.querySelectorAll('tr')).slice(1).map(tr => Array.from(tr.querySelectorAll('td'))
        .map(td => td.className))}))""")
    if not cells:
        fail("no matrix in the page")
    want = expected_cells(report)
    checked = 0
    for table in cells:
        host = table["host"]
        gpus = sorted({k[1] for k in want if k[0] == host} | {k[2] for k in want if k[0] == host})
        if len(table["rows"]) != len(gpus):
            fail(f"{host}: {len(table['rows'])} matrix rows, the report has {len(gpus)} GPUs")
        for r, row in enumerate(table["rows"]):
            for c, cls in enumerate(row):
                key = (host, gpus[r], gpus[c])
                classes = set(cls.split())
                if r == c:
                    if classes != {"self"}:
                        fail(f"{key}: diagonal cell has classes {cls!r}")
                    continue
                if key not in want:
                    if classes != {"none"}:
                        fail(f"{key}: no pair in the report, yet classes {cls!r}")
                    continue
                top, fallback, multi = want[key]
                expect = {"cell", f"t-{top}"} | ({"fallback"} if fallback else set()) | ({"multi"} if multi else set())
                if classes != expect:
                    fail(f"{key}: classes {sorted(classes)}, expected {sorted(expect)}")
                checked += 1
    if checked == 0:
        fail("no matrix cell was checked")

    fallback_cells = js("document.querySelectorAll('td.cell.fallback').length")
    if want_fallbacks and fallback_cells == 0:
        fail("the fallback job shows no fallback cell")
    if not want_fallbacks and fallback_cells != 0:
        fail(f"the healthy job shows {fallback_cells} fallback cells")
    if want_fallbacks:
        js("document.querySelector('td.cell.fallback').click()")
        details = js("document.getElementById('details').textContent")
        causes = {c["id"] for p in report["pairs"] for c in p["causes"]}
        if not any(c in details for c in causes) or "fix: " not in details:
            fail(f"clicking a fallback cell shows no cause and fix: {details[:400]!r}")
        if js("document.querySelectorAll('#fallbacks tr').length") < 2:
            fail("the fallback list is empty")
    else:
        if js("document.getElementById('no-fallbacks') !== null") is not True:
            fail("the healthy job does not say that no pair fell back")
    if js("document.querySelectorAll('svg rect.bar').length") == 0:
        fail("no bandwidth bar drawn")

    # The call-site table: the report's sites in its order, host-staging ones marked, frames shown.
    sites = report["call_sites"]
    rows = js("""Array.from(document.querySelectorAll('#call-sites tr[data-site]')).map(tr => ({site: Number(tr.dataset.site),
        staged: tr.classList.contains('staged'), text: tr.textContent}))""")
    if not sites:
        if rows or js("document.getElementById('no-call-sites') !== null") is not True:
            fail("a job without call sites should say how to capture them, and show no site table")
    else:
        if [r["site"] for r in rows] != [c["id"] for c in sites[:100]]:
            fail(f"call-site rows {[r['site'] for r in rows]}, the report's {[c['id'] for c in sites[:100]]}")
        for r, c in zip(rows, sites):
            if r["staged"] != (c["host_staged_bytes"] > 0):
                fail(f"call site {c['id']}: marked staged {r['staged']}, host-staged bytes {c['host_staged_bytes']}")
            if any(f not in r["text"] for f in c["frames"]):
                fail(f"call site {c['id']}: its frames are not all in the row: {r['text'][:300]!r}")
        if not rows[0]["staged"]:
            fail("the first call site of the fallback job stages nothing through the host")

    shot = browser.call("Page.captureScreenshot", session, format="png")["data"]
    png = base64.b64decode(shot)
    if not png.startswith(b"\x89PNG") or len(png) < 10000:
        fail(f"screenshot is not a plausible PNG ({len(png)} bytes)")
    with open(screenshot, "wb") as f:
        f.write(png)

    # Settle: let late console messages and requests arrive, then judge every event seen.
    js("new Promise(r => setTimeout(r, 200))")
    errors, requests = [], []
    for e in browser.events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            errors.append(p["exceptionDetails"].get("text", "") + " " + json.dumps(p["exceptionDetails"].get("exception", {}))[:300])
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
            errors.append(f"console.{p['type']}: " + json.dumps(p.get("args"))[:300])
        elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
            errors.append(f"log {p['entry']['level']}: {p['entry'].get('text', '')[:300]}")
        elif m == "Network.requestWillBeSent":
            url = p["request"]["url"]
            if not url.startswith("file://") or os.path.abspath(html) not in url:
                requests.append(url)
    if errors:
        fail(f"{html}: console errors: {errors}")
    if requests:
        fail(f"{html}: the page asked the network for {requests}")
    browser.call("Target.closeTarget", targetId=target)
    return checked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--out", required=True, help="a directory for the jobs, pages and screenshots")
    ap.add_argument("--chromium", default=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
    a = ap.parse_args()
    if not (os.path.isfile(a.chromium) and os.access(a.chromium, os.X_OK)):
        fail(f"no Chromium at {a.chromium}: install Debian's `chromium` package (scripts/common.sh does) "
             "or point CHROMIUM at one")
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    browser = Browser(a.chromium, a.out)
    try:
        for scenario, ranks in (("fallback", 16), ("healthy", 8)):
            job = os.path.join(a.out, scenario)
            # The fallback job carries call sites (P2PTRACE_STACKS), the healthy one none.
            run([a.cli, "synth", "--ranks", str(ranks), "--events", "64", "--out", job, "--scenario", scenario]
                + (["--stacks"] if scenario == "fallback" else []))
            html = os.path.join(a.out, f"{scenario}.html")
            run([a.cli, "html", job, "-o", html])
            report = json.loads(run([a.cli, "report", job, "--json"]))
            page = open(html, encoding="utf-8").read()
            for needle in ("http://", "https://", "<link", " src="):
                if needle in page:
                    fail(f"{html} refers outside itself: {needle!r}")
            checked = check_page(browser, html, report, os.path.join(a.out, f"{scenario}.png"), scenario == "fallback")
            print(f"ok: {scenario}: {checked} matrix cells as the report says, no console error, no request, "
                  f"screenshot {scenario}.png")
    finally:
        browser.close()


if __name__ == "__main__":
    main()
