"""What the browser tests share: Debian's Chromium under Playwright (a browser that Playwright
downloads cannot be had here), and the page errors a test asserts there were none of."""

CHROMIUM = "/usr/bin/chromium"


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM,
                                      args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])


def collect_errors(page, console=False):
    """The list that the page's uncaught errors (and, with console=True, its console.error
    lines) are appended to from now on."""
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    if console:
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return errors
