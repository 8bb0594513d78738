"""``corl eval`` and ``corl cohort``: build a run's components (models loaded, nothing trained) and
score or compare its agents on the task.

Both are read-only inspections: they attach no observer (neither ``run.observers`` nor an
``[observers.NAME]`` table) and call no ``corl_on_*`` hook, so nothing is written into a run's
folder and no tracker run is opened or appended to. An observer sees a whole run's lifecycle or
nothing; an evaluation alone would be an ``eval_end`` without its ``run_start`` (a tracker with no
client), and its step would clash with the training run's history. ``--json`` is the output to
log (docs/how-to/data-and-evaluation.md shows how to add it to the run's W&B or MLflow run).
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs

from corl.errors import CorlError
from corl.recipe.locate import resolve

ADAPTER_CONFIG = "adapter_config.json"  # a peft adapter folder: the base is the recipe's, the adapters are loaded into it


def trained_folders(run_dir: Path, step: int | None) -> tuple[Path, int]:
    """Each agent's trained weights in a run dir (``checkpoints/final/`` or step ``step``'s
    ``agents/``) and the step they are of."""
    if step is None:  # (a run without the checkpoint observer has no final export: its agents as the recipe builds them)
        final = run_dir / "checkpoints" / "final"
        summary = next((f for f in (final / "summary.json", run_dir / "summary.json") if f.is_file()), None)
        facts = json.loads(summary.read_text()) if summary is not None else {}
        return final, facts.get("stopped_at") or facts.get("steps") or 0
    folder = run_dir / "checkpoints" / f"step-{step:06d}" / "agents"
    if not folder.is_dir():
        kept = sorted(int(p.name[5:]) for p in (run_dir / "checkpoints").glob("step-*") if p.name[5:].isdigit()) \
            if (run_dir / "checkpoints").is_dir() else []
        raise CorlError(f"--step {step}: {run_dir} holds no checkpoint of step {step}; kept: "
                        f"{', '.join(map(str, kept)) or 'none'} (run.keep_checkpoints keeps the newest)")
    return folder, step


def _build_for_inspection(args, extra: list[str], *, base: bool = False, step: int | None = None):
    """A Run whose components are built (models loaded, nothing trained) for eval / cohort / export,
    the step its agents' weights are of, and the adapter folders loaded (by agent). An agent's
    weights are replaced (a run dir's trained ones unless ``base``, or ``--model``) through the key
    its type declares for them (:class:`corl.traits.AgentTraits` ``model_key``); an adapter
    folder (LoRA) is loaded into the recipe's base model instead (``Agent.load_state``)."""
    from corl.plugins import make_plugin_manager, registry_of
    from corl.recipe.schema import DEFAULT_TYPES
    from corl.runtime import Run, prepare

    data, overrides, source = resolve(args.target, args.set)
    run_dir = Path(args.target) if Path(args.target).is_dir() else None
    if step is not None and run_dir is None:
        raise CorlError(f"--step {step}: give a run dir, not a recipe ({args.target})")
    if isinstance(data, str):
        from corl.recipe import read_toml

        data, source = read_toml(data), data
    pm = make_plugin_manager()
    registry = registry_of(pm)  # the run's own, built once

    def model_key(agent) -> str:
        kind = agent.get("type", DEFAULT_TYPES["agent"]) if isinstance(agent, dict) else None
        return registry.get("agent", kind).traits.model_key if registry.has("agent", kind) else ""

    adapters: dict[str, Path] = {}
    at = 0
    if args.model:  # evaluate exactly these models, set up like the first agent
        first = data["agents"][0]
        key = model_key(first)
        if not key:
            raise CorlError(f"--model: agent type {first.get('type', DEFAULT_TYPES['agent'])!r} names no model to "
                            "replace (it declares no model_key); evaluate the recipe's own agents")
        template = {k: v for k, v in first.items() if k not in ("name", key, "optimizer", "frozen", "lora")}
        models = [m.partition("=") for m in args.model]
        bad = [m for m, sep, path in models if not sep or not path]
        if bad:
            raise CorlError(f"--model {bad[0]!r}: expected NAME=PATH (a zoo: name or a model folder)")
        for name, _, path in models:  # a hub id is NAME or NAMESPACE/NAME: anything more is a folder
            local = path.startswith((".", "/", "~")) or path.count("/") > 1 or "\\" in path
            if ":" not in path and local and not Path(path).expanduser().is_dir():
                raise CorlError(f"--model {name}={path}: no such folder: {path}")
        data["agents"] = [{**template, "name": name, key: path} for name, _, path in models]
        # nothing trains here: a topology that names the recipe's agents (ring, judge) does not apply
        data["topology"] = {"type": "self"}
        data.setdefault("run", {})["supervised"] = False
    elif run_dir is not None and not base:
        trained, at = trained_folders(run_dir, step)
        checkpoint = trained if trained.name == "final" else trained.parent
        if checkpoint.is_dir():
            from corl import manifest

            manifest.verify(checkpoint)  # a flipped byte is named here, never evaluated
        for agent in data["agents"]:
            folder = trained / agent["name"]
            if not folder.is_dir():
                continue  # (a frozen agent's is its base)
            if (folder / ADAPTER_CONFIG).is_file():
                adapters[agent["name"]] = folder  # the recipe's base, these adapters on it
                continue
            # the trained weights, read by the same agent type (one whose type declares where it names them)
            key = model_key(agent)
            if key and (folder / "config.json").is_file():
                agent[key] = str(folder)
            elif key:
                raise CorlError(f"{folder}: neither a Hugging Face folder (config.json) nor an adapter folder "
                                f"({ADAPTER_CONFIG}): a sharded agent's checkpoint holds shards that only --resume "
                                "reads; evaluate its final export")
    data.pop("observers", None)  # [observers.NAME] tables: not attached here, so their plugins need not be installed
    # evaluation never calls a reward term (an import path's would need CORL_ALLOW_IMPORT_PATHS, a function
    # handed to corl.run is not registered here), and nothing is paid: run.peer_reward does not apply
    data.pop("shaping", None)
    if isinstance(data.get("run"), dict):
        data["run"].pop("peer_reward", None)
    pm, spec = prepare(data, [*overrides, "run.observers=[]", "run.steps=0", *extra], source=source, pm=pm)
    spec = attrs.evolve(spec, observers=())  # (a table added by --set is validated, then left out too)
    run = Run(spec, pm=pm)
    run.setup()
    for slot in run.agents:
        if slot.name in adapters:
            slot.agent.load_state(str(adapters[slot.name]))
    return run, at, {name: str(folder) for name, folder in adapters.items()}


def cmd_eval(args) -> int:
    if args.samples < 0:
        raise CorlError(f"--samples {args.samples}: must be 0 or more")
    extra = [f"eval.k={args.k}"] if args.k else []
    extra += [f"eval.size={args.size}"] if args.size is not None else []
    extra += [f"run.log_completions={args.samples}"]
    if args.step is not None and (args.base or args.model):
        raise CorlError(f"--step {args.step}: evaluates a run dir's step checkpoint; not with --base or --model")
    run, step, adapters = _build_for_inspection(args, extra, base=args.base, step=args.step)
    try:
        return _eval(run, args, step, adapters)
    finally:
        run.close()  # engine processes (a vllm sampler's) end with the command


def _eval(run, args, step: int, adapters: dict[str, str]) -> int:
    from corl.recipe import model_facts, to_dict

    ev = run.spec.eval
    resolved = {a["name"]: a for a in to_dict(run.spec)["agents"]}  # the recipe's tables, not the components
    agents = [a for a in run.spec.agents if a.name in {s.name for s in run.agents}]
    settings = {"prompts": len(run.eval_prompts), "k": ev.k, "temperature": ev.temperature,
                "greedy": "temperature 0 (argmax), 1 sample",
                "samplers": {a.name: resolved[a.name]["sampler"] for a in agents},  # each as its type's keys say
                "models": {a.name: adapters.get(a.name) or model_facts(run.registry, a).model or a.agent.type
                           for a in agents},
                "step": step}
    with run.verifier.armed():
        results = run.evaluate(step, notify=False)  # (the step labels the samples; the draw is the same at every step)
    cohort = run.cohorts.get(step)
    if args.json:
        from corl.runtime.samples import as_json

        extra = {"samples": as_json(run.eval_samples.get(step, ()))} if args.samples else {}
        print(json.dumps({"settings": settings, "results": results, "cohort": cohort, **extra}, indent=2))
        return 0
    print(f"{settings['prompts']} held-out prompts; pass@1 and maj@{ev.k} from {ev.k} samples at temperature "
          f"{ev.temperature}; greedy is argmax decoding")
    cols = ["greedy", "pass@1", f"maj@{ev.k}", f"pass@{ev.k}"]
    print(f"{'model':<16}" + "".join(f"{c:>10}" for c in cols) + "  source")
    for name, r in results.items():
        print(f"{name:<16}" + "".join(f"{r[c]:>10.3f}" for c in cols) + f"  {settings['models'][name]}")
    if cohort and len(cohort["agents"]) > 1:
        print()
        _print_matrices(cohort)
    return 0


def _print_matrices(cohort) -> None:
    names = cohort["agents"]
    titles = {"agreement": "greedy answers agree", "phi": "correctness correlation (phi)",
              "same_wrong": "P(same wrong answer | both wrong)"}
    for key, title in titles.items():
        matrix = cohort.get(key)
        if matrix is None:
            continue
        print(f"{title}:")
        print(" " * 16 + "".join(f"{n[:9]:>10}" for n in names))
        for n, row in zip(names, matrix):
            print(f"{n:<16}" + "".join(f"{'-' if v is None else format(v, '.2f'):>10}" for v in row))


def cmd_cohort(args) -> int:
    if args.prompts < 1:
        raise CorlError(f"--prompts {args.prompts}: must be at least 1")
    run, _, _ = _build_for_inspection(args, [])
    try:
        return _cohort(run, args)
    finally:
        run.close()


def _cohort(run, args) -> int:
    from corl.runtime.cohort import label_disagreement, rank_cohorts
    from corl.runtime.evaluation import votes_of

    if len(run.agents) < 2:
        raise CorlError("corl cohort needs at least two candidate agents in the recipe (or --model NAME=PATH twice)")
    prompts = run.train[: args.prompts]
    n = run.spec.voting.n_votes
    labels, strength = {}, []
    with run.verifier.armed():
        for slot in run.agents:
            rollout = slot.sampler.sample(slot.agent, prompts, n)
            votes = votes_of(rollout, run.verifier)
            pseudo = run.aggregator.own_labels(votes, run.verifier, slot.name)
            labels[slot.name] = [p.answer for p in pseudo]
            strength.append(sum(p.share for p in pseudo) / len(pseudo))
        names = list(labels)
        disagreement = label_disagreement(labels, run.verifier)
    ranked = rank_cohorts(disagreement, strength, names)
    if args.json:
        print(json.dumps({"prompts": len(prompts), "n_votes": n, "strength": dict(zip(names, strength)),
                          "disagreement": disagreement, "ranked": ranked}, indent=2))
        return 0
    print(f"label-free: {len(prompts)} unlabeled prompts, {n} samples each; strength = mean vote share of the "
          "agent's own majority; disagreement = how often two agents' pseudo-labels differ")
    print(" " * 16 + "".join(f"{x[:9]:>10}" for x in names) + "  strength")
    for name, row, st in zip(names, disagreement, strength):
        print(f"{name:<16}" + "".join(f"{v:>10.2f}" for v in row) + f"  {st:>8.2f}")
    print("\ncohorts, best first (score = mean disagreement x weakest strength):")
    for c in ranked[:10]:
        print(f"  {' + '.join(c['agents']):<40} score {c['score']:.3f}  disagreement {c['disagreement']:.2f}  "
              f"weakest {c['weakest_strength']:.2f}  -> topology {c['topology']}")
    best = ranked[0]
    print(f"suggested: {' + '.join(best['agents'])} with topology = \"{best['topology']}\""
          + ("" if best["disagreement"] >= 0.05 else " (but they rarely disagree: little for peers to correct)"))
    return 0
