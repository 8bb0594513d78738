"""Scaling an ``hf`` agent beyond one plain model: :mod:`.sharding` (FSDP2 over the agent's ranks,
weights gathered once for sampling and tensor by tensor for an engine) and :mod:`.lora` (peft
low-rank adapters, with their ``lora`` table). The agent calls these only when a recipe asks
(``shard``, ``mixed_precision``, ``cpu_offload``, ``lora.rank``); a backend copied from
:mod:`corl.builtin.hf.backend` can leave them out.
"""
