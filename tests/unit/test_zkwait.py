"""How long a ZooKeeper client waits for the answer to its handshake (zkwait.py); the
behaviour itself is proved against a real server in tests/test_state_zk.py."""
import pytest

pytest.importorskip("kazoo")
from bittern.state.zkwait import handshake_timeout  # noqa: E402


@pytest.mark.parametrize("session, wait", [(60, 20), (30, 10), (9, 3), (4, 2), (2, 2), (1, 1)])
def test_a_third_of_the_session_at_least_2s_at_most_the_session(session, wait):
    assert handshake_timeout(session) == pytest.approx(wait)
