"""The model under test is untrusted: what the harness does around every call into it.

Every call the suite makes into a model (its factory, and each method) goes through `guarded`:

- **State.** Process-wide state a model can change (NumPy's error handling and print options, the
  random generators of Python, NumPy and torch, torch's default dtype and device, threads, grad mode,
  deterministic and matmul-precision flags, warnings filters, the working directory, the environment,
  `sys.stdout` and `sys.stderr`, the recursion limit, the SIGINT and SIGTERM handlers) is kept apart in a
  `Context` of the model's own, as what the model changed: what importing its module changed
  (`imported`), then what its factory and each call left. A call runs with those changes made to the
  suite's state of that moment, which is put back after it. So `np.seterr(all="raise")` in a factory
  cannot make the oracle or another model fail, and a model drawing from a random generator gets a
  stream of its own that goes on from call to call (two calls do not see the same draws, so noise is
  seen as such).
- **Exits.** `sys.exit`, `exit()` and `os._exit` inside a call raise `ModelExited` instead of ending
  the process (in the calling process only: a child the model forks exits as it asks).
- **Output.** What the models of one test print, through `sys.stdout` and `sys.stderr` or straight to
  descriptors 1 and 2 as native code does, is passed on up to `OUTPUT_BUDGET` a stream, and counted
  after that (pytest keeps a test's output in memory: 300 MB a call filled 24 GB).
- **Deadline.** A call that runs longer than its deadline is interrupted (SIGALRM, in the main thread)
  with `CallTimedOut`; one that does not come back to Python even then (native code that never
  returns, or a model that swallows the interruption) ends the process up to `GRACE_S` later, through
  `faulthandler`, whose thread needs no lock held by the model (`_Backstop`): every thread's traceback
  goes to $VERIFIER_HANG_DIR (else stderr), the process exits with status 1, and `verifier check`
  reports the test that was running as failed, naming where the model was.

Inputs and outputs are copied by the caller (`verifier.plugin.contract.CheckedModel`), which knows
their shapes.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import importlib
import os
import posix
import random
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import IO, Any

import numpy as np

DEFAULT_TIMEOUT_S = 600.0  # one call: a factory that loads a 7B checkpoint on a CPU takes minutes, none takes ten
GRACE_S = 30.0  # after the deadline, how long native code may take to come back before the process ends
_STOPS = (signal.SIGINT, signal.SIGTERM)
# The signal module's functions without their conversion of handlers to enums (15 µs a call, twice a call
# into a model): the C module's where the interpreter has it (CPython), which take and give the same values.
_getsignal = getattr(importlib.import_module("_signal"), "getsignal", signal.getsignal)
_setsignal = getattr(importlib.import_module("_signal"), "signal", signal.signal)
_timeout_s = DEFAULT_TIMEOUT_S


def call_timeout() -> float:
    """How long one call into a model may take (`set_call_timeout`; `DEFAULT_TIMEOUT_S` unless set)."""
    return _timeout_s


def set_call_timeout(seconds: float) -> None:
    """Set the deadline of every call into a model from now on (the plugin's --call-timeout)."""
    global _timeout_s
    if not seconds > 0:
        raise ValueError(f"a call's deadline must be a positive number of seconds, not {seconds!r}")
    _timeout_s = float(seconds)


class ModelExited(BaseException):
    """The model asked to end the process (`sys.exit`, `exit()`, `os._exit`) during a call.

    A BaseException, as SystemExit is, so that a model's own `except Exception` does not swallow it."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


class CallTimedOut(BaseException):
    """A call into the model ran past its deadline (raised inside the model's code, by SIGALRM)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"did not return within {seconds:g} s")
        self.seconds = seconds


# -- process-wide state ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One piece of process-wide state: how to read it and set it; `main_thread` if only the main
    thread may set it (signal handlers)."""

    name: str
    get: Callable[[], Any]
    set: Callable[[Any], None]
    main_thread: bool = False


def _set_errstate(value: tuple[dict[str, Any], Any]) -> None:
    np.seterr(**value[0])
    np.seterrcall(value[1])


def _set_warnings(filters: list[Any]) -> None:
    warnings.filters[:] = filters  # type: ignore[index]  # a list, typed as a Sequence
    mutated = getattr(warnings, "_filters_mutated", None) or getattr(warnings, "_filters_mutated_lock_held", None)
    if mutated is not None:  # the per-module registries of warnings already shown are keyed by the filters' version
        mutated()


def _set_cwd(path: str | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):  # a directory removed since: stay where the process is
            os.chdir(path)


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the model removed the directory it was in
        return None


def _environ() -> dict[Any, Any]:
    """The environment as os.environ holds it (encoded, on POSIX): a plain dict, copied in a microsecond
    where dict(os.environ) decodes every entry."""
    data = getattr(os.environ, "_data", None)
    return dict(data) if isinstance(data, dict) else dict(os.environ)


def _set_environ(values: dict[Any, Any]) -> None:
    now = _environ()
    decode: Callable[[Any], str] = os.fsdecode if any(isinstance(key, bytes) for key in now) else str
    for key in now.keys() - values.keys():
        del os.environ[decode(key)]
    for key, value in values.items():
        if now.get(key) != value:
            os.environ[decode(key)] = decode(value)


def _set_stdio(streams: tuple[Any, Any]) -> None:
    sys.stdout, sys.stderr = streams


def _set_signals(handlers: tuple[Any, ...]) -> None:
    for stop, handler in zip(_STOPS, handlers, strict=True):
        if handler is not None and _getsignal(stop) is not handler:
            _setsignal(stop, handler)


class _NumpyRandom:
    """A snapshot of the global NumPy generator (`np.random.seed`, `np.random.normal`, ...): which bit
    generator it draws from, and that one's state. MT19937's raw words (624 and the position, read through
    its public ctypes address) tell whether it changed; its full state (`np.random.get_state`, 60 µs) is
    read only when they did. Another bit generator (`np.random.set_bit_generator`) is read every time."""

    _last: _NumpyRandom | None = None
    state: dict[str, Any]
    _MT19937_BYTES = 624 * 4 + 4  # mt19937_state: the words and the position

    def __init__(self) -> None:
        self.bits = np.random.get_bit_generator()  # type: ignore[attr-defined]  # public since NumPy 1.25
        mt = type(self.bits) is np.random.MT19937
        self.raw = ctypes.string_at(self.bits.ctypes.state_address, self._MT19937_BYTES) if mt else None
        last = _NumpyRandom._last
        if self.raw is not None and last is not None and last == self:
            self.state = last.state
        else:
            self.state = np.random.get_state(legacy=False)
            _NumpyRandom._last = self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _NumpyRandom):
            return NotImplemented
        return self.bits is other.bits and self.raw is not None and self.raw == other.raw

    __hash__ = None  # type: ignore[assignment]  # compared by value

    def restore(self) -> None:
        if np.random.get_bit_generator() is not self.bits:  # type: ignore[attr-defined]
            np.random.set_bit_generator(self.bits)  # type: ignore[attr-defined]
        np.random.set_state(self.state)


_CORE: tuple[Item, ...] = (
    Item("numpy.errstate", lambda: (np.geterr(), np.geterrcall()), _set_errstate),
    Item("numpy.printoptions", np.get_printoptions, lambda value: np.set_printoptions(**value)),
    Item("random", random.getstate, random.setstate),
    Item("numpy.random", _NumpyRandom, _NumpyRandom.restore),
    Item("warnings.filters", lambda: list(warnings.filters), _set_warnings),
    Item("cwd", _cwd, _set_cwd),
    Item("environ", _environ, _set_environ),
    Item("stdio", lambda: (sys.stdout, sys.stderr), _set_stdio),
    Item("recursionlimit", sys.getrecursionlimit, sys.setrecursionlimit),
    Item("signals", lambda: (_getsignal(_STOPS[0]), _getsignal(_STOPS[1])), _set_signals, main_thread=True),
)


def _torch_items(torch: Any) -> tuple[Item, ...]:
    """torch's process-wide settings, for a process that has imported torch (this module never does)."""

    def set_deterministic(value: tuple[bool, bool]) -> None:
        torch.use_deterministic_algorithms(value[0], warn_only=value[1])

    def set_device(device: Any) -> None:
        # None, not "cpu", for torch's own default: setting any device installs a mode every torch call goes through.
        torch.set_default_device(None if torch.device(device).type == "cpu" else device)

    return (
        Item("torch.default_dtype", torch.get_default_dtype, torch.set_default_dtype),
        Item("torch.default_device", torch.get_default_device, set_device),
        Item("torch.threads", torch.get_num_threads, torch.set_num_threads),
        Item("torch.grad", torch.is_grad_enabled, torch.set_grad_enabled),
        Item(
            "torch.deterministic",
            lambda: (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            set_deterministic,
        ),
        Item("torch.matmul_precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        Item(  # as bytes, which compare in a microsecond
            "torch.random",
            lambda: torch.random.get_rng_state().numpy().tobytes(),
            lambda state: torch.random.set_rng_state(torch.frombuffer(bytearray(state), dtype=torch.uint8)),
        ),
    )


def _torch_defaults(torch: Any) -> State:
    """torch's settings as a fresh `import torch` has them: the suite's, when a model imports torch during a call."""
    return {
        "torch.default_dtype": torch.float32,
        "torch.default_device": torch.device("cpu"),
        "torch.grad": True,
        "torch.deterministic": (False, False),
        "torch.matmul_precision": "highest",
    }


_WITH_TORCH: list[tuple[Item, ...]] = []  # _CORE and torch's items, made once torch is imported


def _items() -> tuple[Item, ...]:
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_default_dtype"):  # not imported, or half-imported
        return _CORE
    if not _WITH_TORCH:
        _WITH_TORCH.append(_CORE + _torch_items(torch))
    return _WITH_TORCH[0]


State = dict[str, Any]


def capture() -> State:
    """The process-wide state now (the main thread's signal handlers only where this is the main thread)."""
    main = threading.current_thread() is threading.main_thread()
    return {item.name: item.get() for item in _items() if main or not item.main_thread}


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # objects whose == is not a truth value
        return a is b


def apply(state: State, now: State | None = None) -> None:
    """Set the process-wide state to `state` (what differs from `now`, the state at this moment if given)."""
    main = threading.current_thread() is threading.main_thread()
    for item in _items():
        if item.name not in state or (item.main_thread and not main):
            continue
        if now is not None and item.name in now and _equal(now[item.name], state[item.name]):
            continue
        item.set(state[item.name])


def _with_torch(suite: State, now: State) -> State:
    """`suite`, with torch's settings as a fresh import has them where the suite had no torch and `now` has."""
    if "torch" in sys.modules and now.keys() - suite.keys():
        return {**_torch_defaults(sys.modules["torch"]), **suite}
    return suite


def difference(now: State, base: State) -> State:
    """What differs in `now` from `base`: each item's value, the environment's by variable (None: removed)."""
    found: State = {}
    for name, value in now.items():
        if name in base and _equal(value, base[name]):
            continue
        if name == "environ" and name in base:
            old = base[name]
            found[name] = {key: value.get(key) for key in value.keys() | old.keys() if value.get(key) != old.get(key)}
        else:
            found[name] = value
    return found


def patched(base: State, delta: State) -> State:
    """`base` with `delta` (a `difference`) made to it."""
    state = {**base, **delta}
    if "environ" in delta and "environ" in base:
        environ = {**base["environ"], **delta["environ"]}
        state["environ"] = {key: value for key, value in environ.items() if value is not None}
    return state


class Context:
    """The process-wide state one model runs in, kept as what it changed (`delta`) from the suite's: what
    importing its module changed, then what its factory and each call left. Each call starts from the
    suite's state at that moment with the model's changes made to it, so a setting the suite changes
    between calls (pytest's capture of stdout, a test's environment variable) reaches the model, and one
    the model changed stays its own."""

    def __init__(self, delta: Mapping[str, Any] | None = None) -> None:
        self.delta: State = dict(delta or {})

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Run the block in this context, then put the suite's state back, keeping what the block changed."""
        suite = capture()
        if self.delta:
            apply(patched(suite, self.delta), suite)
        try:
            yield
        finally:
            now = capture()
            suite = _with_torch(suite, now)
            self.delta = difference(now, suite)
            if self.delta:
                apply(suite, now)


def imported(load: Callable[[], Any]) -> tuple[Any, State]:
    """`load()` (importing a model's module) with the process-wide state put back after it; the result,
    and what the import changed (the model's context starts from it)."""
    before = capture()
    try:
        result = load()
    finally:
        after = capture()
        before = _with_torch(before, after)
        changed = difference(after, before)
        apply(before, after)
    return result, changed


# -- output -----------------------------------------------------------------------------------------

OUTPUT_BUDGET = 1 << 20  # what the models of one test may print on each of stdout and stderr (bytes)


class _Stream:
    """What the models' calls print on one stream (1: stdout, 2: stderr), passed on until the test's budget
    is spent and counted after that: through `sys.stdout` (`_BoundedText`), and through the file
    descriptor, which native code writes to and which a call has pointed at a spool file of ours."""

    def __init__(self, fd: int, name: str) -> None:
        self.fd, self.name = fd, name
        self.left = {"text": OUTPUT_BUDGET, "bytes": OUTPUT_BUDGET}  # through sys.stdout, through the descriptor
        self.dropped = 0
        self.spool: IO[bytes] | None = None

    def take(self, n: int, way: str) -> int:
        """How many of `n` characters (`way` "text") or bytes ("bytes") may pass; the rest count as dropped.
        Each way has its own budget: text that sys.stdout writes to the descriptor meets both."""
        passed = min(n, self.left[way])
        self.left[way] -= passed
        self.dropped += n - passed
        return passed

    def redirect(self) -> int | None:
        """Point the descriptor at the spool; the descriptor it pointed to before (None where it has none)."""
        try:
            saved = os.dup(self.fd)
        except OSError:  # closed
            return None
        if self.spool is None:
            self.spool = tempfile.TemporaryFile(prefix="verifier-output-")  # noqa: SIM115 - unlinked, kept open
        os.dup2(self.spool.fileno(), self.fd)
        return saved

    def restore(self, saved: int | None) -> None:
        """Point the descriptor back, and pass on what was spooled, within the budget."""
        if saved is None or self.spool is None:
            return
        os.dup2(saved, self.fd)
        os.close(saved)
        spool = self.spool.fileno()
        size = os.fstat(spool).st_size
        if size:
            passed, done = self.take(size, "bytes"), 0
            while done < passed:
                chunk = os.pread(spool, min(passed - done, 1 << 16), done)
                if not chunk:
                    break
                with contextlib.suppress(OSError):
                    os.write(self.fd, chunk)
                done += len(chunk)
            os.ftruncate(spool, 0)
            os.lseek(spool, 0, os.SEEK_SET)

    def note(self) -> None:
        """Say how much was dropped in this call, once."""
        if self.dropped:
            with contextlib.suppress(OSError):
                os.write(self.fd, f"\n[lm-verifier: {self.dropped:,} more bytes the model printed on {self.name} "
                                  "were dropped]\n".encode())  # fmt: skip
            self.dropped = 0


class _BoundedText:
    """`sys.stdout` or `sys.stderr` during a call: writes pass within the stream's budget."""

    def __init__(self, stream: Any, budget: _Stream) -> None:
        self._stream, self._budget = stream, budget

    def write(self, text: str) -> int:
        passed = self._budget.take(len(text), "text")
        if passed:
            self._stream.write(text[:passed])
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding, buffer, isatty, ...
        return getattr(self._stream, name)


_STREAMS = (_Stream(1, "stdout"), _Stream(2, "stderr"))


def reset_output_budget() -> None:
    """Give the next test's models the whole budget again (the plugin calls it as each test starts)."""
    for stream in _STREAMS:
        stream.left, stream.dropped = {"text": OUTPUT_BUDGET, "bytes": OUTPUT_BUDGET}, 0


_C_LIBRARY: list[Any] = []  # the C library's fflush, looked up once (a lookup builds a class: 40 µs)


def _flush_c_streams() -> None:
    """Flush C's stdio buffers (printf's), so that what native code printed goes where it pointed then."""
    with contextlib.suppress(OSError, AttributeError):
        if not _C_LIBRARY:
            _C_LIBRARY.append(ctypes.CDLL(None).fflush)
        _C_LIBRARY[0](None)


@contextlib.contextmanager
def _output_bounded() -> Iterator[None]:
    """Bound what the block prints: through sys.stdout and sys.stderr, and through descriptors 1 and 2."""
    python = (sys.stdout, sys.stderr)
    for stream in python:
        with contextlib.suppress(Exception):  # a stream the model or a test replaced with something odd
            stream.flush()
    _flush_c_streams()
    saved = [stream.redirect() for stream in _STREAMS]
    sys.stdout, sys.stderr = (_BoundedText(s, b) for s, b in zip(python, _STREAMS, strict=True))
    try:
        yield
    finally:
        wrappers = (sys.stdout, sys.stderr)
        for wrapper in wrappers:
            with contextlib.suppress(Exception):
                wrapper.flush()
        if isinstance(wrappers[0], _BoundedText):  # else the model put its own there: its own to keep
            sys.stdout = wrappers[0]._stream
        if isinstance(wrappers[1], _BoundedText):
            sys.stderr = wrappers[1]._stream
        _flush_c_streams()
        for stream, fd in zip(_STREAMS, saved, strict=True):
            stream.restore(fd)
            stream.note()


# -- exits and deadlines -----------------------------------------------------------------------------

_depth = 0  # guarded calls in progress in this process (a factory may build another model)


def _exit_refused(pid: int, real: Callable[[int], Any]) -> Callable[[int], Any]:
    def _exit(status: int) -> Any:
        if os.getpid() != pid:  # a child the model forked (multiprocessing's workers end so): let it go
            return real(status)
        raise ModelExited(f"os._exit({status!r})")

    return _exit


@contextlib.contextmanager
def _exits_refused() -> Iterator[None]:
    real = posix._exit
    refusing = _exit_refused(os.getpid(), real)
    os._exit = posix._exit = refusing  # type: ignore[assignment]  # raises, where the real one never returns
    try:
        yield
    except SystemExit as e:  # sys.exit(), exit(), quit(): an exception Python would let end the process
        raise ModelExited(f"sys.exit({e.code!r})") from None
    finally:
        os._exit = posix._exit = real


def _alarm(deadline_s: float) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise CallTimedOut(deadline_s)

    return handler


HANG_DIR_ENV = "VERIFIER_HANG_DIR"  # where the backstop writes its traceback (`verifier check`: its staging folder)


def _hang_file() -> IO[str]:
    """Where the backstop's traceback goes: hung-PID.txt in $VERIFIER_HANG_DIR, which `verifier check` reads
    to say which call hung; else the stderr of now (not of the call, whose stderr is our spool)."""
    directory = os.environ.get(HANG_DIR_ENV)
    if directory:
        with contextlib.suppress(OSError):
            return open(os.path.join(directory, f"hung-{os.getpid()}.txt"), "w")
    return os.fdopen(os.dup(2), "w")


def grace(deadline_s: float) -> float:
    """How long past its deadline a call that does not come back to Python may take before the process
    ends: GRACE_S, or the deadline itself where that is shorter (a test's deadline of a second)."""
    return min(GRACE_S, deadline_s)


class _Backstop:
    """Ends the process when a call stays away from Python past its deadline: faulthandler's thread, which
    needs no lock the model may hold, prints every thread's traceback and exits (status 1).

    Arming faulthandler starts its thread (0.1 ms) and cancelling it waits for that thread to end (0.5 ms),
    more than many calls take, so one arming covers calls that follow one another. It is renewed by a call
    that starts more than half a grace after it was made, so that it fires between half a grace and a grace
    after the deadline of a call that does not come back; and it is cancelled by a call that ends less than
    a grace before it would fire, or by a thread of ours once no call has run for a moment, so that it
    never fires between calls. It takes over faulthandler's one timer while calls run (pytest's
    `faulthandler_timeout` uses it too)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.armed: tuple[float, float] | None = None  # (when, for a deadline of how many seconds)
        self.file: IO[str] | None = None  # where the traceback goes
        self.calls = 0  # in progress
        self.last_end = 0.0
        self.watcher: threading.Thread | None = None

    def enter(self, seconds: float) -> None:
        with self.lock:
            self.calls += 1
            now = time.monotonic()
            if self.armed is None or self.armed[1] != seconds or now - self.armed[0] > grace(seconds) / 2:
                previous, self.file = self.file, _hang_file()
                faulthandler.dump_traceback_later(seconds + grace(seconds), exit=True, file=self.file)
                self.armed = (now, seconds)
                if previous is not None:
                    previous.close()
            if self.watcher is None:
                self.watcher = threading.Thread(target=self._watch, name="verifier-call-backstop", daemon=True)
                self.watcher.start()

    def leave(self) -> None:
        with self.lock:
            self.calls -= 1
            self.last_end = time.monotonic()
            if self.armed is not None and not self.calls:
                when, seconds = self.armed
                if when + seconds + grace(seconds) - self.last_end < grace(seconds):  # a long call: fires soon
                    self._cancel()

    def _cancel(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        self.armed = None

    def _watch(self) -> None:
        while True:
            with self.lock:
                pause = 1.0 if self.armed is None else min(1.0, grace(self.armed[1]) / 4)
                if self.armed is not None and not self.calls and time.monotonic() - self.last_end >= pause:
                    self._cancel()
            time.sleep(pause)


_BACKSTOP = _Backstop()


@contextlib.contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Interrupt the block after `seconds` (main thread: SIGALRM), and end the process up to a `grace` later
    if it has not come back (`_Backstop`)."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = _setsignal(signal.SIGALRM, _alarm(seconds))
    outer = signal.setitimer(signal.ITIMER_REAL, seconds)  # an alarm someone else set (pytest-timeout's)
    _BACKSTOP.enter(seconds)
    try:
        yield
    finally:
        _BACKSTOP.leave()
        signal.setitimer(signal.ITIMER_REAL, 0)
        _setsignal(signal.SIGALRM, previous)
        if outer[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, outer[0], outer[1])


@contextlib.contextmanager
def guarded(context: Context, deadline_s: float | None = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """Run one call into a model: in its `context`, with exits refused (`ModelExited`) and a deadline
    (`CallTimedOut`; None: none). A call inside a call (a factory building another model) runs in its
    own context, under the outer call's exits and deadline."""
    global _depth
    with context.entered():
        if _depth:
            yield
            return
        _depth += 1
        try:
            with _deadline(deadline_s), _exits_refused(), _output_bounded():
                yield
        finally:
            _depth -= 1


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "CallTimedOut",
    "Context",
    "ModelExited",
    "apply",
    "call_timeout",
    "capture",
    "guarded",
    "imported",
    "reset_output_budget",
    "set_call_timeout",
]
