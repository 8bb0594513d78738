"""Built-in task from data files: prompts (and labels) read from .jsonl or .parquet files, or a saved
`datasets` dataset (their rows: :mod:`corl.builtin.tasks.files`), in the layouts data sets come in
(:mod:`corl.builtin.tasks.fields`). :class:`Reader` turns a recipe's files into prompts, for the
task and for ``corl validate``'s first rows alike."""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from corl import logs
from corl.builtin.tasks import extractors
from corl.builtin.tasks.fields import (
    FieldError,
    MissingField,
    answer_text,
    is_messages,
    lookup,
    prompt_messages,
    prompt_text,
)
from corl.builtin.tasks.fields import short as _short
from corl.builtin.tasks.files import BadRow, origin, read_rows, show
from corl.builtin.tasks.splits import SPLITS
from corl.context import Context, RegistryView
from corl.errors import CorlError
from corl.hookspecs import hookimpl
from corl.types import Prompt


@runtime_checkable
class RecipeSource(Protocol):
    """What a data task reads of ``ctx.spec``: the recipe file its data paths are relative to (a
    ``RunSpec``; ``"<recipe>"`` for a recipe given as a table, which has no folder)."""

    source: str


def _template(instance, attribute, value: str) -> None:
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
    except ValueError:  # an unmatched brace
        fields = set()
    if fields != {"prompt"}:
        raise ValueError("'template' must be a format string whose only field is {prompt} (write {{ for a brace)")


@attrs.frozen
class DataConfig:
    train: str = attrs.field(metadata={
        "help": "unlabeled training prompts: .jsonl, .parquet, or a folder saved by `datasets` save_to_disk "
                "(DIR or DIR::SPLIT); a relative path is relative to the recipe file, not the working directory "
                "(run.output_dir is); labels, if any, are used only for monitoring"})
    eval: str | None = attrs.field(default=None, metadata={
        "help": "labeled held-out prompts for evaluation (a file or saved dataset as for train; relative to the "
                "recipe file)"})
    seed: str | None = attrs.field(default=None, metadata={
        "help": "labeled prompts for warm-starting zoo models (as for train; relative to the recipe file)"})
    prompt_field: str = attrs.field(default="question", metadata={
        "help": "the field holding the prompt: text, or a list of chat messages (`messages`, TRL's and verl's "
                "`prompt`), up to the last user turn: a chat-format agent renders them with its chat template as "
                "they are (system turns kept, as TRL does), others read the last user turn with the system turns "
                "prepended; a dotted path reaches into tables"})
    answer_field: str = attrs.field(default="answer", metadata={
        "help": "the field holding the reference answer: a worked solution ending in '#### 42' or \\boxed{}, the "
                "answer alone (\\frac{1}{2}), or a list of chat messages (the last assistant turn); a dotted path "
                "reaches into tables (verl: reward_model.ground_truth)"})
    image_field: str | None = attrs.field(default=None, metadata={
        "help": "the field naming the row's image file (or a list of them), relative to the data file; "
                "for vision-language agents"})
    template: str = attrs.field(default="{prompt}", validator=_template, metadata={
        "help": "prompt text shown to the model: a Python format string with {prompt}"})
    answers: str = attrs.field(default="math", validator=extractors.check, metadata={"help": extractors.HELP})
    on_bad_row: Literal["error", "skip"] = attrs.field(default="error", metadata={
        "help": "a malformed row stops the run (error) or is skipped and counted (skip)"})
    fallback_labels: Literal["drop", "keep"] = attrs.field(default="drop", metadata={
        "help": "rows whose label the answer field states only by the extractor's fallback (no marker, not an "
                "answer alone: the last number of 'I do not know 5 things', a GSM8K solution without its '####' "
                "line), or that hold no answer (N/A, I do not know, See solution): drop drops them; keep keeps the "
                "fallback labels (a row with no answer is never labeled: kept only in train, unlabeled); either way "
                "each file's count and first rows are reported"})
    limit: int = attrs.field(default=0, validator=attrs.validators.ge(0),
                             metadata={"help": "read at most this many prompts of each file (0: all)"})


class _Doubtful(Exception):
    """A row left out for its label (``fallback_labels``); already recorded."""


