"""The trainer image's Dockerfile (no Docker engine here: parse and check what a build relies on)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

from platform_spec.processing import ENTRY_POINT
from platform_spec.trainer_image import BASE_IMAGE, NGC_RELEASE, docker_build_args

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "training" / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_base_image_is_a_build_argument_whose_one_home_is_platform_spec() -> None:
    """``FROM ${BASE_IMAGE}`` from an ``ARG`` with no default (a default would be a second copy of the release);
    the value, ``platform_spec.trainer_image.BASE_IMAGE``, is an NGC PyTorch tag pinned by digest, and
    ``python -m platform_spec.trainer_image`` prints it for a hand-run ``docker build --build-arg``."""
    instructions = _instructions()
    froms = [rest for word, rest in instructions if word == "FROM"]
    assert froms == ["${BASE_IMAGE}"]
    first_from = next(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    args_before = [rest for word, rest in instructions[:first_from] if word == "ARG"]
    assert args_before == ["BASE_IMAGE"]
    assert docker_build_args() == {"BASE_IMAGE": BASE_IMAGE}
    match = re.fullmatch(r"nvcr\.io/nvidia/pytorch:(\d{2})\.(\d{2})-py3@sha256:[0-9a-f]{64}", BASE_IMAGE)
    assert match, BASE_IMAGE
    assert f"{match.group(1)}.{match.group(2)}" == NGC_RELEASE
    assert NGC_RELEASE in _base_image_comment()
    printed = subprocess.run(
        [sys.executable, "-m", "platform_spec.trainer_image"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert printed.returncode == 0 and printed.stdout == BASE_IMAGE + "\n", printed.stderr


def _base_image_comment() -> str:
    """The Dockerfile's comment on its base image (the evidence for the release is recorded beside FROM)."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    return text[text.index("# Base image:") : text.index("ARG BASE_IMAGE")]


def test_entrypoint_is_exec_form_and_runs_the_entry_point() -> None:
    entry = [rest for word, rest in _instructions() if word == "ENTRYPOINT"]
    assert len(entry) == 1
    argv = json.loads(entry[0])  # exec form is a JSON array
    # chained through NVIDIA's start-up script (tests/training/test_gpu_readiness.py says why)
    assert argv == ["/opt/nvidia/nvidia_entrypoint.sh", "python", "-m", "training.entrypoint"]
    cmd = [json.loads(rest) for word, rest in _instructions() if word == "CMD"]
    assert cmd == [["train"]]
    assert (REPO / "training" / "entrypoint.py").is_file()


IMAGE_FOLDERS = ("training", "platform_spec", "model_families")
"""The build context's folders (the CDK asset's ``TrainerImageProps.context_paths``)."""


def _copied_folders() -> set[str]:
    copies = [rest.split() for word, rest in _instructions() if word == "COPY"]
    return {src for parts in copies for src in parts[:-1] if not src.startswith("--")}


def test_copy_sources_exist_relative_to_the_repo_root_context() -> None:
    sources = _copied_folders()
    assert {"training/", "platform_spec/", "model_families/", "training/requirements.txt"} <= sources
    for src in sources:
        assert (REPO / src).exists(), src
        assert src.split("/")[0] in IMAGE_FOLDERS, f"the build context only holds {', '.join(IMAGE_FOLDERS)}"


def _image_environment() -> dict[str, str]:
    """Every ``ENV KEY=VALUE`` of the Dockerfile (the image's environment as a job sees it)."""
    env: dict[str, str] = {}
    for word, rest in _instructions():
        if word == "ENV":
            for item in rest.split():
                key, _, value = item.partition("=")
                env[key] = value
    return env


def test_efa_installer_is_pinned_and_the_runtime_defaults_are_set() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"ARG EFA_INSTALLER_VERSION=\d+\.\d+\.\d+", text)
    assert "--skip-kmod" in text and "libnccl-net" in text
    env = _image_environment()
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "110"
    assert env["LD_LIBRARY_PATH"].startswith("/opt/amazon/ofi-nccl/lib:")
    requirements = (REPO / "training" / "requirements.txt").read_text(encoding="utf-8")
    pins = [line.split("#")[0].strip() for line in requirements.splitlines() if line.split("#")[0].strip()]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[\w.]+", p) for p in pins)


def test_the_image_leaves_socket_interfaces_to_the_entry_point() -> None:
    """Regression: the image set NCCL_SOCKET_IFNAME=^lo,docker (NCCL's own default), which looked like
    the job's choice and left bootstrap to pick any interface; gloo had nothing at all."""
    env = _image_environment()
    assert not {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"} & set(env)


def test_efa_variables_follow_aws_guidance_for_the_installed_plugin() -> None:
    """aws-ofi-nccl's EFA cheatsheet (cited in the Dockerfile): with libfabric >= 1.18 and aws-ofi-nccl >= 1.7
    (the EFA installer has bundled the plugin since 1.38) none of these is needed, and RDMAV_* must not be set."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "https://github.com/aws/aws-ofi-nccl/blob/master/doc/efa-env-var.md" in text
    version = re.search(r"ARG EFA_INSTALLER_VERSION=(\d+)\.(\d+)\.(\d+)", text)
    assert version and (int(version.group(1)), int(version.group(2))) >= (1, 38)
    env = _image_environment()
    unneeded = {
        "FI_PROVIDER",
        "FI_EFA_USE_DEVICE_RDMA",
        "FI_EFA_FORK_SAFE",
        "NCCL_PROTO",
        "NCCL_MIN_NCHANNELS",
        "NCCL_BUFFSIZE",
    }
    assert not unneeded & set(env)
    assert not [key for key in env if key.startswith("RDMAV_")]


def _build_time_imports() -> list[str]:
    """The modules the build's ``python -c "import ..."`` check imports."""
    runs = [rest for word, rest in _instructions() if word == "RUN" and 'python -c "import ' in rest]
    assert len(runs) == 1, runs
    return [m.strip() for m in runs[0].split('python -c "import ', 1)[1].split('"', 1)[0].split(",")]


def test_the_build_imports_every_entry_point() -> None:
    """A module that does not import fails the image build, not a job: the training entry point (the
    ENTRYPOINT's module) and the processing jobs' (``platform_spec.processing.ENTRY_POINT``)."""
    entry = json.loads(next(rest for word, rest in _instructions() if word == "ENTRYPOINT"))
    assert ENTRY_POINT[:2] == ("python", "-m")
    modules = _build_time_imports()
    assert {entry[entry.index("-m") + 1], ENTRY_POINT[2], "training.train"} <= set(modules)
    assert all(importlib.util.find_spec(m) is not None for m in modules), modules


def test_the_image_copies_exactly_the_packages_the_trainer_imports() -> None:
    """The trainer's own packages (what the build-time check imports, transitively: the training and
    processing entry points) are the Dockerfile's COPY'd folders: nothing missing (the job would fail to
    import) and nothing more (the planner, which the trainer never imports, stays out of the image)."""
    imports = ", ".join(_build_time_imports())
    code = f"import sys, {imports}\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    ours = {name for name in result.stdout.split() if (REPO / name / "__init__.py").is_file()}
    copied = {src.rstrip("/") for src in _copied_folders() if src.endswith("/")}
    assert ours == copied == set(IMAGE_FOLDERS)
    assert "planner" not in ours
