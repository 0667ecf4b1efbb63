"""moeq_status -> Python exceptions.

One table names the exception class of each status (by the library's own
status name, so the values come from the library); every class derives from
``moeq.Error`` and carries ``.status`` (int), ``.status_name`` and ``.message``
(the library's message, which names the place: JSON path, layer, tensor...).
"""

import ctypes

from ._lib import lib, moeq_error

# C status name -> exception class name.  New statuses only ever get appended.
STATUS_CLASSES = (
    ("NOMEM", "NoMemoryError"),
    ("INVALID_ARG", "InvalidArgumentError"),
    ("JSON", "JSONError"),
    ("SCHEMA", "SchemaError"),
    ("REGEX", "RegexError"),
    ("NO_MATCH", "NoMatchError"),
    ("AMBIGUOUS", "AmbiguousError"),
    ("UNSUPPORTED", "UnsupportedError"),
    ("SHAPE", "ShapeError"),
    ("DTYPE", "DTypeError"),
    ("IO", "IOFailure"),
    ("CHECKPOINT", "CheckpointError"),
    ("STATE", "StateError"),
    ("INTERNAL", "InternalError"),
    ("LIMIT", "LimitError"),
)


def _status_values():
    """{name: value} for every status the library knows (values are contiguous from 0)."""
    values = {}
    for value in range(256):
        name = lib.moeq_status_name(value).decode()
        if name == "UNKNOWN":
            break
        values[name] = value
    return values


STATUS_VALUES = _status_values()


class Error(Exception):
    """A moeq call failed.  ``status``/``status_name`` say how, ``message`` where."""

    status = -1
    status_name = "UNKNOWN"

    def __init__(self, message, status=None):
        super().__init__(message, status)
        if status is not None:
            self.status = status
            self.status_name = lib.moeq_status_name(status).decode()
        self.message = message

    def __str__(self):
        return f"{self.status_name}: {self.message}"


_BY_STATUS = {}
_BY_NAME = {}
for _status_name, _class_name in STATUS_CLASSES:
    if _status_name not in STATUS_VALUES:
        continue  # a library older than this table: the class would never be raised
    _cls = type(_class_name, (Error,), {
        "status": STATUS_VALUES[_status_name],
        "status_name": _status_name,
        "__doc__": lib.moeq_status_str(STATUS_VALUES[_status_name]).decode().capitalize()
        + f" (MOEQ_STATUS_{_status_name}).",
        "__module__": "moeq",
    })
    _BY_STATUS[_cls.status] = _cls
    _BY_NAME[_status_name] = _cls
    globals()[_class_name] = _cls
Error.__module__ = "moeq"

__all__ = ["Error"] + [cls.__name__ for cls in _BY_STATUS.values()]


def error_class(status):
    """The exception class of a status value (moeq.Error for values it does not know)."""
    return _BY_STATUS.get(status, Error)


def fail(status_name, message):
    """Raises the exception of `status_name` ("SHAPE", ...) for a check made in Python."""
    cls = _BY_NAME[status_name]
    raise cls(message, cls.status)


def new_error():
    return moeq_error()


def check(status, err):
    """Raises the exception for a failed call; `err` is the call's moeq_error."""
    if status == 0:
        return
    message = err.message.decode("utf-8", "replace")
    if not message:
        message = lib.moeq_status_str(status).decode()
    raise error_class(status)(message, status)


def call(fn, *args):
    """Calls a moeq function whose last argument is `moeq_error *` and checks its status."""
    err = moeq_error()
    check(fn(*args, ctypes.byref(err)), err)
