"""The package's layering, checked on its import graph (every import, function-local ones too):
no cycles; the contract imports only itself; the core never imports a built-in; built-ins import
the contract and the host's helpers, never the plugin manager, the run, the CLI, the tools or each other."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "corl"
#: the contract, bottom first: each module imports only those before it (the data module, corl.types,
#: nothing of the contract; the factory's and the hooks' views, corl.context, the protocols they name)
CONTRACT_LAYERS = ("corl.errors", "corl.types", "corl.traits", "corl.protocols", "corl.context", "corl.hookspecs")
CONTRACT = set(CONTRACT_LAYERS)
#: what a built-in may import from the core besides the contract (its ``hookimpl`` is the contract's:
#: a built-in registers exactly as a third-party plugin does, without the host's plugin manager)
HOST_HELPERS = {"corl", "corl.atomic", "corl.sandbox", "corl.logs"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def imports(path: Path) -> set[str]:
    """The corl modules ``path`` imports, anywhere in it (``from a import b``: ``a.b`` when that is a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "corl"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "corl":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in MODULES else node.module)
    return {m for m in out if m in MODULES}


GRAPH = {name: imports(path) - {name} for name, path in MODULES.items()}


def builtin_of(module: str) -> str | None:
    """``corl.builtin.hf.backend.agent`` -> ``corl.builtin.hf``: the built-in (module or package) it belongs to."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["corl", "builtin"] and len(parts) > 2 else None


def test_the_graph_is_read():
    assert "corl.builtin.hf.backend.agent" in GRAPH["corl.builtin.hf.backend"]  # a function-local import counts
    assert "corl.runtime.step" in GRAPH["corl.runtime.loop"]


def test_no_import_cycles():
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_contract_imports_only_itself():
    for name in CONTRACT:
        assert GRAPH[name] <= CONTRACT, f"{name} imports {GRAPH[name] - CONTRACT}"


@pytest.mark.parametrize("name", CONTRACT_LAYERS)
def test_the_contract_is_layered_and_the_data_module_points_nowhere(name):
    below = set(CONTRACT_LAYERS[:CONTRACT_LAYERS.index(name)])
    assert GRAPH[name] <= below, f"{name} imports {GRAPH[name] - below}, which is not below it in {CONTRACT_LAYERS}"
    if name == "corl.types":
        assert not GRAPH[name], f"the data module imports {GRAPH[name]}"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if builtin_of(m) is None and m != "corl.builtin"))
def test_the_core_never_imports_a_builtin(name):
    assert not {m for m in GRAPH[name] if builtin_of(m)}, f"{name} imports a built-in"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if builtin_of(m)))
def test_builtins_import_only_the_contract_the_helpers_and_themselves(name):
    own = builtin_of(name)
    for target in GRAPH[name]:
        assert target in CONTRACT or target in HOST_HELPERS or builtin_of(target) == own, f"{name} imports {target}"


def test_import_corl_is_light():
    code = "import sys, corl; heavy = {'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_registering_every_builtin_imports_no_torch():
    code = ("import sys; from corl.plugins import build_registry, make_plugin_manager; "
            "build_registry(make_plugin_manager(autoload=False)); "
            "heavy = {'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


#: Where corl may call getattr / hasattr, each on something that is not a component or a context
#: (a component's optional capabilities are declared: protocols, and traits read by corl.traits).
NOT_COMPONENTS = {
    ("corl.builtin.hf.models.config", "warm_up_needs_seed"): "an agent config's warm_up key, absent from agent types without one (hf_vision)",
    ("corl.builtin.hf.backend.recompute", "activation_bytes"): "a transformers model, config or output (attributes differ by architecture and version)",
    ("corl.builtin.hf.backend.static_decode", "decode_static"): "a transformers model, config or output (attributes differ by architecture and version)",
    ("corl.builtin.hf.backend.decode", "processors"): "a sampler config's knob, absent from samplers' configs without it (hf_vision)",
    ("corl.builtin.hf.backend.decode", "warpers"): "a sampler config's knob, absent from samplers' configs without it (hf_vision)",
    ("corl.builtin.hf.backend.preview", "rendered"): "the recipe file's path, absent from a spec built in Python",
    ("corl.runtime.checkpoint", "read_json"): "an OSError's strerror, to name why a file is unreadable",
    ("corl.protocols", "missing_members"): "the protocol's own members, to name what an object lacks",
    ("corl.traits", "declared_config"): "the declared mechanism: an import-path factory's Config",
    ("corl.traits", "traits"): "the declared mechanism: a factory's traits, read once at registration",
    ("corl.plugins", "register"): "a plugin object's corl_* functions, checked for the hookimpl marker",
    ("corl.plugins", "call_hook"): "a pluggy hook by name",
    ("corl.plugins", "_raised_by"): "a pluggy hook by name; a function's code object",
    ("corl.plugins", "_hook_problem"): "a pluggy hook by name, for its spec's arguments",
    ("corl.recipe.structure", "type_name"): "a type's name, for messages",
    ("corl.recipe.components", "_import_path_component"): "the attribute an import path names, in its module",
    ("corl.context", "Closers.close"): "a function's name, for messages",
    ("corl.builtin.policy.optimizer", "PolicyGradient.step"): "a torch tensor (a DTensor when sharded)",
    ("corl.builtin.policy.optimizer", "PolicyGradient.save_state"): "torch tensors (DTensors when sharded)",
    ("corl.builtin.policy.optimizer", "PolicyGradient.load_state"): "torch parameters (DTensors when sharded)",
    ("corl.testing.dists", "uninstall_plugin"): "modules in sys.modules",
    ("corl.testing.conformance", "check_sampler"): "the TokenBatch protocol's declared tensor fields, by name",
    ("corl.builtin.hf.backend.agent", "HFAgent.__init__"): "a context built by hand has no recipe (ctx.spec None: no source folder)",
    ("corl.builtin.hf.backend.agent", "HFAgent._load_model"): "a torch dtype by name",
    ("corl.builtin.hf.backend.agent", "HFAgent._prepare_for_training"): "a torch dtype by name; transformers modules' dropout and checkpointing names",
    ("corl.builtin.hf.backend.agent", "HFAgent.autocast"): "a torch dtype by name",
    ("corl.builtin.hf.backend.agent", "_chunk_logprobs"): "a transformers model, config or output (attributes differ by architecture and version)",
    ("corl.builtin.hf.backend.common", "capped_texts"): "a per-tokenizer cache kept on the transformers tokenizer",
    ("corl.builtin.hf.backend.common", "context_limit"): "a transformers model, config or output (attributes differ by architecture and version)",
    ("corl.builtin.hf.backend.common", "save_loadable"): "a transformers model, config or output (attributes differ by architecture and version)",
    ("corl.builtin.hf.backend.decode", "decode"): "a transformers model, config or output (attributes differ by architecture and version)",
    ("corl.builtin.hf.backend.forward", "_body"): "a transformers model, config or output (attributes differ by architecture and version)",
    ("corl.builtin.hf.backend.forward", "body_of"): "a transformers model (attributes differ by architecture and version)",
    ("corl.builtin.hf.backend.forward", "_checkpointed_layers"): "a transformers model, config or output (attributes differ by architecture and version)",
    ("corl.builtin.hf.backend.forward", "_shared"): "a transformers cache's layers",
    ("corl.builtin.hf.backend.forward", "_outgrows_window"): "a transformers model, config or output (attributes differ by architecture and version)",
    ("corl.builtin.hf.engines", "model_source"): "the agent's transformers model's source path",
    ("corl.builtin.hf.engines", "trainer_logprobs"): "a torch dtype by name",
    ("corl.builtin.hf.models.sources", "_convert"): "a transformers model, config or output (attributes differ by architecture and version)",
    ("corl.builtin.hf.models.sources", "packaged_gguf"): "the function a model package's catalog entry names",
    ("corl.builtin.hf.scale.lora", "delta"): "a peft layer's fan_in_fan_out",
    ("corl.builtin.hf.scale.sharding", "full"): "a torch tensor (a DTensor when sharded)",
    ("corl.builtin.hf.scale.sharding", "load_shards"): "torch parameters (DTensors when sharded)",
    ("corl.builtin.hf.scale.sharding", "save_shards"): "torch parameters (DTensors when sharded)",
    ("corl.builtin.hf.scale.sharding", "shard"): "a transformers model's _no_split_modules",
    ("corl.builtin.hf.vision.agent", "VisionAgent.__init__"): "a transformers processor, model and config (they differ by design)",
    ("corl.builtin.hf.vision.agent", "VisionAgent.forward_inputs"): "a torch dtype by name",
    ("corl.builtin.hf.vision.inputs", "encode_prompts"): "a transformers processor's image token",
    ("corl.builtin.hf.vision.inputs", "load_image"): "a PIL image or a path",
    ("corl.builtin.hf.vision.zoo", "_fingerprint"): "a PIL image or a path",
    ("corl.builtin.tasks.data", "_images"): "a PIL image (a `datasets` Image column) or a path",
}


def probes(path: Path) -> list[str]:
    """``Class.function`` of each getattr / hasattr call (and module ``__getattr__``) in ``path``."""
    found = []

    def visit(node, where):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{where}.{child.name}" if where else child.name
                if child.name == "__getattr__":
                    found.append(inner)
                visit(child, inner)
                continue
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Name)
                    and child.func.id in ("getattr", "hasattr")):
                found.append(where or "<module>")
            visit(child, where)

    visit(ast.parse(path.read_text()), "")
    return found


def test_no_component_or_context_is_probed_with_getattr_or_hasattr():
    seen, unexplained = set(), []
    for name, path in sorted(MODULES.items()):
        for where in probes(path):
            key = (name, where.split(".<locals>")[0])
            seen.add(key)
            if key not in NOT_COMPONENTS:
                unexplained.append(f"{name}: getattr/hasattr in {where}")
    assert not unexplained, ("declare the capability (a protocol in corl.protocols or a trait in corl.traits) instead of probing "
                             f"for it: {unexplained}")
    assert not set(NOT_COMPONENTS) - seen, f"stale entries: {set(NOT_COMPONENTS) - seen}"
