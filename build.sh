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

configure_and_build() {
    if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
        # shellcheck disable=SC2086
        cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${MOEQ_CMAKE_ARGS:-}
    fi
    cmake --build "$BUILD_DIR" --parallel "$(nproc)"
}

case "$ACTION" in
    demo)
        install_missing
        configure_and_build
        exec "$BUILD_DIR/moeq" demo
        ;;
    test)
        install_missing
        configure_and_build
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
