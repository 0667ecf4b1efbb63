"""Shared fixtures for the binding's tests.

ctest runs this suite with MOEQ_LIBRARY (the built libmoeq.so), PYTHONPATH
(python/), MOEQ_CLI (the moeq tool) and MOEQ_ABI_LAYOUT (the struct-layout
printer) set.  Run by hand from the repository, it falls back to build/.
"""

import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIGS = os.path.join(REPO, "tests", "data", "configs")
CONFORMANCE = os.path.join(REPO, "tests", "data", "conformance")
HEADER = os.path.join(REPO, "include", "moeq", "moeq.h")
GLM = os.path.join(CONFIGS, "glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json")
_BUILD = os.path.join(REPO, "build")

if "MOEQ_LIBRARY" not in os.environ and os.path.exists(os.path.join(_BUILD, "libmoeq.so")):
    os.environ["MOEQ_LIBRARY"] = os.path.join(_BUILD, "libmoeq.so")
try:
    import moeq  # noqa: F401
except ModuleNotFoundError:
    sys.path.insert(0, os.path.join(REPO, "python"))


def config_paths():
    return sorted(os.path.join(CONFIGS, f) for f in os.listdir(CONFIGS) if f.endswith(".json"))


@pytest.fixture(scope="session")
def cli():
    """The moeq command-line tool."""
    path = os.environ.get("MOEQ_CLI")
    if path:
        assert os.access(path, os.X_OK), f"MOEQ_CLI={path} is not an executable"
        return path
    lib_dir = os.path.dirname(os.environ.get("MOEQ_LIBRARY", ""))
    for candidate in (os.path.join(lib_dir, "moeq"), os.path.join(_BUILD, "moeq")):
        if os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("no moeq tool: set MOEQ_CLI (ctest does)")


@pytest.fixture(scope="session")
def abi_layout(tmp_path_factory):
    """The C compiler's view of moeq.h's structs (JSON text)."""
    path = os.environ.get("MOEQ_ABI_LAYOUT")
    if not path:
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if not cc:
            pytest.skip("no MOEQ_ABI_LAYOUT (ctest sets it) and no C compiler to build it")
        path = str(tmp_path_factory.mktemp("abi") / "abi_layout")
        subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), "-o", path,
                        os.path.join(os.path.dirname(__file__), "abi_layout.c")], check=True)
    return subprocess.run([path], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def glm():
    import moeq
    with moeq.Config.load(GLM) as cfg:
        yield cfg
