"""Loading the library, versions, and the ctypes mirrors of moeq.h."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import moeq
from moeq import _lib

from conftest import HEADER, REPO


def header_text():
    with open(HEADER) as f:
        return f.read()


def header_define(name):
    return int(re.search(rf"#define {name} (\d+)", header_text()).group(1))


def test_version_matches_header_and_package():
    major, minor, patch = (header_define(f"MOEQ_VERSION_{p}") for p in ("MAJOR", "MINOR", "PATCH"))
    assert moeq.version() == f"{major}.{minor}.{patch}"
    assert moeq.version_number() == major * 10000 + minor * 100 + patch
    assert moeq.__version__.split(".")[:2] == [str(major), str(minor)]


def run_import(env_changes, package_dir=None):
    """Imports moeq in a fresh interpreter; returns (returncode, output)."""
    env = dict(os.environ)
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env["PYTHONPATH"] = package_dir or os.path.join(REPO, "python")
    proc = subprocess.run([sys.executable, "-c", "import moeq; print(moeq.library_path)"],
                          env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def test_moeq_library_env_is_used_and_never_falls_back(tmp_path):
    rc, out = run_import({"MOEQ_LIBRARY": moeq.library_path})
    assert rc == 0 and out.strip() == moeq.library_path
    missing = str(tmp_path / "nope" / "libmoeq.so")
    rc, out = run_import({"MOEQ_LIBRARY": missing})
    assert rc != 0
    assert f"MOEQ_LIBRARY={missing!r} cannot be loaded" in out


def copy_package(tmp_path, with_library):
    dest = tmp_path / "site"
    shutil.copytree(os.path.join(REPO, "python", "moeq"), dest / "moeq",
                    ignore=shutil.ignore_patterns("__pycache__", "libmoeq*"))
    if with_library:
        shutil.copy(moeq.library_path, dest / "moeq" / "libmoeq.so")
    return dest


def test_copy_inside_the_package_is_found(tmp_path):
    site = copy_package(tmp_path, with_library=True)
    rc, out = run_import({"MOEQ_LIBRARY": None}, str(site))
    assert rc == 0, out
    assert out.strip() == str(site / "moeq" / "libmoeq.so")


def test_version_mismatch_fails_clearly(tmp_path):
    site = copy_package(tmp_path, with_library=True)
    (site / "moeq" / "_version.py").write_text('__version__ = "7.3.0"\n')
    rc, out = run_import({"MOEQ_LIBRARY": None}, str(site))
    assert rc != 0
    assert "ImportError" in out
    assert f"is libmoeq {moeq.version()}" in out and "this package needs 7.3.x" in out


def test_not_found_says_what_to_do(tmp_path):
    site = copy_package(tmp_path, with_library=False)
    # No MOEQ_LIBRARY, no copy in the package, and a loader path without libmoeq.
    rc, out = run_import({"MOEQ_LIBRARY": None, "LD_LIBRARY_PATH": str(tmp_path)}, str(site))
    if rc == 0:
        pytest.skip(f"a system-wide libmoeq is installed ({out.strip()})")
    assert "libmoeq was not found" in out and "MOEQ_LIBRARY" in out


def test_struct_layouts_match_the_c_compiler(abi_layout):
    layout = json.loads(abi_layout)
    # Every non-opaque struct of the header is in the layout printer and mirrored.
    declared = set(re.findall(r"typedef struct (moeq_\w+) \{", header_text()))
    assert declared == set(layout) == set(_lib.STRUCTS)
    for name, c in layout.items():
        cls = _lib.STRUCTS[name]
        assert [f[0] for f in cls._fields_] == list(c["fields"]), name
        for field, offset in c["fields"].items():
            assert getattr(cls, field).offset == offset, f"{name}.{field}"
        assert __import__("ctypes").sizeof(cls) == c["size"], name


def test_header_tables_come_from_the_library():
    text = header_text()
    schemes = re.findall(r'X\(\w+, (\d+), "(\w+)"\)', text.split("MOEQ_SCHEME_MAP(X)")[1]
                         .split("typedef")[0])
    assert moeq.schemes() == [name for _, name in schemes]
    for name in moeq.schemes():
        assert moeq.scheme_summary(name)
    with pytest.raises(moeq.InvalidArgumentError, match="scheme 'nope' is not one of"):
        moeq.scheme_summary("nope")


def test_log_callback_receives_selection_messages(glm):
    seen = []
    moeq.set_log_callback(lambda level, message: seen.append((level, message)))
    try:
        glm.select(glm.resolve_moe("model.layers.3.mlp.experts", 4))
    finally:
        moeq.set_log_callback(None)
    assert any(level == "info" and "wna16" in message for level, message in seen), seen
    count = len(seen)
    glm.select(glm.resolve_moe("model.layers.3.mlp.experts", 4))
    assert len(seen) == count  # nothing after the callback is removed
