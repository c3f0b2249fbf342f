"""Playwright drives the chat UI of `nanochat chat-web` in Debian's Chromium (tests/test_server.cpp).

usage: ui_test.py BASE_URL SCREENSHOT.png   prints one JSON object with what it saw.
Steps: load (health banner gone), send a message and watch the reply stream in, edit the
message (the conversation is cut there), regenerate the reply, /temperature, /help, a
screenshot of the conversation, the header on a 390-px phone screen (one line; a second
screenshot, SCREENSHOT_390.png), then /clear; the cache_salt of every request (one per
browser: the same after a reload, another in a second browser profile).
"""
import json
import sys

from playwright.sync_api import sync_playwright

import chromium

base, shot = sys.argv[1], sys.argv[2]
out = {}
TIMEOUT = 30000

with sync_playwright() as p:
    browser = chromium.launch(p)
    page = browser.new_page(viewport={"width": 1000, "height": 700})
    errors = chromium.collect_errors(page)
    page.goto(base + "/")
    page.wait_for_function("document.getElementById('banner').classList.contains('hidden')", timeout=TIMEOUT)

    def wait_idle():
        page.wait_for_selector("#send:not(.hidden)", timeout=TIMEOUT)
        page.wait_for_function("!document.querySelector('.message.streaming')", timeout=TIMEOUT)

    # the server may finish a short reply before the page reads it, and the browser then gets
    # every event in one chunk: hand the UI one SSE event per read, 5 ms apart, and count
    # the token events, so "it streams" is checked against what was actually sent
    page.evaluate("""() => {
      window.__token_events = 0;
      window.__salts = [];
      const original = window.fetch;
      window.fetch = async (...args) => {
        if (args[1] && args[1].body) window.__salts.push(JSON.parse(args[1].body).cache_salt);
        const res = await original(...args);
        if (!String(args[0]).endsWith('/chat/completions') || !res.body) return res;
        const reader = res.body.getReader(), dec = new TextDecoder(), enc = new TextEncoder();
        let buf = '';
        const paced = new ReadableStream({async pull(controller) {
          for (;;) {
            const end = buf.indexOf('\\n\\n');
            if (end >= 0) {
              const event = buf.slice(0, end + 2);
              buf = buf.slice(end + 2);
              if (event.includes('"token"')) window.__token_events++;
              await new Promise(r => setTimeout(r, 5));
              controller.enqueue(enc.encode(event));
              return;
            }
            const {done, value} = await reader.read();
            if (done) { if (buf) controller.enqueue(enc.encode(buf)); controller.close(); return; }
            buf += dec.decode(value, {stream: true});
          }
        }});
        return new Response(paced, {status: res.status, statusText: res.statusText, headers: res.headers});
      };
    }""")
    # count the distinct texts the streaming reply goes through
    page.evaluate("""() => {
      window.__updates = new Set();
      new MutationObserver(() => {
        const d = document.querySelector('.message.assistant.streaming');
        if (d && d.textContent && !d.textContent.includes('···')) window.__updates.add(d.textContent);
      }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
    }""")
    page.fill("#input", "hello")
    page.press("#input", "Enter")
    page.wait_for_selector(".message.user", timeout=TIMEOUT)
    wait_idle()
    out["stream_updates"] = page.evaluate("window.__updates.size")
    out["token_events"] = page.evaluate("window.__token_events")
    first_reply = page.inner_text(".message.assistant")
    assert first_reply.strip(), "empty reply"

    # edit: clicking the user message puts it back in the input and cuts the conversation
    page.click(".message.user")
    assert page.input_value("#input") == "hello"
    assert page.locator(".message.assistant").count() == 0
    page.fill("#input", "hello again")
    page.press("#input", "Enter")
    wait_idle()
    out["after_edit_user"] = page.locator(".message.user").all_inner_texts()

    # regenerate: clicking the reply replaces it
    page.click(".message.assistant")
    page.wait_for_timeout(50)
    wait_idle()
    out["after_regenerate_assistants"] = page.locator(".message.assistant").count()

    page.fill("#input", "/temperature 0.5")
    page.press("#input", "Enter")
    out["settings"] = page.inner_text("#settings")
    page.fill("#input", "/help")
    page.press("#input", "Enter")
    assert "/clear" in page.locator(".message.console").last.inner_text()
    page.screenshot(path=shot, full_page=True)

    # a phone (390 px wide): the header stays one line. Each text in it must span one line
    # (its content height over its line height), and the header be no taller than its tallest
    # part plus its padding; the screenshot must be the phone's width
    page.set_viewport_size({"width": 390, "height": 844})
    header = page.evaluate("""() => {
      const h = document.querySelector('header'), px = v => parseFloat(v) || 0;
      const box = e => { const cs = getComputedStyle(e), r = e.getBoundingClientRect();
        return {height: r.height, content: r.height - px(cs.paddingTop) - px(cs.paddingBottom)
                - px(cs.borderTopWidth) - px(cs.borderBottomWidth), line: px(cs.lineHeight)}; };
      const parts = [...h.querySelectorAll('.brand span, #settings, #new-chat')].map(e => ({id: e.id || e.className || 'brand', ...box(e)}));
      const hb = box(h);
      return {height: hb.height, content: hb.content, width: document.documentElement.scrollWidth,
              lines: Math.max(...parts.map(p => Math.round(p.content / p.line))),
              tallest_part: Math.max(...parts.map(p => p.height)), parts};
    }""")
    out["header_390"] = header
    phone_shot = shot[:-4] + "_390.png" if shot.endswith(".png") else shot + "_390.png"
    page.screenshot(path=phone_shot)
    with open(phone_shot, "rb") as f:
        png = f.read(24)
    out["phone_screenshot_width"] = int.from_bytes(png[16:20], "big")  # the PNG's IHDR width
    assert out["phone_screenshot_width"] == 390, out["phone_screenshot_width"]
    assert header["lines"] == 1 and header["width"] == 390, header
    assert header["content"] <= header["tallest_part"] + 0.5, header
    page.set_viewport_size({"width": 1000, "height": 700})

    page.fill("#input", "/clear")
    page.press("#input", "Enter")
    out["after_clear_messages"] = page.locator(".message.user, .message.assistant").count()

    # the salt each chat request carried; after a reload the page's stored one, and a second
    # profile (its own storage: another browser) draws its own
    salts = page.evaluate("window.__salts")
    page.reload()
    salt_after_reload = page.evaluate("localStorage.getItem('nanochat_cache_salt')")
    other = browser.new_context().new_page()
    other.goto(base + "/")
    out["cache_salts"] = {"requests": salts, "after_reload": salt_after_reload,
                          "other_browser": other.evaluate("localStorage.getItem('nanochat_cache_salt')")}
    out["page_errors"] = errors
    assert not errors, errors
    browser.close()

print(json.dumps(out, ensure_ascii=False))
