import pytest

from corl.builtin.tasks.arithmetic import IntegerVerifier
from corl.builtin.topology import AllPairsConfig, AllPairsRouter, GroundTruthRouter, NoConfig, RingRouter, SelfRouter
from corl.builtin.voting import MajorityConfig, MajorityVote
from corl.testing import context
from corl.types import Routed, Vote, VoteContext

LABEL_CTX = VoteContext("label")  # an agent's own labels (the built-in aggregators read no more of it)

V = IntegerVerifier()
AGG = MajorityVote(MajorityConfig())


def rewards(routed):
    """A router's rewards, whether it returned a Routed or a plain mapping."""
    return routed.rewards if isinstance(routed, Routed) else routed


def setup():
    # one prompt, three agents, 4 votes each
    votes = {
        "a": [[Vote(1, "a"), Vote(1, "a"), Vote(2, "a"), Vote(None, "a")]],
        "b": [[Vote(2, "b"), Vote(2, "b"), Vote(2, "b"), Vote(1, "b")]],
        "c": [[Vote(3, "c"), Vote(3, "c"), Vote(1, "c"), Vote(1, "c")]],
    }
    labels = {name: AGG.aggregate(v, V, LABEL_CTX) for name, v in votes.items()}
    return votes, labels


def test_ring_rewards_each_agent_against_the_next():
    votes, labels = setup()
    assert labels["c"][0].answer in (1, 3)  # a tie, broken by seed
    out = rewards(RingRouter(NoConfig()).route(votes, labels, V, AGG))
    assert out["a"] == [[0.0, 0.0, 1.0, 0.0]]  # against b's label 2
    assert out["b"] == [[float(labels["c"][0].answer == x) for x in (2, 2, 2, 1)]]
    assert out["c"] == [[0.0, 0.0, 1.0, 1.0]]  # against a's label 1


def test_self_is_ttrl():
    votes, labels = setup()
    out = rewards(SelfRouter(NoConfig()).route(votes, labels, V, AGG))
    assert out["a"] == [[1.0, 1.0, 0.0, 0.0]]
    assert out["b"] == [[1.0, 1.0, 1.0, 0.0]]


def test_all_pairs_pooled_vote_and_mean():
    votes, labels = setup()
    pooled = rewards(AllPairsRouter(AllPairsConfig(combine="vote")).route(votes, labels, V, AGG))
    # a's peers b and c pooled: 2 x3, 1 x3, 3 x2 -> tie 1/2; b's peers a, c pooled: 1 x4 wins.
    assert pooled["b"] == [[0.0, 0.0, 0.0, 1.0]]
    mean = rewards(AllPairsRouter(AllPairsConfig(combine="mean")).route(votes, labels, V, AGG))
    # b against a's label (1) and c's label: its 4th vote (1) matches a.
    c_label = labels["c"][0].answer
    assert mean["b"] == [[pytest.approx((0 + (c_label == 2)) / 2)] * 3 + [pytest.approx((1 + (c_label == 1)) / 2)]]


def test_two_agent_ring_is_mutual():
    votes, labels = setup()
    two = {k: votes[k] for k in ("a", "b")}
    out = rewards(RingRouter(NoConfig()).route(two, {k: labels[k] for k in two}, V, AGG))
    assert out["a"] == [[0.0, 0.0, 1.0, 0.0]] and out["b"] == [[0.0, 0.0, 0.0, 1.0]]


def test_ground_truth_router_needs_and_uses_labels():
    votes, labels = setup()
    assert GroundTruthRouter.supervised and not RingRouter.supervised and not SelfRouter.supervised
    out = rewards(GroundTruthRouter(NoConfig()).route(votes, labels, V, AGG, truth=[3]))
    assert out["c"] == [[1.0, 1.0, 0.0, 0.0]]
    with pytest.raises(ValueError):
        GroundTruthRouter(NoConfig()).route(votes, labels, V, AGG, truth=None)


def test_no_label_means_no_reward():
    votes = {"a": [[Vote(None, "a")] * 2], "b": [[Vote(4, "b")] * 2]}
    labels = {k: AGG.aggregate(v, V, LABEL_CTX) for k, v in votes.items()}
    out = rewards(RingRouter(NoConfig()).route(votes, labels, V, AGG))
    assert out["b"] == [[0.0, 0.0]]


def test_judge_rewards_everyone_against_the_judge():
    from corl.builtin.topology import JudgeConfig, JudgeRouter

    votes, labels = setup()
    out = rewards(JudgeRouter(JudgeConfig(judge="b")).route(votes, labels, V, AGG))
    assert out["a"] == [[0.0, 0.0, 1.0, 0.0]] and out["c"] == [[0.0, 0.0, 0.0, 0.0]]  # b's label is 2


