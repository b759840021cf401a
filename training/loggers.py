"""Where training reports go: a terminal progress display, and metric loggers (JSONL, TensorBoard, W&B).

One module for ``parasim train``, ``parasim sweep`` and the LLM trainers, so that every run reports the same way:

- :class:`Progress`: one rich bar per phase (``sweep``; or ``expert``, ``sft``, ``eval sft``, ``grpo``, ``eval``)
  with its count, elapsed time and ETA, on stderr so stdout keeps the results.
- :class:`MetricLoggers`: fans one step's metrics out to the chosen sinks (``jsonl``, ``tensorboard``, ``wandb``).
  TensorBoard and W&B show one naming scheme (:func:`metric_name`; every name in docs/metrics.md): verl's name
  where verl logs the same quantity (``actor/entropy``, ``actor/pg_clipfrac``, ``critic/rewards/mean``,
  ``timing_s/gen``, ``train/loss``, ...), ``parasim/<key>`` for the rest (``parasim/accuracy``,
  ``parasim/tokens``, ...), so dashboards built for verl runs read parasim runs and nothing of parasim's own is
  mistaken for one of verl's; the JSONL file keeps the trainer's own record (tools read its keys). A run's
  warm-start losses and its final evaluation go to TensorBoard and W&B too (:meth:`MetricLoggers.log_final`).
- W&B runs offline under the run's folder (``wandb sync`` uploads them) unless the environment's ``WANDB_MODE``
  says otherwise (``online``, ``disabled``); a W&B run is only opened once there is something to log.
- Resume without duplicates: a run that resumes from the checkpoint of step ``S`` opens its loggers with
  ``resume_step=S``; the JSONL file is cut back to the records of steps ``<= S``, TensorBoard purges the
  events after ``S`` and W&B (whose steps only increase) skips the steps it already has, so the steps a crash
  made the run redo are logged once; the final block is logged once per run (a marker file), so rerunning a
  finished run adds nothing and opens no W&B run.
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
RECORDS = ("grpo", "sft")  # the kinds of per-step record a trainer writes (a key's meaning depends on it)

# trainer key -> verl's name for the same quantity (verl.trainer.ppo.metric_utils, the actor's and the SFT
# trainer's metrics, the PPO trainer's timers); every other key shows as parasim/<key> (metric_name)
VERL_NAMES: dict[str, dict[str, str]] = {
    "grpo": {
        # both GRPO trainers (training/grpo.py, training/llm/grpo.py)
        "entropy": "actor/entropy", "clip_frac": "actor/pg_clipfrac", "grad_norm": "actor/grad_norm",
        "lr": "actor/lr",
        # the LLM GRPO trainer
        "pg_loss": "actor/pg_loss", "approx_kl_old": "actor/ppo_kl", "kl_ref": "actor/kl_loss",
        "reward_mean": "critic/rewards/mean", "time/rollout": "timing_s/gen", "time/update": "timing_s/update_actor",
        "time/sync": "timing_s/update_weights",
        # the small trainer
        "reward": "critic/rewards/mean", "kl": "actor/kl_loss", "approx_kl": "actor/ppo_kl", "step_s": "timing_s/step",
    },
    # the LLM SFT trainer (training/llm/sft.py) and the small trainer's warm start: verl's SFT trainer's names
    "sft": {"loss": "train/loss", "grad_norm": "train/grad_norm", "lr": "train/lr"},
}
# parasim's own names for what verl has no name for, where the trainer's key is not the clearest one
PARASIM_NAMES: dict[str, dict[str, str]] = {
    "grpo": {"traj/outcome": "parasim/accuracy"},  # the LLM trainer's accuracy, under the small trainer's name
    "sft": {},
}
EVAL_KEYS = ("accuracy", "reward", "tokens", "cost_units", "usd", "latency_s")  # a final evaluation's figures
SFT_EPOCH = "parasim/sft/epoch"  # W&B's x-axis of the warm-start losses


def metric_name(key: str, record: str = "grpo") -> str:
    """The name TensorBoard and W&B show for a trainer's ``key`` in a ``record`` ("grpo" or "sft") row."""
    _check_record(record)
    return VERL_NAMES[record].get(key) or PARASIM_NAMES[record].get(key) or f"parasim/{key}"


