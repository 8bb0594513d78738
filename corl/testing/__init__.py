"""A test kit for plugin authors, as pytest's ``pytester`` and tox's ``tox_project`` serve theirs;
corl's own tests use it too.

In a ``conftest.py``: ``pytest_plugins = ["corl.testing"]``. Then:

* :func:`run_tiny` / the ``corl_run`` fixture: a real run of a few steps in a temp folder, with your
  plugin objects registered for that run only (inline plugins), on :class:`FakePlugin`'s agents;
* :class:`FakePlugin`: a ``fake`` agent, sampler and optimizer, a tabular softmax policy per prompt
  over its right answer and a few wrong ones, updated by REINFORCE. No model, milliseconds a
  step, deterministic under the run's seed: routers, aggregators and observers can be tested
  against a policy that really learns from their rewards; it answers in your task's alphabet when
  told it (a ``vocabulary``, or ``FakePlugin(answers=...)``), in one token or several (``tokens``);
* :func:`context`: a ``Context`` for calling a factory by hand (its ``ctx.build`` builds registered
  components, for a wrapper under test); :func:`tiny_agent`: a real tiny agent of a type that declares
  a ``tiny`` setup and the context a sampler for it is built with (for ``conformance.check_sampler``);
* :func:`run_view`: the run an observer's hooks are handed (:class:`corl.context.RunView`), for
  calling them by hand, with the stops it asks for recorded; :class:`ToyAgent`: an agent whose token
  log-probs are its own parameters (an optimizer's exact gradients; a state to save and restore);
* :func:`interrupt_and_resume`: a run straight and the same run stopped after a checkpoint and
  resumed, both outcomes (``conformance.check_resume`` asserts they are equal);
* :func:`install_plugin` / the ``installed_plugin`` fixture: a plugin *distribution* made from
  source text and found through entry points, as ``pip install`` would, so that loading,
  allow-lists and broken packages can be tested (the ``broken_plugin`` fixture is one whose
  import fails);
* :func:`fails_naming`: the block must fail the way a user should see your plugin fail, one line
  (a :class:`corl.PluginError`, exit status 2) that names it;
* :func:`fake_recipe`: a recipe of fake agents, changed at any key path; :func:`write_recipe`: a
  recipe table as a TOML file, for ``corl run FILE``;
* :func:`outcome`: a finished run's summary, metrics and final weights without timings, to compare
  two runs exactly.

Testing your plugin's failure paths (a ``tests/test_failures.py`` of a plugin package)::

    import corl
    from corl.testing import fails_naming, fake_recipe, run_tiny

    class Shouty:  # a router that breaks the contract: one reward per prompt, not per sample
        def route(self, votes, labels, verifier, aggregator, truth=None):
            return {name: [[1.0] for _ in rows] for name, rows in votes.items()}

    class MyPlugin:
        @corl.hookimpl
        def corl_register_components(self, registry):
            registry.add("router", "shouty", lambda config, ctx: Shouty(), corl.NoConfig)

    def test_a_broken_router_is_named(tmp_path):
        with fails_naming("router 'shouty'") as failure:
            run_tiny(tmp_path, fake_recipe(**{"topology.type": "shouty"}), plugins=[MyPlugin()])
        assert "expected one per sample" in str(failure.error)

    def test_a_plugin_that_fails_to_import_is_skipped_and_named(broken_plugin):
        from corl.plugins import build_registry, make_plugin_manager

        registry = build_registry(make_plugin_manager())  # every other plugin still loads
        assert "ImportError" in registry.failed["corl_broken_example"]
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from corl.context import Context, StopToken
from corl.plugins import make_plugin_manager, registry_of
from corl.recipe.schema import RunSection
from corl.testing.dists import BROKEN_PLUGIN, install_plugin, uninstall_plugin
from corl.testing.fakes import FakeAgent, FakeAgentConfig, FakeOptimizer, FakeOptimizerConfig, FakePlugin, FakeSampler
from corl.testing.toys import ToyAgent, ToyAgentView, ToyRunView, run_view


def fake_recipe(agents: int = 3, **changes: Any) -> dict[str, Any]:
    """A recipe of ``agents`` fake agents on the arithmetic task in a ring; ``changes`` are
    ``--set``-style key paths with any value a recipe holds, tables included
    (``fake_recipe(**{"run.steps": 5, "task": {"type": "countdown", "size": 3},
    "agents[0].sampler": {"type": "scheduled"}})``): a table replaces the one at its key."""
    from corl.recipe import apply_overrides

    data = {
        "run": {"name": "tiny", "steps": 3, "prompts_per_step": 8, "observers": ["jsonl"], "threads": 1},
        "task": {"type": "arithmetic", "seed_size": 0, "train_size": 64, "eval_size": 32},
        "agents": [{"name": f"fake{i}", "type": "fake", "accuracy": 0.4 + 0.1 * i, "optimizer": {"type": "fake"}}
                   for i in range(agents)],
        "voting": {"n_votes": 8, "n_train": 8},
        "topology": {"type": "ring" if agents > 1 else "self"},
        "eval": {"size": 32, "k": 4},
    }
    return apply_overrides(data, [f"{k}={_toml(v)}" for k, v in changes.items()])


def write_recipe(path: str | Path, recipe: Mapping[str, Any]) -> Path:
    """``recipe`` (a table, e.g. :func:`fake_recipe`) as a TOML file at ``path``, for ``corl run FILE``
    in a subprocess; returns the path."""
    lines: list[str] = []
    for key, value in recipe.items():
        if isinstance(value, Mapping):
            lines += [f"[{key}]", *(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()), ""]
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Mapping) for v in value):
            for table in value:
                lines += [f"[[{key}]]", *(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in table.items()), ""]
        else:
            lines.insert(0, f"{json.dumps(str(key))} = {_toml(value)}")  # before the first table header
    Path(path).write_text("\n".join(lines))
    return Path(path)


def _toml(value: Any) -> str:
    """``value`` as a TOML value (inline tables and arrays of them included)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def run_tiny(output_dir: str | Path, recipe: Mapping[str, Any] | str | Path | None = None,
             overrides: Sequence[str] = (), plugins: Sequence[Any] = (), *, resume: bool = False,
             force: bool = False, autoload: bool = False, **components: Any) -> dict[str, Any]:
    """Run ``recipe`` (default :func:`fake_recipe`) into ``output_dir`` with ``plugins`` registered for
    this run only (and :class:`FakePlugin`, unless ``plugins`` holds one); returns the summary. ``resume`` and ``force`` are
    ``corl run``'s ``--resume`` and ``--force``.

    Only the built-ins and ``plugins`` are loaded: installed entry-point plugins are not
    (``autoload=True`` loads them too), so a plugin's tests run the same whether or not the plugin
    itself is installed, and its inline objects never collide with its installed copy."""
    from corl.runtime import run

    recipe = fake_recipe() if recipe is None else recipe
    return run(recipe, [*overrides, f"run.output_dir={json.dumps(str(output_dir))}"],
               plugins=_with_fakes(plugins), resume=resume, force=force, autoload=autoload, **components)


