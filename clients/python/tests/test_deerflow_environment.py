"""The package inside DeerFlow's environment (issue 25 items 2 and 6).

DeerFlow itself cannot be installed here (no PyPI), so each test writes a stand-in ``deerflow``
package with the modules the provider and DeerFlow's loader touch, from DeerFlow's published
code: ``deerflow.sandbox.sandbox_provider.SandboxProvider``,
``deerflow.community.aio_sandbox.aio_sandbox.AioSandbox`` (which imports DeerFlow's
``agent_sandbox`` dependency) and ``deerflow.reflection.resolve_class`` (import the module, take
the attribute, check the base class). Every check runs in a fresh interpreter so the import-time
choices of ``sandboxd.deerflow`` are made anew.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1]
DEBIAN_WHEELS = Path("/usr/share/python-wheels")


def write_deerflow(root: Path, *, with_agent_sandbox: bool) -> None:
    files = {
        "deerflow/__init__.py": "",
        "deerflow/sandbox/__init__.py": "",
        "deerflow/sandbox/sandbox_provider.py": """
            class SandboxProvider:
                def acquire(self, thread_id=None, *, user_id=None): raise NotImplementedError
                def get(self, sandbox_id): raise NotImplementedError
                def release(self, sandbox_id): raise NotImplementedError
        """,
        "deerflow/community/__init__.py": "",
        "deerflow/community/aio_sandbox/__init__.py": "",
        "deerflow/community/aio_sandbox/aio_sandbox.py": """
            from agent_sandbox import Sandbox as _Client  # DeerFlow's agent-sandbox dependency

            class AioSandbox:
                def __init__(self, id, base_url):
                    self.id, self.base_url, self._client = id, base_url, _Client(base_url)
                def execute_command(self, command):
                    return self._client.run(command)
        """,
        "deerflow/reflection/__init__.py": "from .resolvers import resolve_class\n",
        "deerflow/reflection/resolvers.py": """
            import importlib

            def resolve_class(class_path, base_class=None):
                module_path, _, class_name = class_path.rpartition(":")
                module = importlib.import_module(module_path)
                cls = getattr(module, class_name)
                if base_class is not None and not issubclass(cls, base_class):
                    raise ValueError(f"{class_path} is not a subclass of {base_class.__name__}")
                return cls
        """,
    }
    if with_agent_sandbox:
        files["agent_sandbox/__init__.py"] = """
            class Sandbox:
                def __init__(self, base_url): self.base_url = base_url
                def run(self, command): return f"ran {command} at {self.base_url}"
        """
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def run(python: str, code: str, deerflow_root: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(deerflow_root))
    return subprocess.run(
        [python, "-c", textwrap.dedent(code)], env=env, cwd=cwd, capture_output=True, text=True,
        timeout=120,
    )


# What DeerFlow's get_sandbox_provider() does with `use: sandboxd.deerflow:SandboxdProvider`,
# then one acquire and get through a scripted client (no daemon needed for the shape).
LOAD_AND_USE = """
    import inspect, types
    from deerflow.reflection import resolve_class
    from deerflow.sandbox.sandbox_provider import SandboxProvider
    cls = resolve_class("sandboxd.deerflow:SandboxdProvider", SandboxProvider)
    print("loaded-from", inspect.getfile(cls))

    class ScriptedClient:
        def acquire(self, thread_id, *, user_id=None):
            return types.SimpleNamespace(sandbox_id="abc123", sandbox_url="http://127.0.0.1:1")
    provider = cls(client=ScriptedClient())
    sandbox = provider.get(provider.acquire("t-1", user_id="alice"))
    print("got", type(sandbox).__module__ + "." + type(sandbox).__name__)
    print(sandbox.execute_command("ls"))
