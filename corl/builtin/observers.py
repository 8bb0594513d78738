"""Built-in observers: console progress and table, metrics.jsonl, tensorboard, final checkpoints.

Each is a small class built per run and registered on the run's plugin manager, so it receives
the ``corl_on_*`` hooks like any third-party observer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from corl import logs
from corl.atomic import write_together
from corl.context import Context, RegistryView
from corl.hookspecs import hookimpl
from corl.types import NoConfig


def _agent_scalars(metrics) -> dict[str, dict[str, float]]:
    return {name: dict(values) for name, values in metrics.agents.items()}


class ConsoleObserver:
    """Training progress and a before/after table at the end: a rich bar on a terminal, else a
    logged line every 5% of the steps (or every minute) with each agent's reward mean and the ETA
    (:class:`corl.logs.Progress`)."""

    def __init__(self, config=None, ctx: Context | None = None):
        self.progress = None
        self.log = logs.get("progress")

    @hookimpl
    def corl_on_run_start(self, run):
        self.progress = logs.Progress(f"co-rl {run.spec.run.name}", run.spec.run.steps,
                                      completed=run.start_step, percent=5, log=self.log)

    @hookimpl
    def corl_on_step_end(self, run, step, metrics):
        info = "  ".join(f"{n}: r={m['reward_mean']:.2f}" if "reward_mean" in m else f"{n}: r=n/a"
                         for n, m in metrics.agents.items())
        self.progress.advance(info=info)

    @hookimpl
    def corl_on_eval_end(self, run, step, results):
        text = "  ".join(f"{n} pass@1={r['pass@1']:.3f}" for n, r in results.items())
        self.log.info(f"eval step {step}: {text}")
        if self.progress is not None and self.progress.done == self.progress.start_done:
            self.progress.restart_clock()  # the evaluation before the first step is no step time (the ETA)

    @hookimpl
    def corl_on_run_failed(self, run, error):
        if self.progress is not None:
            self.progress.close()

    @hookimpl
    def corl_on_run_end(self, run, summary):
        from rich.table import Table

        if self.progress is not None:
            self.progress.close()
        if not any(summary["agents"].values()):
            return
        k = summary["eval_k"]
        cols = ["greedy", "pass@1", f"maj@{k}"]
        table = Table(title=f"{summary['name']}: held-out accuracy before -> after {summary['steps']} steps "
                            f"({summary['eval_prompts']} prompts, k={k}, {summary['seconds']:.0f}s)")
        table.add_column("agent")
        for c in cols:
            table.add_column(c, justify="right")
        table.add_column("best pass@1", justify="right")
        for name, s in summary["agents"].items():
            cells = [f"{s['before'][c]:.3f} -> {s['after'][c]:.3f} ({100 * (s['after'][c] - s['before'][c]):+.1f}"
                     f"{_noise(s) if c == 'pass@1' else ''})" for c in cols]
            table.add_row(name, *cells, f"{s['best']['pass@1']:.3f} @{s['best_step']}")
        table.caption = "changes in points; pass@1's ± is the evaluation's standard error of the change (sampling)"
        from rich.console import Console

        Console(width=max(120, shutil.get_terminal_size().columns)).print(table)  # the result goes to stdout
        print(f"outputs: {run.output_dir}")


def _noise(scores) -> str:
    """`` ± se`` of an agent's pass@1 change, in points (the two evaluations' sampling standard errors
    combined as if independent; with common random numbers they are not, so this is conservative)."""
    se = [scores[when].get("pass@1_se") for when in ("before", "after")]
    return "" if None in se else f" ± {100 * (se[0] ** 2 + se[1] ** 2) ** 0.5:.1f}"


class JsonlObserver:
    """One JSON line per training step and per evaluation in ``metrics.jsonl``; the logged
    completions (``run.log_completions`` per agent) one per line in ``samples.jsonl``."""

    def __init__(self, config=None, ctx: Context | None = None):
        self.file = self.samples = None

    @hookimpl
    def corl_on_run_start(self, run):
        # resumed: only what the checkpoint covers (its steps, its evaluations), never a torn last line
        def covered(record):
            if record.get("kind") == "eval":
                return record.get("step") in run.evals
            return record.get("step", 0) <= run.start_step

        self.file = logs.reopen_jsonl(run.output_dir / "metrics.jsonl", run.start_step, covered)
        self.samples = logs.reopen_jsonl(run.output_dir / "samples.jsonl", run.start_step, covered)

    def _write(self, record, file=None):
        file = file or self.file
        file.write(json.dumps(record) + "\n")
        file.flush()

    @hookimpl
    def corl_on_step_end(self, run, step, metrics, outcome):
        self._write({"kind": "train", "step": step, "seconds": metrics.seconds, "agents": _agent_scalars(metrics)})
        for sample in outcome.samples:
            self._write(sample.to_json(), self.samples)

    @hookimpl
    def corl_on_eval_end(self, run, step, results, cohort, samples):
        self._write({"kind": "eval", "step": step, "agents": results, "cohort": cohort})
        for sample in samples:
            self._write(sample.to_json(), self.samples)

    @hookimpl
    def corl_on_run_end(self, run, summary):
        self.file.close()
        self.samples.close()

    @hookimpl
    def corl_on_run_failed(self, run, error):
        for file in (self.file, self.samples):
            if file is not None:
                file.close()


class TensorboardObserver:
    """Scalars per agent per step under ``output_dir/tensorboard`` (``train/<agent>/<metric>``)."""

    def __init__(self, config=None, ctx: Context | None = None):
        self.writer = None

    @hookimpl
    def corl_on_run_start(self, run):
        from torch.utils.tensorboard import SummaryWriter

        # On resume, purge_step hides events the checkpoint does not cover.
        self.writer = SummaryWriter(log_dir=str(run.output_dir / "tensorboard"),
                                    purge_step=run.start_step + 1 if run.start_step else None)

    @hookimpl
    def corl_on_step_end(self, run, step, metrics, outcome):
        for key, value in logs.step_scalars(metrics).items():
            self.writer.add_scalar(key, value, step)
        self._text("train", outcome.samples, step)

    @hookimpl
    def corl_on_eval_end(self, run, step, results, cohort, samples):
        for key, value in logs.eval_scalars(results, cohort).items():
            self.writer.add_scalar(key, value, step)
        self._text("eval", samples, step)
        self.writer.flush()

    def _text(self, kind: str, samples, step: int) -> None:
        """The logged completions, a Markdown table per agent (tensorboard's TEXT tab)."""
        for agent, table in logs.samples_markdown(samples).items():
            self.writer.add_text(f"samples/{kind}/{agent}", table, step)

    @hookimpl
    def corl_on_run_end(self, run, summary):
        self.writer.close()

    @hookimpl
    def corl_on_run_failed(self, run, error):
        if self.writer is not None:
            self.writer.close()


class CheckpointObserver:
    """Final HF-format checkpoints, one folder per agent, written atomically.

    Runs on every rank (``every_rank``): every rank of an agent's group calls its ``save`` (a
    sharded agent gathers its weights), and the group's first rank writes the folder.
    """

    every_rank = True

    def __init__(self, config=None, ctx: Context | None = None):
        pass

    @hookimpl
    def corl_on_run_end(self, run, summary):
        def save_local(tmp: Path) -> None:
            for slot in run.agents:
                if run.layout.owns(slot.name):
                    slot.agent.save(str(tmp / slot.name))

        def save_shared(tmp: Path) -> None:
            (tmp / "summary.json").write_text(json.dumps(summary, indent=2))

        # readers see the old or the new export, never half of one
        write_together(Path(run.output_dir) / "checkpoints" / "final", run.layout, save_local, save_shared)


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    registry.add("observer", "console", ConsoleObserver, NoConfig, help="progress bar and before/after table")
    registry.add("observer", "jsonl", JsonlObserver, NoConfig, help="metrics.jsonl")
    registry.add("observer", "tensorboard", TensorboardObserver, NoConfig, help="tensorboard event files")
    registry.add("observer", "checkpoint", CheckpointObserver, NoConfig, help="final HF checkpoints per agent")
