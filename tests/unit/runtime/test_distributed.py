"""Agents across processes: a 3-rank run equals the single-process run; a dead rank stops the
run with one message and the run resumes; placement and sharding rules."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from corl.errors import ConfigError, CorlError
from corl.recipe import load_recipe
from corl.runtime import distributed
from corl.testing import outcome
from tests.kit import ROOT, TINY, base_recipe

RECIPE = ROOT / "recipes" / "three_agent_ring.toml"
# Threads change float results: one per process in both layouts.
SETTINGS = [*TINY, "run.steps=4", "run.threads=1", "run.checkpoint_every=2", "eval.every=2",
            "run.observers=['jsonl', 'checkpoint']"]
NAMES = ("llama", "qwen2", "neox")


def launch(out, *extra, ranks=1, fault=""):
    args = [x for item in [*SETTINGS, f"run.output_dir={out}"] for x in ("--set", item)]
    corl = ["-m", "corl.cli", "run", str(RECIPE), *args, *extra]
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"] if ranks > 1 else []
    env = {**os.environ, "CORL_FAULT": fault}
    return subprocess.run([sys.executable, *torchrun, *corl], capture_output=True, text=True, env=env, timeout=600)


def assert_same(run, reference):
    (summary, records, weights), (ref_summary, ref_records, ref_weights) = run, reference
    assert [r["step"] for r in records] == [r["step"] for r in ref_records]
    for rec, ref in zip(records, ref_records):
        assert rec == ref, f"{rec['kind']} record of step {rec['step']} differs"
    assert summary == ref_summary
    for name in NAMES:
        assert all((weights[name][k] == ref_weights[name][k]).all() for k in ref_weights[name]), name


@pytest.fixture(scope="module")
def single(tmp_path_factory, cache_dir):
    out = tmp_path_factory.mktemp("single")
    res = launch(out)
    assert res.returncode == 0, res.stderr[-3000:]
    return outcome(out)


def test_three_ranks_give_the_single_process_run(single, tmp_path):
    res = launch(tmp_path, ranks=3)
    assert res.returncode == 0, res.stderr[-3000:]
    run = outcome(tmp_path)
    # pseudo-labels (label_share, label_accuracy), rewards and every other metric, step by step
    first_step = next(r for r in run[1] if r["kind"] == "train")
    assert {"reward_mean", "label_share", "label_accuracy", "grad_norm"} <= set(first_step["agents"]["llama"])
    assert_same(run, single)
    assert not (tmp_path / "tensorboard").exists()  # observers report from rank 0 only; none asked here


def test_a_dead_rank_stops_the_run_and_it_resumes_from_the_last_checkpoint(single, tmp_path):
    died = launch(tmp_path, ranks=3, fault="step:3@2")  # rank 2 (neox) is SIGKILLed after step 3
    assert died.returncode != 0
    lines = [x for x in died.stderr.splitlines() if x.startswith("corl: error:")]
    assert lines and all("another rank died or did not answer" in x for x in lines), died.stderr[-3000:]
    # the survivors stop at their next exchange, the end-of-step check after step 3, and say so at once
    # (torchrun terminates them right after)
    assert any(re.match(r"corl: error: rank [01]: step 3: checking for signals: another rank died", x) for x in lines)
    assert "step-000002" in lines[0] and "--resume" in lines[0]
    # no traceback out of corl (torchrun prints its own failure report, and its own frames)
    assert not any(x.strip().startswith('File "') and "/corl/" in x for x in died.stderr.splitlines())
    resumed = launch(tmp_path, "--resume", ranks=3)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr and "step-000002" in resumed.stderr
    assert_same(outcome(tmp_path), single)  # killed and resumed ends like the uninterrupted run


HUNG = textwrap.dedent("""
    import os, sys, time
    from corl.runtime import distributed
    from corl.errors import CorlError
    from corl.recipe import load_recipe
    spec = load_recipe({"agents": [{"name": "a", "model": "zoo:llama-tiny"}, {"name": "b", "model": "zoo:qwen2-tiny"}],
                        "topology": {"type": "ring"}}, ["run.collective_timeout=2"])
    layout = distributed.layout_for(spec)
    print(layout.gather({spec.agents[layout.rank].name: layout.rank}, "first"), flush=True)
    if layout.rank == 1:
        time.sleep(30)  # alive, but never comes to the next exchange
        sys.exit(0)
    started = time.time()
    try:
        layout.gather({"a": 0}, "step 1: exchanging votes")
    except CorlError as exc:
        print(f"{time.time() - started:.1f}s", exc, flush=True)
        os._exit(3)
