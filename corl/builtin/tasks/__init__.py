"""Built-in tasks, each module a plugin of its own: ``addition`` (the embedded testbed: n-digit
sums written least-significant digit first), ``arithmetic`` (a+b and a*b+c), ``word_problems``,
``jsonl`` (your data files), ``expressions`` / ``python_functions`` (code, voted on by behaviour
in :mod:`corl.sandbox`), ``shapes`` (rendered images). :mod:`.answers` extracts and
compares answers (math-verify for math); :mod:`.code` is the code tasks' verifier."""


def missing_sized_split(config, split: str) -> str | None:
    """The :class:`~corl.protocols.TaskTraits` ``missing_split`` of a task sized by ``{split}_size``
    keys: a split of size 0 holds nothing."""
    return f"task.{split}_size > 0" if getattr(config, f"{split}_size", None) == 0 else None
