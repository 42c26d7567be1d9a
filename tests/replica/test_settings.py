"""Runner settings: the controller's environment over the decorator's defaults."""

from __future__ import annotations

import pytest

from steadyserve.replica.settings import SettingsError, from_env
from steadyserve.wire import replica_contract as contract

PORTS = {"PORT": "8001", "STEADY_CONTROL_PORT": "8002"}


def test_defaults_without_env_or_options() -> None:
    settings = from_env(PORTS, {})
    assert (settings.port, settings.control_port, settings.host) == (8001, 8002, "127.0.0.1")
    assert settings.user_config is None
    assert settings.max_ongoing_requests == 100
    assert settings.health_check_timeout_s == 30.0
    assert settings.graceful_shutdown_timeout_s == 20.0


def test_decorator_options_fill_what_the_env_leaves_out() -> None:
    options = {
        "user_config": {"language": "german"},
        "max_ongoing_requests": 4,
        "health_check_timeout_s": 3,
        "graceful_shutdown_timeout_s": 7,
    }
    settings = from_env(PORTS, options)
    assert settings.user_config == {"language": "german"}
    assert settings.max_ongoing_requests == 4
    assert settings.health_check_timeout_s == 3.0
    assert settings.graceful_shutdown_timeout_s == 7.0


def test_env_wins_over_decorator_options() -> None:
    env = {
        **PORTS,
        "STEADY_USER_CONFIG": '{"language": "spanish"}',
        "STEADY_MAX_ONGOING_REQUESTS": "9",
        "STEADY_HEALTH_CHECK_TIMEOUT_S": "1.5",
        "STEADY_GRACEFUL_SHUTDOWN_TIMEOUT_S": "0",
    }
    options = {"user_config": {"language": "german"}, "max_ongoing_requests": 4}
    settings = from_env(env, options)
    assert settings.user_config == {"language": "spanish"}
    assert settings.max_ongoing_requests == 9
    assert settings.health_check_timeout_s == 1.5
    assert settings.graceful_shutdown_timeout_s == 0.0


def test_null_user_config_falls_back_to_the_decorator() -> None:
    settings = from_env({**PORTS, "STEADY_USER_CONFIG": "null"}, {"user_config": {"a": 1}})
    assert settings.user_config == {"a": 1}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STEADY_CONTROL_PORT": "8002"}, "PORT is not set"),
        ({**PORTS, "PORT": "http"}, "PORT must be a port number, got 'http'"),
        ({**PORTS, "STEADY_CONTROL_PORT": "70000"}, "STEADY_CONTROL_PORT must be a port number"),
        ({**PORTS, "STEADY_USER_CONFIG": "{language: x}"}, "STEADY_USER_CONFIG is not valid JSON"),
        ({**PORTS, "STEADY_MAX_ONGOING_REQUESTS": "0"}, "STEADY_MAX_ONGOING_REQUESTS must be"),
        ({**PORTS, "STEADY_HEALTH_CHECK_TIMEOUT_S": "0"}, "STEADY_HEALTH_CHECK_TIMEOUT_S must be"),
        ({**PORTS, "STEADY_HEALTH_CHECK_TIMEOUT_S": "inf"}, "STEADY_HEALTH_CHECK_TIMEOUT_S"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as info:
        from_env(env, {})
    assert str(info.value).startswith(message)


def test_drain_settings_and_secret_come_from_the_contract_names() -> None:
    options = {"graceful_shutdown_timeout_s": 7, "graceful_shutdown_wait_loop_s": 0.5}
    assert from_env(PORTS, options).graceful_shutdown_wait_loop_s == 0.5
    assert from_env(PORTS, {}).graceful_shutdown_wait_loop_s == 2.0
    env = {
        **PORTS,
        contract.GRACEFUL_SHUTDOWN_TIMEOUT_S: "3.5",
        contract.GRACEFUL_SHUTDOWN_WAIT_LOOP_S: "0.7",
        contract.CONTROL_SECRET: "s3cret",
    }
    settings = from_env(env, options)
    assert settings.graceful_shutdown_timeout_s == 3.5
    assert settings.graceful_shutdown_wait_loop_s == 0.7
    assert settings.control_secret == "s3cret"
    assert from_env(PORTS, {}).control_secret is None
    with pytest.raises(SettingsError, match=contract.GRACEFUL_SHUTDOWN_WAIT_LOOP_S):
        from_env({**PORTS, contract.GRACEFUL_SHUTDOWN_WAIT_LOOP_S: "0"}, {})