""")


def test_a_rank_that_stops_answering_times_out_with_a_message(tmp_path):
    script = tmp_path / "hung.py"
    script.write_text(HUNG)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2",
           "PYTHONPATH": str(ROOT), "CORL_DISABLE_PLUGIN_AUTOLOAD": "1"}
    procs = [subprocess.Popen([sys.executable, str(script)], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    out, err = procs[0].communicate(timeout=60)
    procs[1].kill()
    procs[1].communicate()
    assert procs[0].returncode == 3, err[-2000:]
    assert "{'a': [0], 'b': [1]}" in out
    waited, _, message = out.splitlines()[-1].partition(" ")
    assert 1.5 < float(waited[:-1]) < 20
    assert message.startswith("rank 0: step 1: exchanging votes: another rank died or did not answer within 2s "
                              "(run.collective_timeout)")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- placement, sharding and the recipe keys ------------------------------------------------------


def spec(*ranks, agents=3):
    data = {**base_recipe(), "agents": [{"name": f"a{i}", "model": "zoo:llama-tiny"} for i in range(agents)]}
    for agent, r in zip(data["agents"], ranks):
        agent["ranks"] = list(r)
    return load_recipe(data)


def test_placement_defaults_to_equal_blocks_and_follows_the_recipe():
    assert distributed.placement(spec(), 1) == {"a0": [0], "a1": [0], "a2": [0]}
    assert distributed.placement(spec(), 3) == {"a0": [0], "a1": [1], "a2": [2]}
    assert distributed.placement(spec(), 6) == {"a0": [0, 1], "a1": [2, 3], "a2": [4, 5]}
    # two agents share rank 0, the third is data-parallel on two ranks
    assert distributed.placement(spec([0], [0], [1, 2]), 3) == {"a0": [0], "a1": [0], "a2": [1, 2]}


def test_placement_errors_name_the_key():
    with pytest.raises(CorlError, match=r"4 processes for 3 agents: say which agent runs on which ranks with agents\[i\].ranks"):
        distributed.placement(spec(), 4)
    with pytest.raises(CorlError, match=r"agents\[2\].ranks: rank 3 does not exist; this run has 3 ranks \(0-2\)"):
        distributed.placement(spec([0], [1], [3]), 3)
    with pytest.raises(CorlError, match="rank 2 serves no agent"):
        distributed.placement(spec([0], [1], [1]), 3)


def test_ranks_are_validated_with_key_paths():
    with pytest.raises(ConfigError) as info:
        spec([0], [-1], [1, 1])
    assert "agents[1].ranks: invalid rank -1: ranks are >= 0" in str(info.value)
    assert "agents[2].ranks: invalid value [1, 1]: a rank is listed twice" in str(info.value)
    with pytest.raises(ConfigError, match=r"agents\[1\].ranks: missing; agents\[0\] names its ranks, so every agent must"):
        spec([0], agents=2)


def test_shards_cover_the_prompts_in_order():
    layout = distributed.Local(spec())
    layout.members["a0"] = [0, 1, 2]
    pieces = []
    for rank in range(3):
        layout.rank = rank
        pieces.append(layout.shard("a0", list(range(8))))
    assert pieces == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert distributed.merge_shards(pieces) == list(range(8))


def test_one_process_ignores_ranks_and_holds_every_agent():
    layout = distributed.layout_for(spec([0], [1], [2]), env={})
    assert isinstance(layout, distributed.Local)
    assert all(layout.owns(n) and layout.leads(n) for n in ("a0", "a1", "a2"))
    assert layout.gather({"a0": 1, "a1": 2, "a2": 3}, "x") == {"a0": [1], "a1": [2], "a2": [3]}


GROUP = textwrap.dedent("""
    import torch
    from torch.distributed.tensor import Shard, distribute_tensor
    from corl.runtime import distributed
    from corl.recipe import load_recipe
    spec = load_recipe({"agents": [{"name": "a", "model": "zoo:llama-tiny", "ranks": [0, 1]},
                                   {"name": "b", "model": "zoo:qwen2-tiny", "ranks": [1]}],
                        "topology": {"type": "ring"}}, ["run.collective_timeout=30"])
    layout = distributed.layout_for(spec)
    group = layout.group("a")
    # the group's device mesh carries DTensor collectives on the standalone group (no default group)
    mesh = group.mesh("cpu")
    whole = torch.arange(6.0).reshape(3, 2)
    sharded = distribute_tensor(whole, mesh, [Shard(0)], src_data_rank=None)
    print(layout.rank, group.rank, group.size, group.sum([1, layout.rank]), group.max([layout.rank, -layout.rank]),
          sharded.to_local().tolist(), torch.equal(sharded.full_tensor(), whole), layout.owns("b"), layout.group("b").size,
          layout.shard("a", list(range(5))), flush=True)
    layout.close()  # as a run does: meet, then tear the groups and the store down in order
