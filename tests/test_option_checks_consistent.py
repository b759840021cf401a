"""The env option checks agree (issue 24, finding 14; issue 23: pool errors are ValueErrors).

Integer options refuse bools as ``serial=1`` is refused; a non-dict ``options`` is a ``TypeError`` naming it; a pool
that is no name at all (None, 3) is a ``PoolError`` (a ``ValueError``) naming ``pool``; a price or preference entry
too large for a float names its field instead of raising ``OverflowError``.
"""
from __future__ import annotations

import gymnasium as gym
import pytest

import parasim  # noqa: F401 -- registers the envs
from parasim.pools.pool import PoolError


def _vec(**kw):
    return gym.make_vec("ParaOrch-v0", vectorization_mode="vector_entry_point", **kw)


@pytest.mark.parametrize(("kw", "needle"), [
    ({"num_envs": True}, "num_envs: expected an integer in [1, "),
    ({"num_envs": 2, "num_threads": True}, "num_threads: expected an integer in [1, "),
    ({"num_envs": 2, "serial": 1}, "serial: expected True or False, got int 1"),
])
def test_bool_and_int_options_are_checked_alike(kw, needle):
    with pytest.raises(TypeError) as err:
        _vec(**kw)
    assert needle in str(err.value)


@pytest.mark.parametrize("pool", [None, 3])
def test_a_pool_that_is_no_name_is_a_value_error_naming_pool(pool):
    with pytest.raises(ValueError) as err:
        gym.make("ParaOrch-v0", pool=pool)
    assert isinstance(err.value, PoolError)
    assert str(err.value).startswith("pool: expected one of ") and f"got {pool!r}" in str(err.value)


def test_text_env_options_must_be_a_dict():
    env = gym.make("ParaOrchText-v0")
    with pytest.raises(TypeError, match=r"^options: expected a dict or None, got list"):
        env.reset(options=[1, 2])


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("tool_prices", [10**400] + [None] * 6, "options['tool_prices'][0]: expected a finite number in [0.0, 1000000.0]"),
    ("preference", [1] * 9 + [10**400], "options['preference'][9]: expected a finite number in [-inf, inf]"),
])
def test_huge_task_option_entries_name_their_field(key, value, needle):
    env = gym.make("ParaOrch-v0")
    with pytest.raises(ValueError) as err:
        env.reset(options={key: value})
    assert needle in str(err.value) and "an integer of about 401 digits" in str(err.value)
