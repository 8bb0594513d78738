"""The example plugin's own tests, written with corl.testing alone (what a plugin author writes).

The kit's runs load the built-ins and the plugins passed (here the package's module itself), never the
installed entry points, so these pass whether or not corl-gspo is installed."""

import corl_gspo
import pytest

import corl
from corl.testing import conformance, fails_naming, fake_recipe, outcome, run_tiny


def test_gspo_conforms_to_the_optimizer_contract(tmp_path):
    conformance.check_optimizer(lambda ctx: corl_gspo.GSPO(corl_gspo.GSPOConfig(lr=0.5, clip=0.2), ctx), tmp_path)


def test_gspo_trains_the_fake_agents_in_a_run(tmp_path):
    gspo = {f"agents[{i}].optimizer.{k}": v for i in range(3) for k, v in (("type", "gspo"), ("lr", 0.5), ("clip", 0.2))}
    recipe = fake_recipe(**gspo, **{"run.steps": 6})
    summary = run_tiny(tmp_path, recipe, plugins=[corl_gspo])
    before, after = summary["agents"]["fake0"]["before"]["pass@1"], summary["agents"]["fake0"]["after"]["pass@1"]
    assert after > before  # the ring's peer labels are mostly right: the fake agent learns them


def test_the_agreement_vote_pools_by_learned_agreement_and_resumes_bit_for_bit(tmp_path):
    recipe = fake_recipe(**{"voting.type": "agreement", "topology.type": "all_pairs", "run.steps": 4,
                            "run.checkpoint_every": 2, "run.observers": ["jsonl", "checkpoint"]})
    run_tiny(tmp_path / "straight", recipe, plugins=[corl_gspo])

    class Crash:
        @corl.hookimpl
        def corl_on_step_end(self, step):
            if step == 3:
                raise RuntimeError("stop after step 2's checkpoint")

    with fails_naming("corl_on_step_end raised RuntimeError"):
        run_tiny(tmp_path / "resumed", recipe, plugins=[corl_gspo, Crash()])
    run_tiny(tmp_path / "resumed", recipe, plugins=[corl_gspo], resume=True)
    straight, resumed = outcome(tmp_path / "straight"), outcome(tmp_path / "resumed")
    assert straight[:2] == resumed[:2]
    assert "agreement" in straight[1][1]["agents"]["fake0"]


def test_a_bad_setting_is_one_line_at_its_key(tmp_path):
    with pytest.raises(corl.ConfigError, match=r"agents\[0\]\.optimizer\.clip: invalid value -1"):
        run_tiny(tmp_path, fake_recipe(**{"agents[0].optimizer.type": "gspo", "agents[0].optimizer.clip": -1}),
                 plugins=[corl_gspo])