""")


def test_an_agents_group_sums_and_shards_over_its_ranks(tmp_path):
    script = tmp_path / "group.py"
    script.write_text(GROUP)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2",
           "PYTHONPATH": str(ROOT), "CORL_DISABLE_PLUGIN_AUTOLOAD": "1"}
    procs = [subprocess.Popen([sys.executable, str(script)], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    lines = sorted(out.strip().splitlines()[-1] for out, _ in outs)
    assert lines[0] == "0 0 2 [2.0, 1.0] [1.0, 0.0] [[0.0, 1.0], [2.0, 3.0]] True False 1 [0, 1, 2]"
    assert lines[1] == "1 1 2 [2.0, 1.0] [1.0, 0.0] [[4.0, 5.0]] True True 1 [3, 4]"


@pytest.mark.slow
def test_a_data_parallel_agent_trains_on_two_ranks(tmp_path, cache_dir):
    """Agent a on ranks 0 and 1 (sharded, two minibatches a step), b beside it on rank 1: the run
    trains, checkpoints each rank's shard and exports from each agent's first rank."""
    recipe = tmp_path / "dp.toml"
    recipe.write_text(textwrap.dedent("""
        [run]
        name = "dp"
        [[agents]]
        name = "a"
        model = "zoo:llama-tiny"
        ranks = [0, 1]
        optimizer = { type = "grpo", lr = 1e-3, minibatches = 2 }
        [[agents]]
        name = "b"
        model = "zoo:gpt-neox-tiny"
        ranks = [1]
        [topology]
        type = "ring"
    """))
    out = tmp_path / "run"
    args = [x for item in [*TINY, "run.threads=1", "run.observers=['jsonl', 'checkpoint']", "run.checkpoint_every=2",
                           f"run.output_dir={out}"] for x in ("--set", item)]
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          "-m", "corl.cli", "run", str(recipe), *args], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    train = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"train"' in x]
    assert [r["step"] for r in train] == [1, 2]
    assert all(0 <= r["agents"]["a"]["active_fraction"] <= 1 and r["agents"]["a"]["nonfinite"] == 0 for r in train)
    assert (out / "checkpoints" / "step-000002" / "optimizers" / "a" / "optimizer.rank001.pt").exists()
    final = out / "checkpoints" / "final"
    assert {p.name for p in final.iterdir()} == {"a", "b", "manifest.json", "summary.json"}


def test_both_layouts_keep_the_layout_protocol_without_one_inheriting_the_other():
    import inspect

    assert not issubclass(distributed.Distributed, distributed.Local)
    wanted = {name for name, _ in inspect.getmembers(distributed.Layout, inspect.isfunction) if not name.startswith("_")}
    assert {"owns", "shard", "collective", "gather", "share", "everyone", "barrier", "close"} <= wanted
    for cls in (distributed.Local, distributed.Distributed):
        assert all(callable(getattr(cls, name, None)) for name in wanted), cls
    layout = distributed.Local(spec())
    assert not layout.collective("a0")
    layout.members["a0"] = [0, 1]
    assert layout.collective("a0")  # sharded: every rank of its group runs each pass