class DataTask:
    """Splits read from the files the recipe names; ``skipped[split]`` counts rows skipped as bad,
    ``doubtful[split]`` the rows whose label came only by the extractor's fallback or that hold no
    answer (``(line, answer text, label, path)``), ``label_paths[prompt id]`` how each label was found."""

    def __init__(self, config: DataConfig, ctx: Context | None = None):
        source = ctx.spec.source if ctx is not None and isinstance(ctx.spec, RecipeSource) else ""
        reader = Reader(config, source, ctx.log if ctx is not None else print)
        self._splits = reader.read()
        self.config, self.verifier = config, reader.verifier
        self.skipped, self.doubtful, self.label_paths = reader.skipped, reader.doubtful, reader.label_paths

    def split(self, name: str) -> tuple[Prompt, ...]:
        return self._splits[name]

    @staticmethod
    def check_data(config: DataConfig, source: str, rows: int) -> list[str]:
        """A trait (:class:`corl.traits.TaskTraits`, ``corl validate``): the first ``rows`` rows of each
        file, read as the run reads them; one line per file that fails, as the run words it."""
        problems = []
        for split, file in _files(config).items():
            if file is None:
                continue
            try:
                Reader(config, source, logs.get("data").info).read((split,), max_rows=rows)
            except CorlError as exc:
                problems.append(str(exc))
        return problems

    @staticmethod
    def missing_split(config: DataConfig, split: str) -> str | None:
        """A trait (:class:`corl.traits.TaskTraits`): the seed and eval splits come from files."""
        if split in ("seed", "eval") and _files(config)[split] is None:
            return f'task.{split} = "FILE" (labeled rows)'
        return None


class Reader:
    """Reads a data task's files into prompts, paths relative to the recipe file ``source``; ``log``
    gets the reports of skipped and doubtful rows, kept in ``skipped``, ``doubtful`` and ``dropped``
    by split (``label_paths`` by prompt id) as :class:`DataTask` describes them."""

    def __init__(self, config: DataConfig, source: str, log: Callable[[str], Any]):
        self.config, self.log = config, log
        self.verifier = extractors.verifier_for(config.answers)
        self.skipped: dict[str, int] = {}
        self.doubtful: dict[str, list[tuple[int, str, Any, str]]] = {}
        self.dropped: dict[str, int] = {}
        self.label_paths: dict[str, str | None] = {}
        self.rows_read: dict[str, int] = {}
        # A recipe given as a table ("<recipe>") has no folder of its own.
        self.base = Path(source).parent if source and not source.startswith("<") else Path.cwd()

    def read(self, splits: tuple[str, ...] = SPLITS, max_rows: int = 0) -> dict[str, tuple[Prompt, ...]]:
        """The prompts of each split (those not in ``splits`` empty), at most ``max_rows`` rows of
        each file (0: all)."""
        files = _files(self.config)
        paths = {split: self.base / Path(files[split]).expanduser() for split in splits if files[split] is not None}
        read = {split: self._load(split, paths[split], max_rows) if split in paths else () for split in SPLITS}
        # (reading only the first rows, the file may hold prompts further on)
        if "train" in splits and not read["train"] and not (max_rows and self.rows_read["train"] >= max_rows):
            dropped = self.dropped.get("train")
            why = (f" ({dropped} rows dropped for their labels: task.fallback_labels = \"keep\" keeps those "
                   "labeled by the fallback)" if dropped else "")
            raise CorlError(f"task.train: {show(paths['train'])} has no prompts{why}")
        return read

    def _load(self, split: str, path: Path, max_rows: int = 0) -> tuple[Prompt, ...]:
        on_disk = Path(str(path).partition("::")[0])
        if not on_disk.exists():
            raise CorlError(f"task.{split}: no such file: {show(on_disk)}")
        prompts, skipped, first, read = [], 0, "", 0
        self._folder = on_disk.parent if on_disk.is_file() else on_disk  # images are relative to the data
        self.doubtful[split], self.dropped[split] = [], 0
        for line, row in read_rows(split, path, _files(self.config)[split]):
            read += 1
            try:
                prompts.append(self._prompt(split, line, row, origin(path, line)))
            except _Doubtful:
                self.dropped[split] += 1
            except BadRow as exc:
                message = f"{show(path)}:{line}: {exc}"
                if self.config.on_bad_row == "error":
                    raise CorlError(message) from None
                skipped, first = skipped + 1, first or message
            if self.config.limit and len(prompts) >= self.config.limit or max_rows and read >= max_rows:
                break
        self.rows_read[split] = read
        if skipped:
            self.skipped[split] = skipped
            self.log(f"task.{split}: skipped {skipped} bad rows (on_bad_row = \"skip\"); first: {first}")
        if self.doubtful[split]:
            self.log(self._doubtful_report(split, path, read))
        return tuple(prompts)

    def _doubtful_report(self, split: str, path: Path, read: int) -> str:
        """One line: how many rows of the file have a doubtful label, what became of them, the first few."""
        rows, c = self.doubtful[split], self.config
        fallback = sum(path_ == "fallback" for *_, path_ in rows)
        parts = [f"{fallback} labeled only by the fallback (the last mathematics in field {c.answer_field!r}: "
                 "no <answer>, \\boxed{}, '####' or 'The answer is')" if fallback else "",
                 f"{len(rows) - fallback} with no answer (N/A, I do not know, ...)" if len(rows) > fallback else ""]
        fate = ("dropped (task.fallback_labels = \"drop\"; \"keep\" keeps the fallback labels)"
                if c.fallback_labels == "drop" else
                "fallback labels kept (task.fallback_labels = \"keep\")"
                + (", rows with no answer dropped" if split != "train" and len(rows) > fallback else
                   ", rows with no answer kept unlabeled" if len(rows) > fallback else ""))
        first = ", ".join(f"{line} {_short(text, 40)} -> {label if label is not None else 'no label'}"
                          for line, text, label, _ in rows[:3])
        where = "line" if path.suffix.lower() == ".jsonl" else "row"
        return (f"task.{split}: {show(path)}: {len(rows)} of {read} rows have doubtful labels: "
                f"{'; '.join(p for p in parts if p)}; {fate}; first, by {where}: {first}")

    def _prompt(self, split: str, line: int, row: Any, origin: str) -> Prompt:
        c = self.config
        if isinstance(row, BadRow):
            raise row
        if not isinstance(row, dict):
            raise BadRow(f"not a JSON object: {_short(row)}")
        try:
            value = lookup(row, c.prompt_field)
            text = "" if value is None else prompt_text(value, c.prompt_field)
            messages = prompt_messages(value, c.prompt_field)
        except FieldError as exc:
            raise BadRow(str(exc)) from None
        if not text.strip():
            raise BadRow(f"empty prompt in field {c.prompt_field!r}")
        fields = f"fields: {', '.join(map(str, row))}"
        try:
            raw = lookup(row, c.answer_field)
            answer = answer_text(raw, c.answer_field)
        except MissingField as exc:
            raw, answer, fields = None, None, exc.available
        except FieldError as exc:
            raise BadRow(str(exc)) from None
        label, path = self.verifier.label_path(answer) if answer is not None else (None, None)
        if path in ("fallback", "none"):  # a doubtful label: reported per file, dropped or kept (fallback_labels)
            self.doubtful[split].append((line, answer, label, path))
            if c.fallback_labels == "drop" or (path == "none" and split != "train"):
                raise _Doubtful()
        if label is None and split != "train":  # seed and eval exist to be scored against
            if answer is None and is_messages(raw):
                raise BadRow(f"field {c.answer_field!r} has no assistant turn; {split} rows need answers")
            if answer is None:
                raise BadRow(f"missing field {c.answer_field!r}; {split} rows need answers ({fields})")
            kind = "integer" if c.answers == "integer" else "math"  # (labels are read as math for tag: and regex:)
            raise BadRow(f"no {kind} answer found in field {c.answer_field!r}: {_short(answer)}")
        images = _images(row, c.image_field, self._folder) if c.image_field else ()
        self.label_paths[f"{split}-{line}"] = path
        if messages:  # the template fills the last user turn, the one the row asks
            *before, (role, last) = messages
            messages = (*before, (role, c.template.format(prompt=last)))
        return Prompt(id=f"{split}-{line}", text=c.template.format(prompt=text), label=label, images=images,
                      origin=origin, messages=messages)


