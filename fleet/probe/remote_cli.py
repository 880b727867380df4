"""The probe's command line, its JSON lines and how it stops (stdin closed, a signal)."""

# Shipped to hosts beside remote.py (the bundle installs it as fleet_probe_cli) and imported by the
# controller as fleet.probe.remote_cli: Python 3.6 syntax and stdlib only, like remote.py.

import os
import select
import sys
import time

DEFAULT_TASKS_DIR = "~/.fleet/tasks"

class Stop(Exception):
    """The stream should end: stdin closed, or a termination signal arrived."""


def on_signal(signum, frame):
    raise Stop("signal %d" % signum)


def wait_or_stdin_closed(seconds, stdin_fd):
    """Sleep up to `seconds`; raise Stop as soon as stdin reaches end of file."""
    deadline = time.monotonic() + seconds
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        if stdin_fd is None:
            time.sleep(remaining)
            return
        readable, _, _ = select.select([stdin_fd], [], [], remaining)
        if readable and not os.read(stdin_fd, 65536):
            raise Stop("stdin closed")


def _not_serializable(value):
    raise TypeError("Object of type %s is not JSON serializable" % type(value).__name__)


def _json_encoder():
    """A function giving json.dumps(value, separators=(",", ":"), allow_nan=False).

    CPython's C encoder (_json, what json.dumps itself runs) is used directly: importing the
    json package compiles its decoder's regular expressions, milliseconds of host CPU per
    probe. Elsewhere, or where that signature differs, json.dumps.
    """
    try:
        from _json import encode_basestring_ascii, make_encoder

        encode = make_encoder(None, _not_serializable, encode_basestring_ascii, None, ":", ",",
                              False, False, False)
        works = "".join(encode({"probe": [1, 0.5, None, True, "\u00e9"]}, 0)) == \
            '{"probe":[1,0.5,null,true,"\\u00e9"]}'
    except (ImportError, TypeError, ValueError):
        works = False
    if not works:  # another interpreter, or a C encoder that takes other arguments
        import json

        return lambda value: json.dumps(value, separators=(",", ":"), allow_nan=False)
    return lambda value: "".join(encode(value, 0))


json_dumps = _json_encoder()


def emit(sample, out):
    out.write(json_dumps(sample) + "\n")
    out.flush()


# Python's own exit status when flushing its output fails at exit.
FLUSH_FAILED_EXIT = 120


def exit_now(status):
    """End the probe process with `status` as soon as its output is flushed.

    Skips the interpreter's teardown, which frees every module and object the imports built
    (ctypes, enum, threading, re: pynvml's imports): ~4 ms of a host's CPU per probe, a sixth of
    a once-probe's cost. Nothing is left for teardown to do: the NVML session is shut down, files
    are closed, and the probe starts no threads and registers no atexit handlers.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader is gone or the stream closed: as Python's exit
            if status == 0:
                status = FLUSH_FAILED_EXIT
    os._exit(status)


class ProbeArguments(object):
    """The probe's command line: --once | --interval S, [--max-samples N], [--tasks-dir D]."""

    def __init__(self):
        self.once = False
        self.interval = None
        self.max_samples = None
        self.tasks_dir = DEFAULT_TASKS_DIR


USAGE = ("usage: fleet-probe (--once | --interval INTERVAL) [--max-samples MAX_SAMPLES]"
          " [--tasks-dir TASKS_DIR]")


class UsageError(Exception):
    """A bad probe command line (reported like argparse would: usage, message, exit 2)."""


def _number(option, text, kind):
    try:
        return kind(text)
    except ValueError:
        raise UsageError("argument %s: invalid %s value: %r" % (option, kind.__name__, text)) from None


def parse_args(argv):
    """ProbeArguments from argv (hand-parsed: importing argparse costs a host ~10 ms)."""
    args = ProbeArguments()
    values = {}
    position = 0
    while position < len(argv):
        option, separator, inline = argv[position].partition("=")
        position += 1
        if option == "--once" and not separator:
            values[option] = True
            continue
        if option not in ("--interval", "--max-samples", "--tasks-dir"):
            raise UsageError("unrecognized arguments: %s" % argv[position - 1])
        if not separator:
            if position >= len(argv):
                raise UsageError("argument %s: expected one argument" % option)
            inline = argv[position]
            position += 1
        values[option] = inline
    if ("--once" in values) == ("--interval" in values):
        raise UsageError("exactly one of the arguments --once --interval is required")
    args.once = "--once" in values
    if "--interval" in values:
        args.interval = _number("--interval", values["--interval"], float)
        if not args.interval > 0:
            raise UsageError("--interval must be > 0")
    if "--max-samples" in values:
        args.max_samples = _number("--max-samples", values["--max-samples"], int)
        if args.max_samples < 1:
            raise UsageError("--max-samples must be >= 1")
    args.tasks_dir = values.get("--tasks-dir", DEFAULT_TASKS_DIR)
    return args


def stdin_fd():
    try:
        return sys.stdin.fileno() if sys.stdin is not None else None
    except (OSError, ValueError):
        return None
