"""The nimbus API token: creation, private file, constant-time check, client lookup."""
from __future__ import annotations

import hmac
import os
import stat
import threading

import pytest

from bittern import auth
from bittern.auth import AuthError, bearer, check, client_token, load_or_create_token
from bittern.errors import ConfigError


def test_created_once_private_and_stable(tmp_path):
    data = tmp_path / "nimbus"
    token = load_or_create_token(str(data))
    assert len(token) >= 43  # 32 random bytes, url-safe base64
    path = data / "token"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o700
    assert path.read_text() == token + "\n"
    assert load_or_create_token(str(data)) == token  # a restart keeps it
    assert os.listdir(data) == ["token"]  # no temporary file left
    assert load_or_create_token(str(tmp_path / "other")) != token


def test_concurrent_first_starts_agree(tmp_path):
    data, out = str(tmp_path / "d"), []
    threads = [threading.Thread(target=lambda: out.append(load_or_create_token(data))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 8 and len(set(out)) == 1
    assert os.listdir(data) == ["token"]


def test_refuses_a_token_file_others_can_read(tmp_path):
    load_or_create_token(str(tmp_path))
    os.chmod(tmp_path / "token", 0o644)
    with pytest.raises(AuthError, match=r"is accessible by others \(mode 0644\); run: chmod 600"):
        load_or_create_token(str(tmp_path))


def test_refuses_an_empty_token_file(tmp_path):
    fd = os.open(tmp_path / "token", os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    with pytest.raises(AuthError, match="is empty"):
        load_or_create_token(str(tmp_path))


def test_check_accepts_only_the_bearer_token():
    tok = "s3cr3t-TOKEN_x"
    assert check(f"Bearer {tok}", tok)
    assert check(f"bearer {tok}", tok)
    assert check(f"  Bearer   {tok}  ", tok)
    assert check(bearer(tok), tok)
    assert check(f"Bearer {tok}".encode(), tok)
    for bad in (None, "", tok, f"Basic {tok}", f"Bearer {tok}x", f"Bearer {tok[:-1]}", "Bearer ",
                f"Token {tok}", f"Bearer {tok.upper()}", "Bearer ünïcode"):
        assert not check(bad, tok), bad


def test_an_empty_server_token_admits_nobody():
    assert not check("Bearer ", "")
    assert not check("Bearer x", None)


def test_check_compares_in_constant_time(monkeypatch):
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    assert check("Bearer abc", "abc")
    assert not check("Basic abc", "abc")  # compared even when the scheme is wrong
    assert not check(None, "abc")
    assert calls == [(b"abc", b"abc"), (b"abc", b"abc"), (b"", b"abc")]


# -- client side ----------------------------------------------------------------------


def test_client_token_from_the_environment_first(tmp_path):
    (tmp_path / "cluster.toml").write_text('token_file = "t"\n')
    (tmp_path / "t").write_text("from-file\n")
    env = {"BITTERN_TOKEN": " from-env \n", "BITTERN_HOME": str(tmp_path)}
    assert client_token(env=env) == "from-env"


def test_client_token_from_the_config_file_relative_to_it(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "cluster.toml").write_text('nimbus = "http://n:7080"\ntoken_file = "keys/nimbus.token"\n')
    (home / "keys").mkdir()
    (home / "keys" / "nimbus.token").write_text("tok-123\n")
    assert client_token(env={"BITTERN_HOME": str(home)}) == "tok-123"
    assert client_token(env={"BITTERN_HOME": str(home), "BITTERN_TOKEN": ""}) == "tok-123"
    other = tmp_path / "elsewhere.toml"
    other.write_text(f'token_file = "{home}/keys/nimbus.token"\n')
    assert client_token(env={"BITTERN_CLUSTER_CONFIG": str(other)}) == "tok-123"


def test_client_token_reads_the_nimbus_token_file_directly(tmp_path):
    tok = load_or_create_token(str(tmp_path / "nimbus"))
    assert client_token({"token_file": str(tmp_path / "nimbus" / "token")}, env={}) == tok


def test_client_token_default_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert auth.cluster_config_path({}) == str(tmp_path / ".bittern" / "cluster.toml")


@pytest.mark.parametrize("files,env_extra,msg", [
    ({}, {}, "no nimbus API token: set BITTERN_TOKEN, or token_file in .*cluster.toml"),
    ({"cluster.toml": 'nimbus = "x"\n'}, {}, "no nimbus API token"),
    ({"cluster.toml": 'token_file = "missing"\n'}, {}, "cannot read the nimbus token file '.*missing'"),
    ({"cluster.toml": 'token_file = "t"\n', "t": "\n"}, {}, "token file '.*t' is empty"),
    ({"cluster.toml": "token_file = \n"}, {}, "cluster config '.*cluster.toml'"),
])
def test_client_token_errors(tmp_path, files, env_extra, msg):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=msg):
        client_token(env={"BITTERN_HOME": str(tmp_path), **env_extra})
