"""The Makefile's interpreter finder and the production settings' deploy check."""

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIND = ROOT / "scripts" / "find-python"


def _tools_only(tmp_path):
    """A bin directory with the few tools the script uses, and no Python at all."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ls", "sort", "cat"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return bin_dir


def _find(tmp_path, extra_env):
    env = {
        "PATH": str(tmp_path / "bin"),
        "HOME": str(tmp_path),
        "PYENV_ROOT": str(tmp_path / "pyenv"),
    }
    env.update(extra_env)
    return subprocess.run(["/bin/sh", str(FIND)], env=env, capture_output=True, text=True)


def test_find_python_explains_what_is_missing(tmp_path):
    _tools_only(tmp_path)
    result = _find(tmp_path, {})
    assert result.returncode == 1
    assert "Steward needs Python 3.12 or newer" in result.stderr
    assert "make PYTHON=/path/to/python3.12 demo" in result.stderr


def test_find_python_finds_a_pyenv_version_and_skips_shims(tmp_path):
    bin_dir = _tools_only(tmp_path)
    shims = tmp_path / "pyenv" / "shims"
    shims.mkdir(parents=True)
    (shims / "python3.12").write_text("#!/bin/sh\nexit 1\n")
    (shims / "python3.12").chmod(0o755)
    version = tmp_path / "pyenv" / "versions" / "3.12.9" / "bin"
    version.mkdir(parents=True)
    (version / "python3").symlink_to(sys.executable)
    result = _find(tmp_path, {"PATH": f"{shims}:{bin_dir}"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(version / "python3")


def test_find_python_rejects_an_old_explicit_interpreter(tmp_path):
    _tools_only(tmp_path)
    old = tmp_path / "bin" / "python-old"
    old.write_text("#!/bin/sh\nexit 1\n")
    old.chmod(0o755)
    result = _find(tmp_path, {"PYTHON": str(old)})
    assert result.returncode == 1
    assert "is not a working Python >= 3.12" in result.stderr


@pytest.mark.slow
def test_production_settings_pass_check_deploy_without_warnings():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "steward.example.com",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_settings_refuse_to_start_without_a_secret_key():
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "SECRET_KEY_FILE"}}
    env.update(DJANGO_SETTINGS_MODULE="config.settings.production", ALLOWED_HOSTS="x.example")
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "SECRET_KEY is not set. Set SECRET_KEY (or SECRET_KEY_FILE)" in result.stderr


def test_production_settings_refuse_to_start_without_the_operator_on_statements():
    env = {k: v for k, v in os.environ.items() if k != "STEWARD_OPERATOR_LEGAL_NAME"}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        ALLOWED_HOSTS="x.example",
        SECRET_KEY=secrets.token_urlsafe(50),
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "STEWARD_OPERATOR_LEGAL_NAME" in result.stderr
