"""User-facing errors: one family, printed on one line without a traceback, exit status 2."""


class CorlError(Exception):
    """A mistake the user can fix (a recipe, a data file, a model path)."""

    exit_code = 2
    reported = False  # already printed where it happened (the CLI does not repeat it)


class ConfigError(CorlError):
    """A recipe or command-line override is invalid. ``problems`` holds one line per mistake."""

    def __init__(self, *problems: str):
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class PluginError(CorlError):
    """A plugin failed to load or broke the hook contract; the message names the plugin."""


class TrainingError(CorlError):
    """The run cannot go on (e.g. repeated non-finite updates); the message says why and what to do."""

    exit_code = 3


class Interrupted(CorlError):
    """SIGINT / SIGTERM: the run stopped after a step and wrote a checkpoint."""

    def __init__(self, signum: int, step: int, path):
        import signal

        self.exit_code = 128 + signum
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {name} after step {step}; checkpoint {path}; continue with --resume")
