"""Drives the Weir dashboard in headless Chromium (Debian's, through Playwright) and
checks that it renders a running job: the operator graph with its vertices, numbers that
update, and the checkpoint history. Usage: check.py URL VERTICES SCREENSHOT.png"""

import sys
import time

from playwright.sync_api import sync_playwright

url, vertices, screenshot = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_function(
        f"document.querySelectorAll('#graph g.vertex').length === {vertices}", timeout=15000)
    assert page.locator("#graph g.edge").count() >= vertices - 1, "edges are drawn"
    assert page.locator("#jobs tbody tr").count() >= 1, "the job list shows the job"
    first = int(page.inner_text("#job-rows-in"))
    updates = int(page.get_attribute("#updated", "data-updates"))
    time.sleep(3)
    second = int(page.inner_text("#job-rows-in"))
    assert int(page.get_attribute("#updated", "data-updates")) >= updates + 2, "the page refreshes"
    assert second > first, f"rows in did not move: {first} then {second}"
    page.wait_for_function(
        "document.querySelectorAll('#checkpoints tbody tr').length > 0", timeout=15000)
    assert "COMPLETED" in page.inner_text("#checkpoints"), "a completed checkpoint is listed"
    assert page.locator("#chart-throughput polyline").count() == 2, "throughput chart drawn"
    assert not errors, f"script errors: {errors}"
    page.screenshot(path=screenshot, full_page=True)
    browser.close()
print(f"dashboard ok: {vertices} vertices, rows in {first} -> {second}")
