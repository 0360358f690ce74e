"""A password written unencoded (`/ @ ? #` in it) is masked everywhere (issue 27, item 5).

`postgresql://app:k8s/Pa55-word@host/db` was printed whole: the masking, like libpq, ended
the userinfo at the first `/`, so the password looked like a host and a path. With `@?#` in
it a piece came back inside the driver's error text (libpq read it as a host name).
"""

from __future__ import annotations

import logging

import pytest
from psycopg.conninfo import conninfo_to_dict

from taskfuse.cli import main
from taskfuse.runtime import logs
from taskfuse.store.redaction import encode_userinfo, redact_text, redact_url
from tests.hostile import answer_of
from tests.store.backends import need_pg

PASSWORDS = ["k8s/Pa55-word", "p@ss?w#rd/xyzw", "a/b/c@d", "q#frag/ment", "s3cr?t=1&x"]


def _url(password: str, host: str = "127.0.0.1:5432", query: str = "") -> str:
    return f"postgresql://app:{password}@{host}/test{query}"


def _pieces(password: str) -> list[str]:
    """The password and every piece a parser could take for a host, port or path."""
    import re

    return [password, *(p for p in re.split(r"[/?#@:&=]", password) if len(p) >= 3)]


@pytest.mark.parametrize("password", PASSWORDS)
def test_the_url_masks_the_whole_password(password: str) -> None:
    for text in (redact_url(_url(password)), redact_text(f"could not open {_url(password)}."),
                 logs.line(logging.ERROR, f"store {_url(password)}", json_lines=True),
                 logs.line(logging.ERROR, f"store {_url(password)}", json_lines=False)):
        assert "app:***@127.0.0.1:5432/test" in text
        assert not [p for p in _pieces(password) if p in text], text


@pytest.mark.parametrize("password", PASSWORDS)
def test_the_driver_reads_the_password_where_the_masking_does(password: str) -> None:
    given = conninfo_to_dict(encode_userinfo(_url(password, query="?sslmode=disable")))
    assert given["password"] == password and given["host"] == "127.0.0.1"
    assert given["user"] == "app" and given["dbname"] == "test"
    assert encode_userinfo("postgresql://u:plain@h/db") == "postgresql://u:plain@h/db"


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_no_piece_of_the_password_in_a_command_error(password: str,
                                                     verbose: list[str]) -> None:
    """The server refuses the role: the error is the server's, quoting nothing of ours."""
    need_pg()
    answer = answer_of(main, [*verbose, "status", "--store",
                              _url(password, query="?retry_for=0&connect_timeout=3")])
    assert answer.code == 2, answer.err
    assert not [p for p in _pieces(password) if p in answer.err], answer.err
    if not verbose:
        answer.hold_to_promises()
        assert "role \"app\" does not exist" in answer.err  # it reached the right server