def _with_fakes(plugins: Sequence[Any]) -> list[Any]:
    """``plugins`` and the kit's :class:`FakePlugin`, unless they hold one (with its own alphabet)."""
    return [*([] if any(isinstance(p, FakePlugin) for p in plugins) else [FakePlugin()]), *plugins]


def interrupt_and_resume(output_dir: str | Path, recipe: Mapping[str, Any] | str | Path | None = None,
                         overrides: Sequence[str] = (), plugins: Sequence[Any] = (), *, at: int = 2,
                         **components: Any) -> tuple[Any, Any]:
    """The resume test every stateful component needs, in one call: run ``recipe`` straight through
    into ``output_dir/straight``; run it again into ``output_dir/resumed``, checkpointing every
    ``at`` steps (``run.checkpoint_every``) and failing during step ``at + 1``, after the checkpoint
    of step ``at``; resume that one from the checkpoint (a new run, new component objects, state from
    the checkpoint only). Returns both runs' :func:`outcome`: equal when every component's state
    survived the checkpoint. ``recipe`` needs ``run.steps > at``."""
    from corl.errors import PluginError
    from corl.hookspecs import hookimpl

    class _Interrupt:
        @hookimpl
        def corl_on_step_end(self, step):
            if step == at + 1:
                raise RuntimeError(f"interrupted in step {at + 1} by corl.testing.interrupt_and_resume")

    out, overrides = Path(output_dir), [*overrides, f"run.checkpoint_every={at}"]
    run_tiny(out / "straight", recipe, overrides, plugins, **components)
    try:
        run_tiny(out / "resumed", recipe, overrides, [*plugins, _Interrupt()], **components)
    except PluginError as exc:
        if "interrupted in step" not in str(exc):
            raise
    else:
        raise AssertionError(f"the run of {out / 'resumed'} was never interrupted: does it have more than {at} steps?")
    run_tiny(out / "resumed", recipe, overrides, plugins, resume=True, **components)
    return outcome(out / "straight"), outcome(out / "resumed")


