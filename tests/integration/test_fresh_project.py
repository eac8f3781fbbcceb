"""The app in a project of its own: `django-admin startproject`, README's lines, the app from its wheel.

The project's venv cannot see this checkout: its site-packages holds the app's wheel and a
.pth to this venv's site-packages (the third-party packages, to save installing them again),
and every command runs in the project's directory without PYTHONPATH. A real Redis, one
`runworker inference` and uvicorn on the project's asgi.py then serve a MiniLM vector, the
admin's login page and the project's own view.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import model_factory
from tests.stack import ROOT, RedisServer, free_port, http_json, stop_process

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]

MODEL = "minilm"
# What README "Add to an existing Django project" tells a project to write, and nothing else of ours.
SETTINGS_LINES = 'INSTALLED_APPS += ["models_registry"]\n'
URLS_LINES = 'from django.urls import include\n\nurlpatterns += [path("", include("models_registry.urls"))]\n'
ASGI_LINES = ("from models_registry.asgi import with_inference\n\n"
              "application = with_inference(get_asgi_application())\n")
# The project's own page, to see Django still serves what is not the app's.
OWN_VIEW = ('from django.http import HttpResponse\n\n\n'
            'def hello(request):\n    return HttpResponse("hello from mysite")\n\n\n'
            'urlpatterns += [path("hello/", hello)]\n')


def build_wheel(into: Path) -> Path:
    """The app's wheel, built from a copy of what pyproject.toml packages (the checkout stays untouched)."""
    source = into / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "models_registry", source / "models_registry",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(into / "dist"), str(source)], check=True, timeout=120)
    return next((into / "dist").glob("*.whl"))


def isolated_venv(path: Path, wheel: Path) -> Path:
    """A venv with the app installed from its wheel and this venv's third-party packages on a .pth; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=60)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "shared-third-party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=120, cwd=path)
    return python


def project_env(redis_url: str) -> dict[str, str]:
    """The environment of a project that sets none of the app's settings but REDIS_URL; no path to the checkout."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("HOSTING_", "DJANGO_", "PYTHON")) and name not in ("DATABASE_URL", "REDIS_URL")}
    # One exception, for time: the worker's TorchScript trace of MiniLM at load (about 25 s of a busy
    # 2-core machine) is the worker's business, tested elsewhere, not the project's.
    return {**env, "REDIS_URL": redis_url, "HOSTING_TORCHSCRIPT": "0", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def ready(url: str) -> bool:
    """Whether the web server answers and a worker has the model ready."""
    try:
        return http_json("GET", url + "/ready", timeout=2)[0] == 200
    except OSError:  # not listening yet
        return False


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL, API token) of a fresh project serving the app, every process stopped after."""
    workdir = tmp_path_factory.mktemp("fresh-project")
    python = isolated_venv(workdir / "venv", build_wheel(workdir))
    site = workdir / "mysite"
    site.mkdir()
    subprocess.run([str(python), "-m", "django", "startproject", "mysite", str(site)], check=True, timeout=60)
    package = site / "mysite"
    with (package / "settings.py").open("a") as settings:
        settings.write("\n" + SETTINGS_LINES)
    with (package / "urls.py").open("a") as urls:
        urls.write("\n" + URLS_LINES + "\n" + OWN_VIEW)
    asgi = (package / "asgi.py").read_text()
    assert "application = get_asgi_application()\n" in asgi  # startproject's last line, replaced by README's two
    (package / "asgi.py").write_text(asgi.replace("application = get_asgi_application()\n", ASGI_LINES))

    redis_server = RedisServer(workdir)
    env = project_env(redis_server.url)
    processes: list[subprocess.Popen[bytes]] = []

    def manage(*args: str) -> str:
        done = subprocess.run([str(python), "manage.py", *args], cwd=site, env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    try:
        where = subprocess.run([str(python), "-c", "import models_registry; print(models_registry.__file__)"],
                               cwd=site, env=env, capture_output=True, text=True, check=True).stdout
        assert where.startswith(str(workdir / "venv")), where  # the wheel's copy, not the checkout's
        assert subprocess.run([str(python), "-c", "import hosting"], cwd=site, env=env,
                              capture_output=True, check=False).returncode != 0  # and nothing of the checkout besides
        manage("migrate", "--noinput", "-v0")
        manage("register_model", MODEL, "--source", str(model_factory.minilm_path()), "--task", "feature-extraction",
               "--pooling", "mean", "--normalize", "--timeout", "60")
        token = manage("create_api_token", "fresh").strip().splitlines()[-1]
        worker_log = (workdir / "worker.log").open("wb")
        processes.append(subprocess.Popen([str(python), "manage.py", "runworker", "inference"], cwd=site, env=env,
                                          stdout=worker_log, stderr=subprocess.STDOUT))
        port = free_port()
        web_log = (workdir / "web.log").open("wb")
        processes.append(subprocess.Popen([str(python), "-m", "uvicorn", "mysite.asgi:application",
                                           "--host", "127.0.0.1", "--port", str(port), "--no-access-log"],
                                          cwd=site, env=env, stdout=web_log, stderr=subprocess.STDOUT))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while not ready(url):
            assert all(p.poll() is None for p in processes), f"the worker or the web server exited (logs in {workdir})"
            assert time.monotonic() < deadline, f"the project's worker never got ready (logs in {workdir})"
            time.sleep(0.25)
        yield url, token
    except BaseException:
        for log in sorted(workdir.glob("*.log")):
            print(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}")
        raise
    finally:
        for process in processes:
            stop_process(process)
        redis_server.stop()


def test_the_project_serves_a_vector_from_its_worker(project: tuple[str, str]) -> None:
    url, token = project
    status, headers, body = http_json("POST", f"{url}/models/{MODEL}", {"inputs": "Django hosts models now."},
                                      token=token, timeout=60)
    assert status == 200, body
    assert len(body) == 384 and abs(sum(x * x for x in body) - 1.0) < 1e-3  # mean-pooled, normalized
    assert headers.get("x-request-id")  # the front door answered, not Django's full stack


def test_the_api_still_asks_for_a_token(project: tuple[str, str]) -> None:
    url, _ = project
    status, _, body = http_json("POST", f"{url}/models/{MODEL}", {"inputs": "no token"})
    assert status == 401 and body["error_type"] == "unauthorized"


def test_django_serves_the_admin_and_the_projects_own_view(project: tuple[str, str]) -> None:
    url, _ = project
    status, _, page = http_json("GET", f"{url}/admin/login/")
    assert status == 200 and "Django administration" in page
    status, _, page = http_json("GET", f"{url}/hello/")
    assert (status, page) == (200, "hello from mysite")
