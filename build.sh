#!/bin/sh
# build.sh - install what is missing, build, and run moeq.
#
#   ./build.sh demo    build, then run `moeq demo`
#   ./build.sh test    build, then run the whole test suite (ctest)
#   ./build.sh build   only build
#
# Works on a fresh Debian 12 as root (or with sudo): missing Debian packages
# are installed with apt-get.  The build goes to ./build (override with
# MOEQ_BUILD_DIR); extra CMake arguments can be passed in MOEQ_CMAKE_ARGS.
# `test` also makes a Python venv in the build directory with numpy and pytest
# (from PyPI, once) for the Python binding's tests.
set -eu

cd "$(dirname "$0")"
BUILD_DIR=${MOEQ_BUILD_DIR:-build}
ACTION=${1:-build}

# Debian packages the build and the test suite need.
PACKAGES="gcc make cmake pkg-config libcjson-dev libpcre2-dev libopenblas-dev check \
python3 python3-venv"

install_missing() {
    missing=""
    for p in $PACKAGES; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            missing="$missing $p"
        fi
    done
    [ -z "$missing" ] && return 0
    # A python3 from elsewhere (pyenv, a venv) is as good as Debian's.
    if command -v python3 >/dev/null 2>&1 && python3 -c "import venv" 2>/dev/null; then
        missing=$(echo "$missing" | tr ' ' '\n' | grep -v -x -e python3 -e python3-venv | tr '\n' ' ')
        [ -z "$(echo "$missing" | tr -d ' ')" ] && return 0
    fi
    echo "build.sh: installing missing packages:$missing"
    if [ "$(id -u)" = 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "build.sh: run as root, or install these first: apt-get install$missing" >&2
        exit 1
    fi
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
}

# Configures once (later runs keep the cache), applying any -D arguments given
# here to an existing cache too; then builds.
configure_and_build() {
    if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
        # shellcheck disable=SC2086
        cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${MOEQ_CMAKE_ARGS:-} "$@"
    elif [ $# -gt 0 ]; then
        cmake -S . -B "$BUILD_DIR" "$@"
    fi
    cmake --build "$BUILD_DIR" --parallel "$(nproc)"
}

# The venv the Python binding's tests (ctest python_binding) and the numpy
# cross-checks run with: $BUILD_DIR/venv with numpy and pytest, made when
# missing.  If pip fails the build goes on, and configuring says loudly that
# python_binding will fail (the test stays registered and fails).
python_venv() {
    case "$BUILD_DIR" in
        /*) VENV="$BUILD_DIR/venv" ;;
        *) VENV="$(pwd)/$BUILD_DIR/venv" ;;
    esac
    VENV_PYTHON="$VENV/bin/python"
    if [ -x "$VENV_PYTHON" ] && "$VENV_PYTHON" -c "import numpy, pytest" 2>/dev/null; then
        return 0
    fi
    echo "build.sh: installing numpy and pytest into $VENV"
    # A venv that an earlier failure left without pip is made again.
    if { "$VENV_PYTHON" -m pip --version >/dev/null 2>&1 || python3 -m venv --clear "$VENV"; } &&
        "$VENV_PYTHON" -m pip install --disable-pip-version-check -q numpy pytest &&
        "$VENV_PYTHON" -c "import numpy, pytest"; then
        return 0
    fi
    echo "build.sh: could not install numpy and pytest into $VENV:" \
        "the python_binding test will fail" >&2
}

case "$ACTION" in
    demo)
        install_missing
        configure_and_build
        exec "$BUILD_DIR/moeq" demo
        ;;
    test)
        install_missing
        python_venv
        configure_and_build "-DMOEQ_PYTHON=$VENV_PYTHON" \
            "-DMOEQ_CROSSCHECK_PYTHON=$VENV_PYTHON"
        cd "$BUILD_DIR"
        exec ctest --output-on-failure --timeout 1800
        ;;
    build)
        install_missing
        configure_and_build
        ;;
    *)
        echo "usage: ./build.sh [demo|test|build]" >&2
        exit 2
        ;;
esac
