"""Where training reports go: a terminal progress display, and metric loggers (JSONL, TensorBoard, W&B offline).

One module for ``parasim train``, ``parasim sweep`` and the LLM trainers, so that every run reports the same way:

- :class:`Progress`: one rich bar per phase (``sweep``; or ``expert``, ``sft``, ``eval sft``, ``grpo``, ``eval``)
  with its count, elapsed time and ETA, on stderr so stdout keeps the results.
- :class:`MetricLoggers`: fans one step's metrics out to the chosen sinks (``jsonl``, ``tensorboard``, ``wandb``).
  TensorBoard and W&B get verl's metric names where verl has one (``actor/entropy``, ``actor/pg_clipfrac``,
  ``critic/rewards/mean``, ``response_length/mean``, ...: :data:`VERL_NAMES`), so dashboards built for verl runs
  read parasim runs; the JSONL file keeps the trainer's own record (tools read its keys).
- Resume without duplicates: a run that resumes from the checkpoint of step ``S`` opens its loggers with
  ``resume_step=S``; the JSONL file is cut back to the records of steps ``<= S``, TensorBoard purges the
  events after ``S`` and W&B (whose steps only increase) skips the steps it already has, so the steps a crash
  made the run redo are logged once.
"""
from __future__ import annotations

import json
import math
import os
import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

LOGGERS = ("jsonl", "tensorboard", "wandb")

# trainer metric -> verl's name for the same quantity (verl.trainer.ppo.metric_utils and the actor's metrics)
VERL_NAMES: dict[str, str] = {
    # the LLM GRPO trainer (training/llm/grpo.py)
    "pg_loss": "actor/pg_loss", "clip_frac": "actor/pg_clipfrac", "approx_kl_old": "actor/ppo_kl",
    "kl_ref": "actor/kl_loss", "entropy": "actor/entropy", "grad_norm": "actor/grad_norm", "lr": "actor/lr",
    "reward_mean": "critic/rewards/mean", "reward_std": "critic/rewards/std",
    "len/len_mean": "response_length/mean", "len/len_max": "response_length/max", "len/len_min": "response_length/min",
    "time/rollout": "timing_s/gen", "time/update": "timing_s/update_actor", "time/sync": "timing_s/sync_weights",
    # the small trainer (training/grpo.py)
    "reward": "critic/rewards/mean", "kl": "actor/kl_loss", "approx_kl": "actor/ppo_kl", "loss": "actor/loss",
    "step_s": "timing_s/step", "accuracy": "critic/score/mean",
}


