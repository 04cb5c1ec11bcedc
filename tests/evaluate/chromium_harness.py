"""Headless Chromium for the tests: Debian's ``chromium`` and its matching ``chromium-driver`` (installed
with apt-get when missing and the tests run as root), driven by Selenium. Nothing is downloaded by
Selenium itself: both paths are given."""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

PACKAGES = ("chromium", "chromium-driver")


def ensure_chromium() -> tuple[str, str]:
    """(chromium, chromedriver) paths; installs Debian's packages if missing, skips if that cannot be done."""
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if all(found):
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium and chromium-driver are not installed and apt-get cannot install them here "
                    "(not root, or no apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if result.returncode != 0:
            pytest.skip(f"cannot install chromium: {' '.join(cmd)} failed: {result.stderr.strip()[-300:]}")
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if not all(found):
        pytest.skip(f"apt-get installed {' '.join(PACKAGES)} but chromium or chromedriver is not on PATH")
    return found


@contextmanager
def browser(width: int = 1280, height: int = 900):
    """A headless Chromium whose console (console.error, uncaught exceptions, resources that fail to
    load) the test reads with ``console_errors``."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="the browser tests need selenium (the dev extra)")
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = ensure_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--allow-file-access-from-files", f"--window-size={width},{height}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        driver.set_page_load_timeout(120)
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[str]:
    """The console's errors since the last call: SEVERE entries (console.error, uncaught exceptions,
    resources that failed to load)."""
    return [f"{e.get('source')}: {e.get('message')}" for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def full_page_screenshot(driver, path: Path) -> tuple[int, int]:
    """A screenshot of the whole page (the window grown to the page's height) at ``path``; its size."""
    width = driver.execute_script("return document.documentElement.clientWidth")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(driver.get_window_size()["width"], min(height + 200, 16000))
    driver.save_screenshot(str(path))
    return width, height