def _files(config: DataConfig) -> dict[str, str | None]:
    """The file (or saved dataset) each split is read from, as the recipe gives it."""
    return {"seed": config.seed, "train": config.train, "eval": config.eval}


def _images(row: dict, field: str, folder: Path) -> tuple[Any, ...]:
    """The row's images: file paths, each checked to open as an image (a bad one is this row's error),
    or images a saved `datasets` dataset decoded already."""
    if field not in row:
        raise BadRow(f"missing image field {field!r} (fields: {', '.join(map(str, row))})")
    names = row[field] if isinstance(row[field], list) else [row[field]]
    paths = []
    for name in names:
        if hasattr(name, "getpixel"):  # a PIL image (a `datasets` Image column)
            paths.append(name)
            continue
        if not isinstance(name, str) or not name.strip():
            raise BadRow(f"field {field!r} must name an image file (or a list of them), not {_short(name)}")
        path = folder / Path(name).expanduser()
        paths.append(str(path))
        try:
            from PIL import Image, UnidentifiedImageError

            with Image.open(path) as image:
                image.verify()
        except FileNotFoundError:
            raise BadRow(f"image {name!r} (field {field!r}): no such file {show(path)}") from None
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
            reason = "not an image" if isinstance(exc, UnidentifiedImageError) else f"unreadable image ({exc})"
            raise BadRow(f"image {name!r} (field {field!r}): {reason}: {show(path)}") from None
    return tuple(paths)


@hookimpl
def corl_register_components(registry: RegistryView) -> None:
    registry.add("task", "jsonl", DataTask, DataConfig,
                 help="prompts from .jsonl / .parquet files (train unlabeled; seed and eval labeled)")
