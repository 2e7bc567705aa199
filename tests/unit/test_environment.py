"""tunekit.environment: the stack's versions and the one URI redactor (stdlib only, milliseconds).

The storage probe (``storage_shared_by_nodes``) needs a Ray cluster: tests/e2e/test_doctor.py
runs it on a real one through ``tunekit doctor --address``.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tunekit.environment import PACKAGES, STACK, installed, installed_versions, redact_uri, sqlite_database


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("https://alice:s3cret@mlflow.example.com:5000/x", "https://mlflow.example.com:5000/x"),
        ("http://alice:s3cret-pw@127.0.0.1:5000/", "http://127.0.0.1:5000/"),
        ("https://ghp_abcdef0123456789@mlflow.example.com/", "https://mlflow.example.com/"),
        ("postgresql+psycopg2://mlflow:pw@db.internal:5432/mlflow", "postgresql+psycopg2://db.internal:5432/mlflow"),
        ("http://u:p@[::1]:5000/api", "http://[::1]:5000/api"),
        (
            "s3://bucket/results?region=eu-west-1&X-Amz-Credential=AKIA%2F1&X-Amz-Signature=abc",
            "s3://bucket/results?region=eu-west-1&X-Amz-Credential=***&X-Amz-Signature=***",
        ),
        (
            "https://acct.blob.core.windows.net/c/x?sv=2022-11-02&sp=rw&sig=a%2Bb%3D",
            "https://acct.blob.core.windows.net/c/x?sv=2022-11-02&sp=rw&sig=***",
        ),
        (
            "https://mlflow.example.com/?token=t0k&access_token=t1&api_key=k&apiKey=k2&password=p&run=7",
            "https://mlflow.example.com/?token=***&access_token=***&api_key=***&apiKey=***&password=***&run=7",
        ),
        ("https://mlflow.example.com/x?token=t0k#runs", "https://mlflow.example.com/x?token=***#runs"),
        ("https://mlflow.example.com/x?token=&flag", "https://mlflow.example.com/x?token=&flag"),
        ("sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db"),
        ("sqlite:///mlflow.db", "sqlite:///mlflow.db"),
        ("file:///tmp/mlruns", "file:///tmp/mlruns"),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("/data/results", "/data/results"),
        ("relative/mlruns", "relative/mlruns"),
    ],
    ids=[
        "user-password",
        "user-password-ip",
        "token-as-user",
        "database",
        "ipv6",
        "aws-presigned",
        "azure-sas",
        "token-params",
        "fragment-kept",
        "empty-values-kept",
        "sqlite-absolute",
        "sqlite-relative",
        "file",
        "plain-server",
        "path",
        "relative-path",
    ],
)
def test_redact_uri_hides_user_password_and_token_like_params(uri: str, shown: str) -> None:
    assert redact_uri(uri) == shown
    assert redact_uri(shown) == shown  # redacting twice changes nothing


def test_a_sqlite_uri_names_its_database_file_absolute_and_others_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert sqlite_database("sqlite:///mlflow.db") == tmp_path / "mlflow.db"  # from the working directory
    assert sqlite_database("sqlite:////data/runs/mlflow.db?timeout=20") == Path("/data/runs/mlflow.db")
    assert sqlite_database("sqlite:///sub/my%20runs.db") == tmp_path / "sub" / "my runs.db"
    for other in ("sqlite://", "sqlite:///:memory:", "postgresql://db/mlflow", "http://127.0.0.1:5000", "mlruns"):
        assert sqlite_database(other) is None, other


def test_installed_versions_read_package_metadata() -> None:
    versions = installed_versions()
    assert versions["python"] == platform.python_version()
    assert versions["keras"] == metadata.version("keras")
    assert versions["tunekit"] == metadata.version("tunekit")
    assert set(versions) <= {"python", *PACKAGES}
    assert set(STACK) <= set(PACKAGES)


def test_packages_not_installed_are_left_out() -> None:
    assert installed("no-such-distribution-tunekit") is None
    assert installed_versions(["no-such-distribution-tunekit", "numpy"]) == {
        "python": platform.python_version(),
        "numpy": metadata.version("numpy"),
    }


def test_first_installed_distribution_of_a_name_wins() -> None:
    found = installed("mlflow")
    assert found is not None and found[0] in PACKAGES["mlflow"]


def test_importing_it_imports_nothing_heavy() -> None:
    code = (
        "import sys, tunekit.environment as e; e.installed_versions(); "
        "print(sorted(m for m in ('tensorflow', 'keras', 'ray', 'mlflow', 'optuna') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
