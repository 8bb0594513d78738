"""Built-in tasks, each module a plugin of its own: ``arithmetic`` (the embedded default),
``word_problems``, ``jsonl`` (your data files), ``expressions`` / ``python_functions`` (code, voted
on by behaviour in :mod:`corl.sandbox`), ``shapes`` (rendered images). :mod:`.answers` extracts and
compares answers (math-verify for math); :mod:`.code` is the code tasks' verifier."""
