"""One-time dashboard codes and the sessions they open, on a fake clock."""

from __future__ import annotations

from steadyserve.controller import dashboard_login as dl


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_code_opens_one_session_once() -> None:
    logins = dl.Logins("abc", Clock())
    code = logins.new_code()
    session = logins.spend(code)
    assert session is not None and session != code
    assert logins.valid(session)
    assert logins.spend(code) is None  # spent
    assert not logins.valid(code)  # a code is not a session
    assert not logins.valid(None) and not logins.valid("")


def test_a_code_expires_after_a_minute_and_a_session_after_its_ttl() -> None:
    clock = Clock()
    logins = dl.Logins("abc", clock)
    late, fresh = logins.new_code(), logins.new_code()
    clock.now += dl.CODE_TTL_S - 0.001
    session = logins.spend(fresh)
    assert session is not None
    clock.now += 0.002
    assert logins.spend(late) is None
    clock.now += dl.SESSION_TTL_S - 0.01
    assert logins.valid(session)
    clock.now += 0.01
    assert not logins.valid(session)


def test_unspent_codes_and_sessions_are_bounded_oldest_first() -> None:
    logins = dl.Logins("abc", Clock())
    first = logins.new_code()
    codes = [logins.new_code() for _ in range(dl.MAX_CODES)]
    assert logins.spend(first) is None
    sessions = [logins.spend(c) for c in codes]
    sessions += [logins.spend(logins.new_code()) for _ in range(dl.MAX_SESSIONS - len(codes) + 1)]
    assert not logins.valid(sessions[0])
    assert all(logins.valid(s) for s in sessions[1:])


def test_each_home_has_its_own_cookie() -> None:
    # Browsers share 127.0.0.1 cookies across ports: two homes' controllers must not clash.
    assert dl.Logins("aaa").cookie_name != dl.Logins("bbb").cookie_name
