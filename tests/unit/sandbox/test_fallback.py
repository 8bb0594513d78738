"""Without bubblewrap (issue 31): the fallback never runs programs as root unasked. It builds the
view itself, so programs get a uid of their own even where the Python installation is under a 0700
folder such as /root; where no uid of their own can be had, a root parent refuses to run them
unless the recipe says ``task.unsafe_run_as_root = true``; and the run's log says which layers hold."""

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from corl.builtin.tasks.code_tasks import ExpressionsConfig, ExpressionsTask
from corl.errors import ConfigError
from corl.plugins import build_registry, make_plugin_manager
from corl.recipe import apply_overrides, load_recipe
from corl.sandbox import Program, Sandbox, isolation, outer
from tests.kit import base_recipe

from .hostile import run_hostile, sandbox_for

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="only a root parent could run programs as root")


def _closed_folder_above_python() -> str | None:
    """A folder above the Python installation that other uids cannot enter (e.g. /root, 0700)."""
    for folder in Path(os.path.realpath(sys.executable)).parents:
        if folder.stat().st_mode & 0o001 == 0:
            return str(folder)
    return None


@root_only
@pytest.mark.parametrize("outer_layer", ["unshare", "plain"])
def test_the_fallback_gives_programs_a_uid_of_their_own(outer_layer):
    # this machine's Python is under /root (0700): the old fallback kept root for every program
    sandbox = sandbox_for(outer_layer, without=("audit-hook",))
    assert {"view", "uid"} <= set(isolation(sandbox.isolate).layers)
    outcome = run_hostile("""
        import os
        def f(x):
            import decimal, fractions  # not loaded by the worker: read from the installation as its own uid
            return [os.getuid(), os.getgid(), os.getgroups(), str(decimal.Decimal(1) / 4)]
    """, sandbox)
    uid, gid, groups, quarter = eval(outcome.output)
    assert uid >= outer.HOST_UIDS[0] and gid >= outer.HOST_UIDS[0] and groups == [] and quarter == "0.25"
    if _closed_folder_above_python():
        assert outcome.ok  # and the installation was readable all the same


@root_only
def test_a_root_parent_refuses_when_programs_would_keep_root(monkeypatch):
    no_uid = outer.Plan("unshare", (), outer.HOST_UIDS, layers=("view", "private-tmp", "seccomp", "audit-hook"))
    monkeypatch.setattr(outer, "plan", lambda isolate=True: no_uid)
    with pytest.raises(ConfigError, match="task.unsafe_run_as_root") as refused:
        Sandbox().run([Program("1", (0,))])
    assert "\n" not in str(refused.value)  # one line, naming what to set
    with pytest.raises(ConfigError, match="task.unsafe_run_as_root = true"):
        ExpressionsTask(ExpressionsConfig(seed_size=10, train_size=10, eval_size=10))  # before any model loads
    assert Sandbox(unsafe_run_as_root=True).check() is no_uid
    task = ExpressionsTask(ExpressionsConfig(seed_size=10, train_size=10, eval_size=10, unsafe_run_as_root=True))
    assert task.verifier.sandbox.unsafe_run_as_root


ATTEMPT = """
import sys, warnings
warnings.simplefilter("ignore")
from corl.errors import ConfigError
from corl.sandbox import Program, Sandbox
isolate = {"true": True, "false": False}.get(sys.argv[1], sys.argv[1])
try:
    Sandbox(isolate=isolate).run([Program("1", (0,))])
    print("ran")
except ConfigError as exc:
    print("refused:", exc)
(outcome,), = Sandbox(isolate=isolate, unsafe_run_as_root=True).run([Program("__import__('os').getuid()", (0,))])
print("unsafe:", outcome.output or outcome.error)
"""


@root_only
@pytest.mark.skipif(not shutil.which("unshare"), reason="no unshare")
@pytest.mark.parametrize("isolate", ["true", "unshare", "false"])
def test_where_no_uid_can_be_had_the_run_refuses(isolate):
    # root in a user namespace that maps uid 0 only: the view still builds, but no program can take a
    # uid of its own, so each would run as (that namespace's) root
    try:
        done = subprocess.run(["unshare", "--user", "--map-root-user", sys.executable, "-c", ATTEMPT, isolate],
                              capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("the refusal took too long")
    if "unshare failed" in done.stderr or "Operation not permitted" in done.stderr[:200]:
        pytest.skip("no user namespaces here")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: task.unsafe_run_as_root: ") and "as root" in lines[0]
    assert lines[1] == "unsafe: 0"  # asked for, it runs them as root


def test_the_log_says_which_layers_hold(caplog):
    outer.plan.cache_clear()  # the plan is probed once per process: probe again, to see its line
    with caplog.at_level(logging.INFO, logger="corl"):
        found = isolation("unshare" if shutil.which("unshare") else True)
    said = [r.getMessage() for r in caplog.records if r.name == "corl.sandbox"]
    assert len(said) == 1 and f"outer layer {found.outer}" in said[0] and ", ".join(found.layers) in said[0]


@pytest.mark.parametrize("outer_layer", ["unshare", "plain"])
def test_the_fallback_devices_are_three(outer_layer):
    outcome = run_hostile(textwrap.dedent("""
        import os
        def f(x):
            return sorted(os.listdir("/dev")), os.path.exists("/proc"), os.path.exists("/sys")
    """), sandbox_for(outer_layer))
    if "view" not in isolation(sandbox_for(outer_layer).isolate).layers:
        pytest.skip("no view here (neither root nor a user namespace)")
    assert outcome.output == "(['null', 'urandom', 'zero'], False, False)"


def test_the_unsafe_key_is_a_recipe_key_validated_like_the_others():
    registry = build_registry(make_plugin_manager(autoload=False))
    for task in ("expressions", "python_functions"):
        data = base_recipe()
        apply_overrides(data, [f'task.type="{task}"', "task.seed_size=20", 'task.unsafe_run_as_root="yes"'])
        with pytest.raises(ConfigError, match="task.unsafe_run_as_root: expected true or false"):
            load_recipe(data, [], registry=registry)
        apply_overrides(data, ["task.unsafe_run_as_root=true"])
        assert load_recipe(data, [], registry=registry).task.config.unsafe_run_as_root is True
