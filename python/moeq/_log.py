"""The library's process-wide log callback (selection decisions, warnings)."""

import atexit
import threading

from ._lib import LOG_FN, lib

LEVELS = ("debug", "info", "warn")

_lock = threading.Lock()
# Every callback ever handed to the library stays referenced: another thread may
# still be inside the previous one when it is replaced.
_installed = []


def set_log_callback(fn):
    """Sends the library's log messages to fn(level, message), level being "debug",
    "info" or "warn"; None discards them (the default).

    fn is called from whatever thread logs, including the library's worker
    threads, so it must be thread-safe; exceptions it raises are printed and
    dropped."""
    if fn is None:
        c_fn = LOG_FN()
    else:
        def trampoline(level, message, _user):
            name = LEVELS[level] if 0 <= level < len(LEVELS) else str(level)
            fn(name, message.decode("utf-8", "replace") if message else "")
        c_fn = LOG_FN(trampoline)
    with _lock:
        lib.moeq_set_log_callback(c_fn, None)
        _installed.append(c_fn)


@atexit.register
def _unset():
    # No call into a Python function once the interpreter is going away.
    lib.moeq_set_log_callback(LOG_FN(), None)
