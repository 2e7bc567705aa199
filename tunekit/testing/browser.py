"""A real browser for tests: Debian's headless chromium, loading a page and returning what it rendered."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(url: str, workdir: Path, *flags: str) -> str:
    """Loads ``url`` in headless Chromium, lets its scripts and requests run, returns stdout."""
    profile = workdir / "chromium-profile"
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--window-size=1400,1000",
        "--virtual-time-budget=20000",
        *flags,
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False, cwd=workdir)
    return done.stdout


def page_text(url: str, workdir: Path, expect: str, attempts: int = 3) -> str:
    """The rendered page as plain text; tries again while ``expect`` has not rendered yet."""
    text = ""
    for _ in range(attempts):
        dom = chromium(url, workdir, "--dump-dom")
        dom = re.sub(r"<(style|script)\b.*?</\1>", " ", dom, flags=re.S)
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))
        if re.search(expect, text):
            return text
        time.sleep(2)
    return text