@attrs.define
class Failure:
    """What :func:`fails_naming` caught: ``error`` (a :class:`corl.PluginError`)."""

    error: Any = None


@contextlib.contextmanager
def fails_naming(plugin: str) -> Iterator[Failure]:
    """``with fails_naming("corl-my-plugin") as failure: run_tiny(...)``: the block must raise a corl
    error (:class:`corl.CorlError`: a ``PluginError``, a ``ConfigError``, a ``TrainingError``) whose
    message is one line naming ``plugin`` (any text the message should hold: the distribution users
    install, ``"router 'shouty'"``); ``failure.error`` is that error. Any other exception propagates
    as it is, so a raw traceback from your plugin shows as one."""
    from corl.errors import CorlError

    failure = Failure()
    try:
        yield failure
    except CorlError as exc:
        message = str(exc)
        if plugin not in message:
            raise AssertionError(f"the {type(exc).__name__} does not name {plugin!r}: {message}") from exc
        if "\n" in message:
            raise AssertionError(f"the {type(exc).__name__} is not one line: {message!r}") from exc
        failure.error = exc
        return
    raise AssertionError(f"no corl error naming {plugin!r} was raised")


def context(*, agent_name: str = "a", task: Any = None, agent: Any = None, seed: int = 0,
            sections: Mapping[str, Any] | None = None, log: Any = None, group: Any = None,
            stop: StopToken | None = None, plugins: Sequence[Any] = ()) -> Context:
    """A :class:`~corl.context.Context` for calling a component factory by hand, with plugin
    sections (e.g. ``{"zoo": ZooConfig(steps=5)}``) where a component reads them. ``group``: the
    agent's ranks; by default one rank, as a one-process run gives it (a device mesh included).
    ``stop``: the run's stop token the component polls (:func:`corl.testing.conformance.check_stop`).
    ``ctx.build(kind, name, config)`` builds the built-ins, the kit's fakes and the components of
    ``plugins`` (a wrapper under test builds what it wraps, as in a run)."""
    from corl.runtime.build import Builder
    from corl.runtime.distributed import LOCAL_GROUP

    def build(kind: str, name: str, config: Any, ctx: Context) -> Any:  # the registry made on first use
        registry = registry_of(make_plugin_manager(_with_fakes(plugins), autoload=False))
        return Builder(registry).nested("the component under test")(kind, name, config, ctx)

    spec = _SpecStub(dict(sections or {}))
    return Context(spec=spec, seed=seed, log=log or (lambda message: None), task=task, agent=agent,
                   agent_name=agent_name, group=LOCAL_GROUP if group is None else group, stop=stop or StopToken(),
                   builder=build)


