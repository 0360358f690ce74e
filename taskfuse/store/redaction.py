"""Credentials out of every output: URLs, conninfo strings, error texts and log lines.

A store URL can carry a secret in three places, and all are masked as ``***``:

* the userinfo: ``postgresql://user:SECRET@host/db`` (everything between the first ``:``
  and the ``@`` that ends the authority, as libpq reads it, so ``?`` or ``@`` inside a
  password do not leak);
* a query parameter: ``?password=SECRET``, and any parameter whose name says it holds or
  points to a credential: libpq's ``password``, ``sslpassword``, ``passfile``, ``sslkey``,
  ``oauth_client_secret``, ``scram_client_key`` / ``scram_server_key``, and in general a
  name containing ``pass``, ``secret``, ``token``, ``key`` or ``cred``
  (percent-encoded names are decoded first);
* a keyword/value conninfo string, the other form libpq takes and echoes in its errors:
  ``host=db password=SECRET sslpassword='with spaces'``.

Error texts may also quote a secret out of context (libpq echoes a bad percent-encoded
token of the password, for one). So a store remembers the secret values of the URLs it
opened (`remember`), and `redact_text` masks those wherever they appear (values of at
least four characters; shorter ones are masked only where their place shows them).
"""

from __future__ import annotations

import re
import threading
from urllib.parse import quote, unquote, unquote_plus

MASK = "***"
_WORDS = ("pass", "secret", "token", "key", "cred")
#: Shorter remembered values would mask ordinary words; their place still masks them.
_MIN_REMEMBERED = 4
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*")
#: What ends a sentence after a URL in free text belongs to the sentence, not to the URL.
_TRAILING = ",;.:!?)]"
_PAIR = re.compile(r"(?P<key>\b[A-Za-z_][A-Za-z0-9_]*)(?P<eq>\s*=\s*)"
                   r"(?P<val>'(?:[^'\\]|\\.)*'?|[^\s'\",;&)]+)")
_PIECES = re.compile(r"[/?#@:]")
_remembered: set[str] = set()
_lock = threading.Lock()


def is_secret_name(name: str) -> bool:
    """Whether a connection parameter of this name holds or points to a credential."""
    lowered = unquote_plus(name).strip().lower()
    return any(word in lowered for word in _WORDS)


def redact_url(url: str) -> str:
    """A URL (or a keyword/value conninfo string) with every credential masked."""
    if "://" not in url:
        return _redact_pairs(url)
    scheme, _, rest = url.partition("://")
    if "://" in rest.partition("?")[0]:
        return f"{scheme}://{redact_url(rest)}"  # a URL inside a URL: mask the inner one
    userinfo, remainder = _userinfo(rest)
    prefix = ""
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        prefix = f"{user}:{MASK}@" if colon else f"{userinfo}@"
    head, question, query = remainder.partition("?")
    if question:
        query, hashmark, fragment = query.partition("#")
        query = "&".join(_redact_param(p) for p in query.split("&"))
        remainder = f"{head}?{query}{hashmark}{fragment}"
    return f"{scheme}://{prefix}{remainder}"


def _userinfo(rest: str) -> tuple[str | None, str]:
    """(userinfo, the rest) of what follows `scheme://`; userinfo None when there is none.

    The userinfo ends at the last ``@`` of the URL, not at the first ``/``: a password
    written unencoded may hold ``/``, ``?``, ``#`` or ``@`` (``app:k8s/Pa55@host/db``), and
    stopping at the first of them printed the rest of the password as the host. An ``@`` in
    a query value makes the mask reach too far, never too short."""
    at = rest.rfind("@")
    if at < 0:
        return None, rest
    return rest[:at], rest[at + 1:]


def encode_userinfo(url: str) -> str:
    """The URL with `/ ? # @` inside its userinfo percent-encoded, so a driver reads the
    user, password and host where `redact_url` does (libpq stops the userinfo at the first
    `/` and took the rest of such a password for a host, a port or a path, and quoted it in
    its errors). A URL without them is returned unchanged."""
    scheme, sep, rest = url.partition("://")
    userinfo, remainder = _userinfo(rest) if sep else (None, rest)
    if userinfo is None or not _PIECES.search(userinfo.replace(":", "", 1)):
        return url
    user, colon, password = userinfo.partition(":")
    safe = "%:!$&'()*+,;=-._~"  # what RFC 3986 allows in userinfo as it is, and escapes
    return (f"{scheme}://{quote(user, safe=safe.replace(':', ''))}{colon}"
            f"{quote(password, safe=safe)}@{remainder}")


def _redact_param(param: str) -> str:
    name, eq, _ = param.partition("=")
    return f"{name}={MASK}" if eq and is_secret_name(name) else param


def _redact_pairs(text: str) -> str:
    def mask(m: re.Match[str]) -> str:
        return f"{m['key']}{m['eq']}{MASK}" if is_secret_name(m["key"]) else m.group()

    return _PAIR.sub(mask, text)


def secrets_of(url: str) -> set[str]:
    """The secret values a URL or conninfo string carries (as written and decoded)."""
    found: set[str] = set()
    if "://" in url:
        userinfo, rest = _userinfo(url.partition("://")[2])
        if userinfo is not None and ":" in userinfo:
            password = userinfo.partition(":")[2]
            # libpq reads such a password only up to its first / ? # or @ and may quote
            # the pieces it took for a host or a path in its error: those are secret too
            found.update({password, *_PIECES.split(password)})
        for param in rest.partition("?")[2].partition("#")[0].split("&"):
            name, eq, value = param.partition("=")
            if eq and is_secret_name(name):
                found.add(value)
    else:
        found.update(m["val"].strip("'") for m in _PAIR.finditer(url)
                     if is_secret_name(m["key"]))
    decoded = {unquote(v) for v in found} | {unquote_plus(v) for v in found}
    return {v for v in found | decoded if v}


def remember(url: str) -> None:
    """Mask this URL's secret values in every later `redact_text` (a store calls this)."""
    values = {v for v in secrets_of(url) if len(v) >= _MIN_REMEMBERED}
    if values:
        with _lock:
            _remembered.update(values)


def redact_text(text: str, secrets: set[str] | frozenset[str] = frozenset()) -> str:
    """Free text (an error, a log line) with URLs, conninfo pairs and known secrets masked."""
    text = _URL.sub(_redact_url_in_text, text)
    text = _redact_pairs(text)
    with _lock:
        known = _remembered | {v for v in secrets if len(v) >= _MIN_REMEMBERED}
    for value in sorted(known, key=len, reverse=True):
        if value in text:
            text = text.replace(value, MASK)
    return text


def _redact_url_in_text(m: re.Match[str]) -> str:
    url = m.group()
    kept = url.rstrip(_TRAILING)
    return redact_url(kept) + url[len(kept):]


def describe_error(exc: BaseException, url: str | None = None) -> str:
    """An exception as one redacted line: its first line of text (or its type's name)."""
    lines = str(exc).strip().splitlines()
    first = lines[0].strip() if lines else type(exc).__name__
    return redact_text(first, secrets_of(url) if url else frozenset())