def _check_record(record: str) -> None:
    if record not in RECORDS:
        raise ValueError(f"record: expected one of {', '.join(RECORDS)}, got {record!r}")


def dashboard_names(metrics: Mapping[str, Any], record: str = "grpo") -> dict[str, float]:
    """The scalar metrics of a step under their dashboard names (``metric_name``); ``step`` and non-numbers go."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or key == "step":
            continue
        out[metric_name(key, record)] = float(value)
    return out


def final_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """A small-trainer run's final evaluation under its dashboard names: ``parasim/eval/<figure>`` (after GRPO),
    ``parasim/eval_sft/<figure>`` (the warm start, before GRPO) and ``parasim/eval_pool/<figure>`` (on
    ``eval.pool``), from the result ``run_pipeline`` returns and a sweep stores."""
    out = {f"parasim/eval/{k}": float(result[k]) for k in EVAL_KEYS if k in result}
    out.update({f"parasim/eval_sft/{k}": float(result[f"sft_{k}"]) for k in EVAL_KEYS if f"sft_{k}" in result})
    shifted = result.get("eval_pool") or {}
    out.update({f"parasim/eval_pool/{k}": float(shifted[k]) for k in EVAL_KEYS if k in shifted})
    return out


class MetricLogger(Protocol):
    """A sink for one scalar record per step, and a run's final block (warm-start losses, final evaluation)."""

    def log(self, metrics: Mapping[str, Any], step: int) -> None: ...

    def log_final(self, sft_losses: Sequence[float], final: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class JsonlLogger:
    """One JSON object per step, ``{"step": ..., "time": ..., **metrics}``, appended to ``path``.

    ``resume_step``: the checkpoint's step a resumed run starts after; records of later steps (logged before a
    crash, redone now) are cut from the file first. Without it a file left by an earlier run is replaced. The
    final block is not written here: the run's own result file (``metrics.json``, a sweep's store) holds it.
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

    def log_final(self, sft_losses: Sequence[float], final: Mapping[str, float], step: int) -> None:
        """Nothing: the run's result file holds the final block."""

    def close(self) -> None:
        self._fh.close()


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


class TensorBoardLogger:
    """Scalars to TensorBoard event files under ``log_dir`` (``torch.utils.tensorboard``; needs ``tensorboard``),
    under their dashboard names for ``record`` rows.

    A resumed run passes ``resume_step``: events after it, left by the crashed run, are purged, so TensorBoard
    shows each step once."""

    def __init__(self, log_dir: str | Path, resume_step: int | None = None, record: str = "grpo") -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:
            raise ImportError(f"the tensorboard logger needs the tensorboard package (pip install tensorboard): "
                              f"{err}") from None
        purge = resume_step + 1 if resume_step is not None else None
        self.record = record
        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        self._scalars(dashboard_names(metrics, self.record), step)

    def log_final(self, sft_losses: Sequence[float], final: Mapping[str, float], step: int) -> None:
        """The warm start's loss per epoch (``train/loss`` at epochs 1..E, its own tag) and the final evaluation at
        the run's last step."""
        for epoch, loss in enumerate(sft_losses, start=1):
            self._scalars({metric_name("loss", "sft"): float(loss)}, epoch)
        self._scalars(final, step)

    def _scalars(self, named: Mapping[str, float], step: int) -> None:
        for key, value in named.items():
            if math.isfinite(value):
                self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbLogger:
    """Scalars to a W&B run under ``log_dir`` (needs ``wandb``), under their dashboard names for ``record`` rows:
    offline (``wandb sync`` uploads it later) unless ``WANDB_MODE`` in the environment names another mode.

    The run is opened at the first thing to log, so a rerun of a finished run leaves no empty run folder. A resumed
    run reopens the same run id. W&B keeps a run's steps increasing, so the steps that a crash made the run redo
    (after the checkpoint, up to the last one logged) are skipped here rather than sent twice."""

    def __init__(self, log_dir: str | Path, name: str, config: Mapping[str, Any] | None = None,
                 record: str = "grpo") -> None:
        try:
            import wandb
        except ImportError as err:
            raise ImportError(f"the wandb logger needs the wandb package (pip install wandb): {err}") from None
        self._wandb, self._name, self._config, self.record = wandb, name, dict(config or {}), record
        self._dir = Path(log_dir)
        last_file = self._dir / "wandb_last_step"
        self._last = int(last_file.read_text()) if last_file.exists() else 0
        self._run: Any = None
        self.mode = os.environ.get("WANDB_MODE") or "offline"

    def _open(self) -> Any:
        if self._run is None:
            self._dir.mkdir(parents=True, exist_ok=True)
            id_file = self._dir / "wandb_run_id"
            run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
            id_file.write_text(run_id)
            self._run = self._wandb.init(mode=self.mode, dir=str(self._dir), id=run_id, name=self._name,
                                         resume="allow", config=self._config,
                                         settings=self._wandb.Settings(silent=True))
        return self._run

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if step <= self._last:
            return
        self._open().log(dashboard_names(metrics, self.record), step=step)
        self._set_last(step)

    def log_final(self, sft_losses: Sequence[float], final: Mapping[str, float], step: int) -> None:
        """The warm start's losses on an x-axis of their own (``parasim/sft/epoch``: W&B steps only increase, and
        they come after the run's last step) and the final evaluation in the run's summary."""
        run = self._open()
        loss = metric_name("loss", "sft")
        run.define_metric(SFT_EPOCH)
        run.define_metric(loss, step_metric=SFT_EPOCH)
        for epoch, value in enumerate(sft_losses, start=1):
            run.log({loss: float(value), SFT_EPOCH: epoch}, step=max(step, self._last) + epoch)
        self._set_last(max(step, self._last) + len(sft_losses))
        run.summary.update(dict(final))

    def _set_last(self, step: int) -> None:
        self._last = step
        (self._dir / "wandb_last_step").write_text(str(step))

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()


class MetricLoggers:
    """The chosen sinks of a run under ``out``: ``jsonl`` (``out/<name>.jsonl``), ``tensorboard``
    (``out/tensorboard``), ``wandb`` (``out/wandb``), for rows of kind ``record`` ("grpo" or "sft"). Only the
    main process of a distributed run logs."""

    def __init__(self, out: str | Path, name: str, kinds: Sequence[str] = ("jsonl",), *,
                 resume_step: int | None = None, config: Mapping[str, Any] | None = None,
                 enabled: bool = True, record: str = "grpo") -> None:
        unknown = sorted(set(kinds) - set(LOGGERS))
        if unknown:
            raise ValueError(f"loggers = {list(kinds)!r}: unknown {unknown}; allowed: {', '.join(LOGGERS)}")
        _check_record(record)
        self.sinks: list[MetricLogger] = []
        self._final_marker = Path(out) / f"{name}.final_logged"
        if not enabled:
            return
        out = Path(out)
        if resume_step is None:  # a fresh run: an earlier run's final block is not this one's
            self._final_marker.unlink(missing_ok=True)
        # a rerun of a finished run purges nothing: its final block (the warm start's epochs may lie past the last
        # step) is there for good, and the run has no step left to redo
        finished = resume_step is not None and self._final_marker.exists()
        for kind in dict.fromkeys(kinds):
            if kind == "jsonl":
                self.sinks.append(JsonlLogger(out / f"{name}.jsonl", resume_step))
            elif kind == "tensorboard":
                self.sinks.append(TensorBoardLogger(out / "tensorboard", None if finished else resume_step, record))
            else:
                self.sinks.append(WandbLogger(out / "wandb", name, config, record))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def log_final(self, sft_losses: Sequence[float], final: Mapping[str, float], step: int) -> None:
        """The run's warm-start losses (one per SFT epoch) and its final evaluation (``final_metrics``), after its
        last step ``step``; once per run: a rerun of a finished run logs nothing more."""
        if not self.sinks or self._final_marker.exists():
            return
        for sink in self.sinks:
            sink.log_final(sft_losses, final, step)
        self._final_marker.write_text("")

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