def tiny_agent(task: Any = None, *, agent_type: str | None = None, model: str | None = None, warm_steps: int = 5,
               name: str = "a", plugins: Sequence[Any] = ()) -> tuple[Any, Context]:
    """A real tiny agent and the context a sampler for it is built with (``ctx.agent`` set), seconds on
    a CPU: the agent type ``agent_type`` (default: the first, by name, whose factory declares a ``tiny``
    setup, :class:`corl.traits.TinySetup`; the built-in ``hf`` agent on a zoo model does),
    warm-started ``warm_steps`` steps on ``task``'s seed split (default: the task of its tiny setup);
    ``model`` replaces what it loads (its ``model_key``). For :func:`corl.testing.conformance.check_sampler`
    on your sampler, or on one that wraps the agent's own: ``agent, ctx = tiny_agent(); check_sampler(agent,
    MySampler(config, ctx), prompts)``."""
    registry = registry_of(make_plugin_manager(_with_fakes(plugins), autoload=False))
    tiny = [n for n in registry.names("agent") if registry.get("agent", n).traits.tiny is not None]
    if agent_type is None and not tiny:
        raise LookupError("no registered agent type declares a tiny setup (corl.traits.AgentTraits.tiny)")
    agent_type = agent_type or tiny[0]
    declared = registry.get("agent", agent_type).traits
    if declared.tiny is None:
        raise LookupError(f"agent type {agent_type!r} declares no tiny setup; these do: {', '.join(tiny) or 'none'}")
    setup = declared.tiny(warm_steps)
    table = {**setup.agent, **({declared.model_key: model} if model is not None else {})}
    ctx = context(agent_name=name, plugins=plugins)
    if task is None:
        task = ctx.build("task", setup.task["type"], {k: v for k, v in setup.task.items() if k != "type"})
    sections = {s.name: s.config_cls() for s in registry.sections()}  # every plugin section at its defaults
    ctx = context(agent_name=name, task=task, sections=sections, plugins=plugins)
    agent = ctx.build("agent", agent_type, table)
    return agent, attrs.evolve(ctx, agent=agent)


@attrs.frozen
class _SpecStub:
    """A :class:`corl.context.SpecView` for a context built by hand: a recipe's default ``[run]``
    settings, no agents, the given plugin sections."""

    sections: dict[str, Any]
    run: RunSection = attrs.field(factory=RunSection)
    agents: tuple[Any, ...] = ()
    source: str = "<recipe>"


def outcome(out: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """A finished run's summary, metrics records and final weights, without wall-clock timings."""
    from safetensors.torch import load_file

    out = Path(out)
    summary = json.loads((out / "summary.json").read_text())
    summary.pop("seconds")
    records = []
    for line in (out / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        rec.pop("seconds", None)
        for m in rec["agents"].values():
            for key in [k for k in m if k.startswith("time/")]:
                del m[key]
        records.append(rec)
    final = out / "checkpoints" / "final"
    weights = {p.name: load_file(p / "model.safetensors") for p in sorted(final.iterdir())
               if (p / "model.safetensors").exists()} if final.is_dir() else {}
    return summary, records, weights


try:  # fixtures, when pytest is there (`pytest_plugins = ["corl.testing"]`)
    import pytest
except ImportError:  # pragma: no cover - the kit's functions work without pytest
    pytest = None

if pytest is not None:

    @pytest.fixture
    def corl_run(tmp_path):
        """``corl_run(recipe=None, overrides=(), plugins=(), **components)``: :func:`run_tiny` into a
        fresh temp folder; returns ``(summary, output_dir)``."""
        count = iter(range(1_000_000))

        def go(recipe=None, overrides=(), plugins=(), **components):
            out = tmp_path / f"run{next(count)}"
            return run_tiny(out, recipe, overrides, plugins, **components), out

        return go

    @pytest.fixture
    def installed_plugin(tmp_path):
        """``installed_plugin(name, source, entry_point=None)``: a plugin distribution for this test only."""
        roots = []

        def install(name, source, entry_point=None, version="0.1.0"):
            root = install_plugin(tmp_path / f"site-{len(roots)}", name, source, entry_point=entry_point,
                                  version=version)
            roots.append(root)
            return root

        yield install
        for root in roots:
            uninstall_plugin(root)

    @pytest.fixture
    def broken_plugin(installed_plugin):
        """An installed plugin distribution, ``corl-broken-example``, whose import fails."""
        return installed_plugin("corl-broken-example", BROKEN_PLUGIN)


__all__ = [
    "BROKEN_PLUGIN", "FakeAgent", "FakeAgentConfig", "FakeOptimizer", "FakeOptimizerConfig", "FakePlugin", "FakeSampler",
    "Failure", "ToyAgent", "ToyAgentView", "ToyRunView", "context", "fails_naming", "fake_recipe", "install_plugin",
    "interrupt_and_resume", "outcome", "run_tiny", "run_view", "tiny_agent", "uninstall_plugin", "write_recipe",
]