def test_each_router_says_which_label_rewarded_whom():
    """label_share / label_accuracy read Routed.targets: the peer's label under a ring, the judge's,
    the pool's, the truth; a mean over peers has no one label."""
    from corl.builtin.topology import JudgeConfig, JudgeRouter

    votes, labels = setup()
    ring = RingRouter(NoConfig()).route(votes, labels, V, AGG)
    assert ring.targets == {"a": labels["b"], "b": labels["c"], "c": labels["a"]}
    judge = JudgeRouter(JudgeConfig(judge="b")).route(votes, labels, V, AGG)
    assert all(judge.targets[name] == labels["b"] for name in votes)
    pooled = AllPairsRouter(AllPairsConfig(combine="vote")).route(votes, labels, V, AGG)
    assert pooled.targets["b"][0].answer == 1  # a's and c's votes pooled
    mean = AllPairsRouter(AllPairsConfig(combine="mean")).route(votes, labels, V, AGG)
    assert mean.targets["a"] == [None]
    truth = GroundTruthRouter(NoConfig()).route(votes, labels, V, AGG, truth=[3])
    assert truth.targets["a"][0].answer == 3


# -- upward: never paid by a peer an agent outperforms -----------------------------------------------

def lopsided(n_prompts=12):
    """A strong agent "s" (every vote right: the answer is the prompt's index) and two weak ones whose 4
    votes are one right and three scattered wrong answers; on the last prompt the two weak agents agree
    on one wrong answer (99) with all their votes, outvoting the strong agent in a plain pool."""
    votes = {"s": [], "w1": [], "w2": []}
    for p in range(n_prompts):
        votes["s"].append([Vote(p, "s")] * 4)
        votes["w1"].append([Vote(p, "w1"), Vote(100 + p, "w1"), Vote(200 + p, "w1"), Vote(None, "w1")])
        votes["w2"].append([Vote(p, "w2"), Vote(300 + p, "w2"), Vote(400 + p, "w2"), Vote(500 + p, "w2")])
    votes["w1"][-1] = [Vote(99, "w1")] * 4
    votes["w2"][-1] = [Vote(99, "w2")] * 4
    labels = {name: AGG.aggregate(v, V, VoteContext("label", (name,))) for name, v in votes.items()}
    return votes, labels


def test_upward_never_pays_the_strong_agent_by_the_peers_it_outperforms():
    from corl.builtin.topology import UpwardConfig, UpwardRouter

    votes, labels = lopsided()
    routed = UpwardRouter(UpwardConfig(), context()).route(votes, labels, V, AGG)
    pi = {a: m["reliability"] for a, m in routed.metrics.items()}
    assert pi["s"] > max(pi["w1"], pi["w2"]) + 0.2  # estimated from agreement alone (shrunk by the prior)
    assert routed.metrics["s"]["teachers"] == 0 and routed.metrics["w1"]["teachers"] == 2
    # the strong agent: its own majority on every prompt, the weak pair's shared 99 included
    assert [t.answer for t in routed.targets["s"]] == list(range(12))
    assert routed.rewards["s"][-1] == [1.0] * 4
    # a weak agent: the strong agent's answer outweighs both weak agents' eight votes for 99
    assert [t.answer for t in routed.targets["w1"]] == list(range(12))
    assert routed.rewards["w1"][-1] == [0.0] * 4 and routed.rewards["w1"][0] == [1.0, 0.0, 0.0, 0.0]
    # the plain pool of the others pays the strong agent by the weak pair's shared wrong answer
    pooled = AllPairsRouter(AllPairsConfig(combine="vote")).route(votes, labels, V, AGG)
    assert pooled.targets["s"][-1].answer == 99 and pooled.rewards["s"][-1] == [0.0] * 4


def test_upward_pools_every_vote_of_agents_of_similar_accuracy():
    """Within the margin nobody outperforms anybody: every agent is paid by the vote of all three."""
    from corl.builtin.topology import UpwardConfig, UpwardRouter

    votes, labels = setup()
    routed = UpwardRouter(UpwardConfig(margin=1.0), context()).route(votes, labels, V, AGG)
    assert all(m["teachers"] == 2 for m in routed.metrics.values())
    assert all(t[0].answer == 1 for t in routed.targets.values())  # 1 has 5 of the 11 pooled answers, 2 has 4
    assert routed.rewards["b"] == [[0.0, 0.0, 0.0, 1.0]]
    tight = UpwardRouter(UpwardConfig(margin=0.0), context()).route(votes, labels, V, AGG)
    order = sorted(tight.metrics, key=lambda a: tight.metrics[a]["reliability"])
    assert [tight.metrics[a]["teachers"] for a in order] == [2, 1, 0]  # each agent: the ones above it


def test_upward_is_registered_label_free_and_validates_its_margin():
    from corl.builtin.topology import UpwardConfig, UpwardRouter

    assert UpwardRouter.supervised is False and UpwardRouter.min_agents == 2
    with pytest.raises(ValueError):
        UpwardConfig(margin=-0.1)