def verl_names(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The scalar metrics of a step under verl's names where verl has one (others keep theirs)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or key == "step":
            continue
        out[VERL_NAMES.get(key, key)] = float(value)
    return out


class MetricLogger(Protocol):
    """A sink for one scalar record per step."""

    def log(self, metrics: Mapping[str, Any], step: int) -> None: ...

    def close(self) -> None: ...


class JsonlLogger:
    """One JSON object per step, ``{"step": ..., "time": ..., **metrics}``, appended to ``path``.

    ``resume_step``: the checkpoint's step a resumed run starts after; records of later steps (logged before a
    crash, redone now) are cut from the file first. Without it a file left by an earlier run is replaced.
    """

    def __init__(self, path: str | Path, resume_step: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = []
        if resume_step is not None and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    step = json.loads(line).get("step")
                except (json.JSONDecodeError, AttributeError):
                    continue  # a line cut by the crash
                if isinstance(step, int) and step <= resume_step:
                    kept.append(line + "\n")
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        os.replace(tmp, self.path)
        self._fh = self.path.open("a", encoding="utf-8")

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        record = {"step": step, "time": round(time.time(), 3), **{k: v for k, v in metrics.items() if k != "step"}}
        self._fh.write(json.dumps(record, default=_json_default) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


class TensorBoardLogger:
    """Scalars to TensorBoard event files under ``log_dir`` (``torch.utils.tensorboard``; needs ``tensorboard``).

    A resumed run passes ``resume_step``: events after it, left by the crashed run, are purged, so TensorBoard
    shows each step once."""

    def __init__(self, log_dir: str | Path, resume_step: int | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError(f"the tensorboard logger needs the tensorboard package (pip install tensorboard): "
                              f"{err}") from None
        purge = resume_step + 1 if resume_step is not None else None
        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for key, value in verl_names(metrics).items():
            if math.isfinite(value):
                self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbLogger:
    """Scalars to a W&B run in offline mode under ``log_dir`` (``wandb sync`` uploads it later); needs ``wandb``.

    A resumed run reopens the same run id. W&B keeps a run's steps increasing, so the steps that a crash made the
    run redo (after the checkpoint, up to the last one logged) are skipped here rather than sent twice."""

    def __init__(self, log_dir: str | Path, name: str, config: Mapping[str, Any] | None = None) -> None:
        try:
            import wandb
        except ImportError as err:
            raise ImportError(f"the wandb logger needs the wandb package (pip install wandb): {err}") from None
        self._dir = Path(log_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        id_file, last_file = self._dir / "wandb_run_id", self._dir / "wandb_last_step"
        run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
        id_file.write_text(run_id)
        self._last = int(last_file.read_text()) if last_file.exists() else 0
        self._run = wandb.init(mode="offline", dir=str(self._dir), id=run_id, name=name, resume="allow",
                               config=dict(config or {}), settings=wandb.Settings(silent=True))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if step <= self._last:
            return
        self._run.log(verl_names(metrics), step=step)
        self._last = step
        (self._dir / "wandb_last_step").write_text(str(step))

    def close(self) -> None:
        self._run.finish()


class MetricLoggers:
    """The chosen sinks of a run under ``out``: ``jsonl`` (``out/<name>.jsonl``), ``tensorboard``
    (``out/tensorboard``), ``wandb`` (``out/wandb``). Only the main process of a distributed run logs."""

    def __init__(self, out: str | Path, name: str, kinds: Sequence[str] = ("jsonl",), *,
                 resume_step: int | None = None, config: Mapping[str, Any] | None = None,
                 enabled: bool = True) -> None:
        unknown = sorted(set(kinds) - set(LOGGERS))
        if unknown:
            raise ValueError(f"loggers = {list(kinds)!r}: unknown {unknown}; allowed: {', '.join(LOGGERS)}")
        self.sinks: list[MetricLogger] = []
        if not enabled:
            return
        out = Path(out)
        for kind in dict.fromkeys(kinds):
            if kind == "jsonl":
                self.sinks.append(JsonlLogger(out / f"{name}.jsonl", resume_step))
            elif kind == "tensorboard":
                self.sinks.append(TensorBoardLogger(out / "tensorboard", resume_step))
            else:
                self.sinks.append(WandbLogger(out / "wandb", name, config))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> MetricLoggers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_loggers(spec: str) -> tuple[str, ...]:
    """A comma-separated logger list (``jsonl,tensorboard``); empty means none."""
    kinds = tuple(k.strip() for k in spec.split(",") if k.strip())
    unknown = [k for k in kinds if k not in LOGGERS]
    if unknown:
        raise ValueError(f"loggers = {spec!r}: unknown {unknown[0]!r}; allowed: a comma-separated list of "
                         f"{', '.join(LOGGERS)}")
    return kinds


class Progress:
    """A rich display with one bar per phase: its count, elapsed time and ETA (a no-op when disabled).

    ``update(phase, done, total)`` adds the phase's bar on first use, so a trainer reports progress through one
    callback without knowing about the display; ``note`` shows beside the bar (the last point's accuracy). The
    display goes to ``console`` (default: stderr) and only to a terminal: a log file gets no frozen bars.
    """

    def __init__(self, enabled: bool = True, console: Any = None) -> None:
        self.enabled = enabled
        self.console = console
        self._tasks: dict[str, Any] = {}
        self._bar: Any = None

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.console import Console

            self.console = self.console or Console(stderr=True)
        if self.enabled and self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(TextColumn("[bold]{task.fields[phase]:<9}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                     TextColumn("{task.description}"), console=self.console,
                                     redirect_stdout=False, redirect_stderr=False)
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
            self._bar = None

    def update(self, phase: str, done: int, total: int, note: str | None = None) -> None:
        """Set ``phase``'s bar to ``done`` of ``total``."""
        if self._bar is None:
            return
        if phase not in self._tasks:
            self._tasks[phase] = self._bar.add_task(note or "", total=total, completed=done, phase=phase)
            return
        extra = {"description": note} if note is not None else {}
        self._bar.update(self._tasks[phase], completed=done, total=total, **extra)

    def print(self, line: str) -> None:
        """A line of output: above the bars when stdout shares their terminal, else plainly on stdout."""
        if self._bar is not None and sys.stdout.isatty():
            self._bar.console.print(line, highlight=False, markup=False)
        else:
            print(line, file=sys.stdout, flush=True)


ProgressCallback = Callable[[str, int, int], None]
