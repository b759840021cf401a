"""The compiled trajectory gather (integer lane arrays) equals the NumPy gather (other lane selections)."""
import numpy as np
import pytest

from parasim.sim import Simulator


@pytest.fixture(scope="module")
def sim() -> Simulator:
    s = Simulator("paramanager", "paramanager", 40)
    s.seed(list(range(40)))
    s.reset()
    rng = np.random.default_rng(0)
    for _ in range(4):
        acts = rng.integers(0, s.nvec, size=(40, len(s.nvec)))
        acts[:, 0] = rng.random(40) < 0.2
        s.step(acts, np.zeros(40, np.uint8))
    return s


@pytest.mark.parametrize("lanes", [np.arange(40), np.array([0]), np.array([5, 3, 39, 3, -1]),
                                   np.array([], np.int64), np.array([7, 2], np.uint32)])
def test_gather_matches_numpy_path(sim: Simulator, lanes: np.ndarray) -> None:
    fast, slow = sim.trajectory(lanes), sim.trajectory(lanes.tolist())
    assert list(fast) == list(slow)
    for k, v in slow.items():
        assert fast[k].dtype == v.dtype and fast[k].shape == v.shape, k
        np.testing.assert_array_equal(fast[k], v, err_msg=k)
        assert fast[k].flags.owndata and fast[k].flags.c_contiguous, k


def test_fixture_episodes_made_calls(sim: Simulator) -> None:
    assert sim.trajectory()["tool_calls"].sum() > 0  # the comparison above is over non-trivial values


def test_gather_rejects_out_of_range_lane(sim: Simulator) -> None:
    with pytest.raises(IndexError):
        sim.trajectory(np.array([40]))
