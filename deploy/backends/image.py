"""The node image: a content-hash tag, an offline wheelhouse, a base that needs no registry.

Works the same from a checkout and from an installed wheel: the image gets protofed's
packages as they are on this machine and the requirements as installed."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from node.errors import DeployError

log = logging.getLogger(__name__)

# Where protofed's packages live: a checkout, or site-packages after `pip install`.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
BACKENDS_DIR = Path(__file__).resolve().parent  # the Dockerfile and base-image script
DISTRIBUTION = "protofed"
IMAGE_NAME = "protofed-node"
LOCAL_BASE_IMAGE = "protofed-base:bookworm"
TORCH_SPEC = "torch==2.13.0"  # the CPU build; never a CUDA one in the image
SOURCE_DIRS = ("node", "topology", "quant", "deploy")


def source_files(root: Path = PACKAGE_ROOT) -> list[Path]:
    """The Python files the nodes run: the packages copied into the image."""
    files: list[Path] = []
    for folder in SOURCE_DIRS:
        files += sorted(p for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts)
    return files


def content_hash(root: Path = PACKAGE_ROOT, base_image: str = "",
                 requirements: list[str] | None = None) -> str:
    """A short hash of the code, the requirements, the Dockerfile and the base image name."""
    requirements = project_requirements() if requirements is None else requirements
    digest = hashlib.sha256(f"{base_image}\n{chr(10).join(requirements)}\n".encode())
    digest.update((BACKENDS_DIR / "Dockerfile").read_bytes() + b"\0")
    for path in source_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def image_tag(root: Path = PACKAGE_ROOT, base_image: str = "") -> str:
    """`protofed-node:<content hash>`: built once, reused until the code changes."""
    return f"{IMAGE_NAME}:{content_hash(root, base_image)}"


# What the launcher and the Python API use and a node never imports: the tables and the
# pictures are made where `protofed` runs, so the node image leaves them out.
LAUNCHER_ONLY = ("matplotlib", "pandas")


def runtime_requirements(declared: list[str]) -> list[str]:
    """`declared` without the optional extras and the launcher's own packages, with torch
    pinned to the CPU build."""
    kept = [d for d in declared if "extra" not in d.partition(";")[2]
            and not re.match(rf"({'|'.join(LAUNCHER_ONLY)})\b", d.strip())]
    return [TORCH_SPEC] + [d for d in kept if not d.replace(" ", "").startswith("torch")]


def project_requirements() -> list[str]:
    """protofed's runtime requirements, as installed (a checkout's pyproject.toml if it is
    not installed), with torch pinned to the CPU build."""
    try:
        return runtime_requirements(metadata.requires(DISTRIBUTION) or [])
    except metadata.PackageNotFoundError:
        pass
    pyproject = PACKAGE_ROOT / "pyproject.toml"
    if not pyproject.is_file():
        raise DeployError(f"cannot tell the node image's requirements: {DISTRIBUTION} is not "
                          f"installed and {pyproject} does not exist (pip install protofed)")
    with open(pyproject, "rb") as handle:
        return runtime_requirements(tomllib.load(handle)["project"]["dependencies"])


def build_cache_dir() -> Path:
    """Where build contexts and the dependency wheelhouse are kept between builds."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "protofed" / "docker-build"


def prepare_context(build_dir: Path, root: Path = PACKAGE_ROOT) -> Path:
    """Fill `build_dir` with the Dockerfile, the dependency wheelhouse and protofed's
    packages, copied from wherever they are installed."""
    deps, app = build_dir / "deps", build_dir / "app"
    deps.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(app, ignore_errors=True)
    app.mkdir()
    shutil.copy(BACKENDS_DIR / "Dockerfile", build_dir / "Dockerfile")
    requirements = project_requirements()
    (deps / "requirements.txt").write_text("\n".join(requirements) + "\n")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run(pip + ["download", "--quiet", "--only-binary=:all:", "--dest", str(deps),
                *requirements], "download the dependency wheels")
    for path in source_files(root):
        target = app / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return build_dir


def _run(command: list[str], what: str) -> None:
    log.info("running %s", " ".join(command))
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).splitlines()[-10:])
        raise DeployError(f"could not {what} for the node image:\n{tail}")


def resolve_base_image(client, wanted: str) -> str:
    """The base to build on, looked up on this machine first: `wanted`, else the local
    debootstrap base if it was made; only then is `wanted` pulled, and if that fails the
    local base is made (said once, on the terminal)."""
    import docker.errors

    for local in dict.fromkeys((wanted, LOCAL_BASE_IMAGE)):
        try:
            client.images.get(local)
        except docker.errors.ImageNotFound:
            continue
        if local != wanted:
            log.info("%s is not on this machine: building on the local base %s", wanted, local)
        return local
    if wanted != LOCAL_BASE_IMAGE:
        try:
            log.info("pulling %s", wanted)
            client.images.pull(wanted)
            return wanted
        except docker.errors.APIError as exc:
            print(f"protofed: cannot pull {wanted} ({str(exc).splitlines()[0]})",
                  file=sys.stderr)
    script = BACKENDS_DIR / "make-base-image.sh"
    print(f"protofed: making the local base image {LOCAL_BASE_IMAGE} with debootstrap "
          "(about a minute, once)", file=sys.stderr)
    _run(["bash", str(script), LOCAL_BASE_IMAGE], f"make {LOCAL_BASE_IMAGE}")
    return LOCAL_BASE_IMAGE


def ensure_image(client, base_image: str, build_dir: Path | None = None) -> str:
    """The node image's tag, building it first if this code has no image yet."""
    import docker.errors

    base = resolve_base_image(client, base_image)
    tag = image_tag(PACKAGE_ROOT, base)
    try:
        client.images.get(tag)
        log.info("reusing node image %s", tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    print(f"protofed: building node image {tag} on {base} (a minute or two, once per code "
          "change)", file=sys.stderr)
    context = prepare_context(build_dir or build_cache_dir())
    try:
        client.images.build(path=str(context), tag=tag, buildargs={"BASE_IMAGE": base},
                            rm=True, forcerm=True, network_mode="none", pull=False)
    except docker.errors.BuildError as exc:
        lines = [str(item.get("stream") or item.get("error") or "").rstrip()
                 for item in exc.build_log]
        tail = "\n".join(line for line in lines if line)[-2000:]
        raise DeployError(f"building the node image {tag} failed: {exc.msg}\n{tail}") from None
    except docker.errors.APIError as exc:
        raise DeployError(f"building the node image {tag} failed: {exc}") from None
    return tag

