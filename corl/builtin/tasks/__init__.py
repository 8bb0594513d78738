"""Built-in tasks, each module a plugin of its own: ``addition`` (the embedded testbed: n-digit
sums written least-significant digit first), ``arithmetic`` (a+b and a*b+c), ``word_problems``,
``drills``, ``jsonl`` (your data files), ``expressions`` / ``python_functions`` (code, voted on by
behaviour in :mod:`corl.sandbox`), ``shapes`` (rendered images). Every generated task subclasses
:class:`.generated.GeneratedTask`; :mod:`.splits` cuts their seed / train / eval splits;
:mod:`.extract` finds answers in completions and labels (:mod:`.fallback` where no marker names one),
:mod:`.verifiers` compares them (math-verify for math); :mod:`.code` is the code tasks' verifier."""
