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
    """SIGINT / SIGTERM: the run stopped, its completed steps saved; exit status 128 + the signal.

    The message reads ``stopped by SIGINT <where>; <what was saved>``, e.g. ``stopped by SIGTERM
    after step 3; checkpoint runs/x/checkpoints/step-000003; continue with --resume``.
    """

    def __init__(self, signum: int, detail: str):
        import signal

        self.exit_code = 128 + signum
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name} {detail}")


class Stopping(BaseException):
    """Not an error: raised at a :meth:`corl.context.StopToken.check` to abandon work after a signal
    (like ``KeyboardInterrupt``, it passes ``except Exception``). The run turns it into
    :class:`Interrupted` once the completed steps are saved."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
