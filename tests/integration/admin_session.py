"""Drive the real Django admin over HTTP: log in, read a change form, post it back."""

from __future__ import annotations

import http.cookiejar
import urllib.parse
import urllib.request
from html.parser import HTMLParser


class _FormFields(HTMLParser):
    """Collects the values a browser would submit from the page's main form."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        name = a.get("name")
        if tag == "input" and name and a.get("type") not in ("submit", "button", "file"):
            if a.get("type") == "checkbox":
                if "checked" in a:
                    self.fields[name] = a.get("value") or "on"
            else:
                self.fields[name] = a.get("value", "")
        elif tag == "select" and name:
            self._select = name
        elif tag == "option" and self._select and "selected" in a:
            self.fields[self._select] = a.get("value", "")
        elif tag == "textarea" and name:
            self._textarea = name
            self.fields[name] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.fields[self._textarea] += data


class AdminSession:
    """A logged-in admin user (session and CSRF cookies, like a browser)."""

    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.base_url = base_url
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        fields = self.form("/admin/login/")
        fields.update({"username": username, "password": password, "next": "/admin/"})
        status, body = self.post("/admin/login/", fields)
        if "Log out" not in body and "logout" not in body:
            raise RuntimeError(f"admin login failed ({status})")

    def get(self, path: str) -> str:
        with self.opener.open(self.base_url + path, timeout=30) as response:
            return response.read().decode()

    def form(self, path: str) -> dict[str, str]:
        """The fields of the form on path, as the browser would post them."""
        parser = _FormFields()
        parser.feed(self.get(path))
        return parser.fields

    def post(self, path: str, fields: dict[str, str]) -> tuple[int, str]:
        csrf = next((c.value for c in self.jar if c.name == "csrftoken"), "")
        request = urllib.request.Request(
            self.base_url + path, data=urllib.parse.urlencode(fields).encode(), method="POST",
            headers={"X-CSRFToken": csrf, "Referer": self.base_url + path},
        )
        with self.opener.open(request, timeout=30) as response:
            return response.status, response.read().decode()
