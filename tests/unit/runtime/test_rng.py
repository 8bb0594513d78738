"""Per-agent RNG streams (corl.runtime.rng): what an agent draws never depends on the others."""

import torch

from corl.runtime.rng import AgentStreams, fixed, stream_seed


def draws(streams, name, n=3):
    with streams.use(name):
        return torch.rand(n).tolist()


def test_an_agents_draws_do_not_depend_on_other_agents():
    alone = AgentStreams(0, [("a", 0)])
    together = AgentStreams(0, [("a", 0), ("b", 0)])
    first = draws(alone, "a")
    draws(together, "b")  # b draws in between
    assert draws(together, "a") == first
    assert draws(alone, "a") == draws(together, "a")  # and the streams advance alike


def test_streams_differ_by_agent_seed_and_rank():
    assert len({stream_seed(0, "a"), stream_seed(0, "b"), stream_seed(1, "a"), stream_seed(0, "a", 1)}) == 4


def test_a_saved_stream_resumes_exactly():
    streams = AgentStreams(0, [("a", 0)])
    draws(streams, "a")
    saved = {"a": streams.state("a")}
    expected = draws(streams, "a")
    again = AgentStreams(0, [("a", 0)])
    again.load(saved)
    assert draws(again, "a") == expected


def test_using_a_stream_leaves_the_callers_rng_alone():
    torch.manual_seed(5)
    expected = torch.rand(2).tolist()
    torch.manual_seed(5)
    draws(AgentStreams(0, [("a", 0)]), "a")
    with fixed(123):
        torch.rand(4)
    assert torch.rand(2).tolist() == expected


def test_fixed_draws_the_same_numbers_every_time():
    with fixed(7):
        a = torch.rand(3)
    with fixed(7):
        b = torch.rand(3)
    assert torch.equal(a, b)