"""


def test_without_agent_sandbox_the_provider_refuses_at_construction(tmp_path):
    write_deerflow(tmp_path, with_agent_sandbox=False)
    done = run(
        sys.executable,
        f"""
        import sys; sys.path.insert(0, {str(PACKAGE_DIR)!r})
        from sandboxd.deerflow import SandboxdProvider, DeerFlowSandboxUnavailable
        try:
            SandboxdProvider(socket_path="/nonexistent.sock")
        except DeerFlowSandboxUnavailable as error:
            print("refused:", error)
        else:
            print("constructed")
        """,
        tmp_path,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout, done.stdout
    assert "missing module 'agent_sandbox'" in done.stdout
    assert "agent-sandbox" in done.stdout


def test_with_agent_sandbox_get_returns_deerflows_own_sandbox(tmp_path):
    write_deerflow(tmp_path, with_agent_sandbox=True)
    done = run(
        sys.executable,
        f"import sys; sys.path.insert(0, {str(PACKAGE_DIR)!r})\n" + textwrap.dedent(LOAD_AND_USE),
        tmp_path,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "got deerflow.community.aio_sandbox.aio_sandbox.AioSandbox" in done.stdout
    assert "ran ls at http://127.0.0.1:1" in done.stdout


# A DeerFlow whose AioSandbox takes no request_headers (before its network
# modes) cannot use a relayed mode. Before, the provider found out after the daemon had acquired
# the sandbox, which stayed active, unreleased, until its idle timeout.
REFUSE_RELAYED = """
    import types
    from sandboxd.deerflow import SandboxdProvider, DeerFlowSandboxUnavailable

    class ScriptedClient:
        def __init__(self, mode, headers):
            self.mode, self.headers, self.calls = mode, headers, []
        def health(self):
            self.calls.append("health")
            return {"status": "ok", "network_mode": self.mode}
        def acquire(self, thread_id, *, user_id=None):
            self.calls.append("acquire")
            return types.SimpleNamespace(sandbox_id="abc123", sandbox_url="http://127.0.0.1:1",
                                         request_headers=self.headers)
        def release(self, sandbox_id):
            self.calls.append("release " + sandbox_id)

    for mode, headers in (("isolated", {"X-Sandboxd-Relay-Token": "t"}),
                          ("allowlist", {"X-Sandboxd-Relay-Token": "t"}),
                          ("open", {"X-Sandboxd-Relay-Token": "t"}), ("open", {})):
        client = ScriptedClient(mode, headers)
        provider = SandboxdProvider(client=client)
        try:
            provider.acquire("t-1", user_id="alice")
            print(mode, bool(headers), "acquired", client.calls)
        except DeerFlowSandboxUnavailable as error:
            print(mode, bool(headers), "refused", client.calls, "|", error)
"""


def test_a_deerflow_without_request_headers_is_refused_before_anything_is_acquired(tmp_path):
    write_deerflow(tmp_path, with_agent_sandbox=True)  # its AioSandbox(id, base_url): no headers
    done = run(
        sys.executable,
        f"import sys; sys.path.insert(0, {str(PACKAGE_DIR)!r})\n" + textwrap.dedent(REFUSE_RELAYED),
        tmp_path,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("isolated True refused ['health'] |"), lines[0]
    assert "network mode isolated" in lines[0] and "nothing was acquired" in lines[0]
    assert lines[1].startswith("allowlist True refused ['health'] |"), lines[1]
    assert "network mode allowlist" in lines[1] and "egress proxy" in lines[1]
    # Open without a published port is found out only from the answer: released at once.
    assert lines[2].startswith("open True refused ['health', 'acquire', 'release abc123'] |"), \
        lines[2]
    assert lines[3] == "open False acquired ['health', 'acquire']", lines[3]


def test_pip_install_into_a_fresh_venv_is_what_deerflows_loader_loads(tmp_path):
    """Debian's python3-venv, offline: pip and setuptools come with the venv, wheel from
    Debian's python3-wheel-whl; the package is built from this source tree."""
    wheels = sorted(DEBIAN_WHEELS.glob("wheel-*.whl"))
    assert wheels, "python3-wheel-whl is missing (scripts/setup.sh installs it)"
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--no-index", str(wheels[-1])], check=True, timeout=120)
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the repository
    shutil.copytree(PACKAGE_DIR, source, ignore=shutil.ignore_patterns("tests", "*.egg-info",
                                                                       "build", "__pycache__"))
    subprocess.run([*pip, "install", "--no-index", "--no-build-isolation", str(source)],
                   check=True, timeout=300)

    deerflow_root = tmp_path / "deerflow-env"
    write_deerflow(deerflow_root, with_agent_sandbox=True)
    done = run(str(venv / "bin" / "python"), LOAD_AND_USE, deerflow_root, tmp_path)
    assert done.returncode == 0, done.stderr
    loaded_from = done.stdout.split("loaded-from ", 1)[1].split("\n", 1)[0]
    assert loaded_from.startswith(str(venv)) and "site-packages" in loaded_from, loaded_from
    assert "got deerflow.community.aio_sandbox.aio_sandbox.AioSandbox" in done.stdout
