"""The front door of every entry script (``src/*.py``): Hydra's ``@hydra.main`` plus one-line answers to config
mistakes and study names that need no preset file (issue 41, items 2 and 5).

    @entry("train", study_names=True)
    def main(cfg: DictConfig) -> None:
        from sparsectx.training.config import load_train_config   # torch: imported after the cheap checks
        with config_check():
            load_train_config(cfg)
        ...

Before Hydra runs, the command line is checked against the composed config (``check_command_line``): an unknown
key or group option is answered in one line with the closest valid names and the right syntax, and the cheap
checks (``cheap_checks``: unset ``???`` values, names that become folders, budget ranges) run before torch is
imported. Inside the job, ``config_check`` marks the lines that validate the config: their errors become
``ConfigError``, which the entry answers with its message alone and exit status 2. Any other exception is a bug
and keeps Hydra's report with its traceback (``HYDRA_FULL_ERROR=1`` shows a config error's traceback too).

``study_names``: ``experiment=<name>`` selects ``conf/experiment/<name>.yaml`` when that file exists and otherwise
only names the study (``experiment: <name>``, no grid): a one-key preset is registered in Hydra's ConfigStore
under that name before Hydra composes (``name_studies``).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra import compose, initialize_config_dir
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_config_search_path, get_args_parser
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sparsectx.budget import check_budget
from sparsectx.config_schema import InvalidConfigError, one_line
from sparsectx.paths import budget_tag, path_name

Task = Callable[[DictConfig], None]

EXIT_CONFIG_ERROR = 2
"""The exit status of a refused config (argparse's for a bad command line); 1 stays Hydra's, for anything else."""
STUDY_GROUP = "experiment"
"""The config group whose option may be any study name (``study_names``)."""
NAME_KEYS = ("experiment", "model.name", "method.name", "pruner.name")
"""Keys whose values become folder names under ``results_root`` / ``runs_root`` (``sparsectx.paths``)."""
BUDGET_KEYS = ("budget", "efficiency.budgets")
"""Keys holding a budget fraction or a list of them, checked by ``sparsectx.budget.check_budget``."""
LISTED_OPTIONS = 12
"""A group with at most this many options has them all listed in the answer to an unknown option."""


class ConfigError(ValueError):
    """A config the user can fix: answered with its message alone (one line, exit status 2), no traceback.

    A ``ValueError`` so that callers and tests that expect the typed configs' ``ValueError`` still catch it.
    """


@contextmanager
def config_check() -> Iterator[None]:
    """Within this block, a ``ValueError``, ``KeyError`` or OmegaConf error is raised again as ``ConfigError``.

    Wrap only the lines that validate the config (a typed config's ``load_*`` call, a cheap check): the typed
    configs report a bad value as ``ValueError`` naming the key and the fix, and OmegaConf reports a missing or
    mistyped key. Anything raised elsewhere, or of another type, is not a config error and keeps its traceback.
    """
    try:
        yield
    except ConfigError:
        raise
    except InvalidConfigError as err:  # several mistakes (sparsectx.config_schema): one line each
        raise ConfigError(str(err)) from err
    except (OmegaConfBaseException, ValueError, KeyError) as err:
        raise ConfigError(one_line(err)) from err


def refuse(err: ConfigError) -> NoReturn:
    """Exits with status 2 after printing ``err`` on one stderr line (a config with several mistakes: a line
    saying how many, then one line each); raises it instead under ``HYDRA_FULL_ERROR=1`` (Hydra's own switch
    for full traces, ``hydra/_internal/utils.py:run_and_report``)."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    print(f"error: {err if isinstance(err.__cause__, InvalidConfigError) else one_line(err)}", file=sys.stderr)
    sys.exit(EXIT_CONFIG_ERROR)


def entry(
    config_name: str, *, study_names: bool = False, version_base: str | None = None, config_path: str = "../conf"
) -> Callable[[Task], Callable[[], None]]:
    """Returns the decorator that turns ``task(cfg)`` into an entry script's ``main()``.

    ``main()`` checks the command line (``check_command_line``), then runs ``task`` under
    ``hydra.main(version_base, config_path, config_name)``: the cheap checks run on each job's config, then
    ``task``; a ``ConfigError`` from either is answered by ``refuse``. ``config_path`` is relative to the file
    that defines ``task``, as for ``hydra.main``; the job keeps that file's name (``train.log`` for ``train.py``),
    because Hydra names the job after the unwrapped task function's file
    (``hydra/_internal/utils.py:detect_calling_file_or_module_from_task_function`` follows ``__wrapped__``).

    Args:
        config_name: the primary config, ``conf/<config_name>.yaml`` (``--config-name`` replaces it).
        study_names: ``experiment=<any name>`` names a study when no preset of that name exists (``name_studies``).
        version_base: passed to ``hydra.main``.
        config_path: the config folder relative to ``task``'s file.
    """

    def decorate(task: Task) -> Callable[[], None]:
        @functools.wraps(task)
        def job(cfg: DictConfig) -> None:
            try:
                cheap_checks(cfg)
                task(cfg)
            except ConfigError as err:
                refuse(err)

        hydra_main = hydra.main(version_base=version_base, config_path=config_path, config_name=config_name)(job)
        conf_dir = (Path(inspect.getfile(task)).resolve().parent / config_path).resolve()

        @functools.wraps(task)
        def main() -> None:
            try:
                check_command_line(conf_dir, config_name, sys.argv[1:], study_names, version_base)
            except ConfigError as err:
                refuse(err)
            hydra_main()

        return main

    return decorate


def check_command_line(
    conf_dir: Path, config_name: str, argv: list[str], study_names: bool, version_base: str | None
) -> None:
    """Returns None when the command line composes, or when its mistake is one Hydra reports itself (a syntax
    error, a ``hydra.*`` override); raises ``ConfigError`` naming an unknown group option or key and its closest
    valid names, or a value the cheap checks refuse.

    The argument list is read by Hydra's own parser (``hydra/_internal/utils.py:get_args_parser``); a sweep
    (``-m seed=0,1``) is checked with the first value of each sweep. A user's ``--config-dir`` is searched as Hydra
    searches it (``user_config_dir``, ``config_search``). Commands that do not compose ``conf_dir``
    (``--config-path``, ``--shell-completion``, ``--experimental-rerun``) are left to Hydra. With ``study_names``,
    the study names are registered first (``name_studies``).
    """
    args = get_args_parser().parse_args(argv)
    if args.config_path or args.shell_completion or args.experimental_rerun:
        return
    name = args.config_name or config_name
    extra_dir = user_config_dir(args.config_dir, conf_dir) if args.config_dir else None
    with config_search(conf_dir, extra_dir, version_base):
        loader = GlobalHydra.instance().config_loader()
        try:
            overrides = OverridesParser.create(config_loader=loader).parse_overrides(args.overrides)
        except HydraException:
            return  # a syntax error: Hydra's parser message points at the character
        overrides = [override for override in overrides if not override.is_hydra_override()]
        if study_names:
            name_studies(overrides, [conf_dir] if extra_dir is None else [conf_dir, extra_dir])
        groups = {override.key_or_group for override in overrides if is_group_choice(override, loader)}
        for override in overrides:
            if override.key_or_group in groups:
                check_group_option(override, loader.get_group_options(override.key_or_group))
        one_run = [line for line in map(first_of_sweep, overrides) if line is not None]
        try:
            cfg = compose(name, overrides=one_run)
        except (HydraException, OmegaConfBaseException):
            check_keys(lambda lines: compose(name, overrides=lines), overrides, groups)
            return  # not an unknown key: Hydra's own message follows
        if not (args.help or args.hydra_help or args.cfg or args.info):
            cheap_checks(cfg)


def user_config_dir(config_dir: str, conf_dir: Path) -> Path | None:
    """Returns the absolute folder ``--config-dir`` names, or None when it is ``conf_dir`` itself (``python
    src/train.py --config-dir conf`` in a checkout); raises ``ConfigError`` when it is no folder, or when a config
    in it has the path of a shipped one.

    Hydra searches ``--config-dir`` after the primary config folder (``hydra/_internal/utils.py:run_hydra``,
    ``add_conf_dir``: the folder goes before ``structured://``, behind the package's ``conf/``), and a config is
    read from the first folder that has it (``hydra/_internal/config_repository.py:ConfigRepository.load_config``).
    A user's new files therefore extend the shipped groups, but a file named like a shipped one would be ignored
    without a word: that is refused here, naming both and the way to override a shipped default instead.
    """
    folder = Path(os.path.abspath(config_dir))  # as Hydra resolves it (add_conf_dir)
    if not folder.is_dir():
        raise ConfigError(f"--config-dir {config_dir}: no folder {folder}; name a folder of your own configs")
    if folder.resolve() == conf_dir.resolve():
        return None
    mine = [path.relative_to(folder) for path in folder.rglob("*.yaml")]
    shadowed = sorted(str(relative) for relative in mine if (conf_dir / relative).is_file())
    if shadowed:
        listed = ", ".join(f"{folder / relative} (shipped: conf/{relative})" for relative in shadowed[:3])
        more = f" and {len(shadowed) - 3} more" if len(shadowed) > 3 else ""
        raise ConfigError(
            f"--config-dir {config_dir}: {listed}{more} would be ignored: Hydra reads the shipped conf/ first and "
            "searches --config-dir after it. Give yours a new name (a new group option: model/my_tiny.yaml, then "
            "model=my_tiny), or override shipped defaults in a primary config of your own (defaults: [train, _self_], "
            "then your keys) run with --config-name <its name> (docs/install.md)"
        )
    return folder


@contextmanager
def config_search(conf_dir: Path, extra_dir: Path | None, version_base: str | None) -> Iterator[None]:
    """Within this block, Hydra's compose API reads ``conf_dir`` and then ``extra_dir`` (a user's ``--config-dir``),
    in the order ``hydra.main`` searches them: the search path ``initialize_config_dir`` builds
    (``hydra/_internal/utils.py:create_config_search_path``), with ``extra_dir`` placed as ``run_hydra``'s
    ``add_conf_dir`` places it (before ``structured://``). ``initialize_config_dir`` restores Hydra's global state
    on leaving."""
    with initialize_config_dir(config_dir=str(conf_dir), version_base=version_base):
        if extra_dir is not None:
            search_path = create_config_search_path(str(conf_dir))
            search_path.prepend(
                provider="command-line", path=f"file://{extra_dir}", anchor=SearchPathQuery(provider="schema")
            )
            GlobalHydra.instance().clear()
            Hydra.create_main_hydra2(task_name="app", config_search_path=search_path)
        yield


def check_keys(compose_with: Callable[[list[str]], DictConfig], overrides: list[Any], groups: set[str]) -> None:
    """Returns None unless a plain ``key=value`` override names a key the composed config lacks; then raises
    ``ConfigError`` for the first such key (``check_key``).

    Called after composing the whole command line failed: the config is composed again (``compose_with``: the
    primary config with the given overrides) without the plain overrides (group choices, ``+key=`` additions
    and ``~key`` deletions kept, so the keys are those of the config the user chose), and each plain override's
    key is looked up in it. None is found when the failure was something else (a value of the wrong shape);
    Hydra then reports it.
    """
    plain = [
        o for o in overrides if o.key_or_group not in groups and not (o.is_add() or o.is_force_add() or o.is_delete())
    ]
    plain_ids = {id(override) for override in plain}
    kept = [first_of_sweep(override) for override in overrides if id(override) not in plain_ids]
    try:
        config = OmegaConf.to_container(compose_with([line for line in kept if line is not None]), resolve=False)
    except (HydraException, OmegaConfBaseException):
        return
    for override in plain:
        check_key(override, config)


def is_group_choice(override: Any, loader: Any) -> bool:
    """Returns whether Hydra reads ``override`` as choosing a config group's option, by Hydra's own rule
    (``hydra/_internal/defaults_list.py:Overrides.__init__``: the key names a group and the value is no dict;
    ``~group`` deletes instead). ``loader.repository`` is ``ConfigLoaderImpl``'s (``hydra/_internal/
    config_loader_impl.py``)."""
    return (
        not override.is_delete()
        and not isinstance(override.value(), dict)
        and loader.repository.group_exists(override.key_or_group)
    )


def sweep_values(override: Any) -> list[str]:
    """Returns the option or value strings ``override`` sets: each of a sweep's (``a,b``, ``range(0,3)``,
    ``glob(*)``; none for an ``interval()``, which only a sweeper plugin enumerates), else its one value."""
    if override.is_discrete_sweep():
        return list(override.sweep_string_iterator())
    if override.is_sweep_override():
        return []
    value = override.value()
    values = value if isinstance(value, list) else [value]
    return [str(item) for item in values if item is not None]


def first_of_sweep(override: Any) -> str | None:
    """Returns ``override`` as one run's override: a sweep reduced to its first value (None: nothing to
    enumerate), anything else as typed."""
    if not override.is_sweep_override():
        return override.input_line
    values = sweep_values(override)
    return f"{override.get_key_element()}={values[0]}" if values else None


def check_group_option(override: Any, options: list[str]) -> None:
    """Returns None if every option ``override`` chooses exists; raises ``ConfigError`` naming the option typed,
    the closest options, the right syntax and, for a short list, every option."""
    group = override.key_or_group
    for option in sweep_values(override):
        if option in options:
            continue
        close = difflib.get_close_matches(option, options, n=3, cutoff=0.6)
        advice = f"did you mean {group}={close[0]}? " if close else ""
        if len(options) <= LISTED_OPTIONS:
            listing = f"Options: {', '.join(sorted(options))}"
        else:
            listing = f"{len(options)} options (ls conf/{group}/), the closest: {', '.join(close) or 'none'}"
        raise ConfigError(f"{group}={option}: conf/{group}/ has no option '{option}'; {advice}{listing}")


def check_key(override: Any, config: Mapping[str, Any]) -> None:
    """Returns None if ``override``'s key is in the composed ``config``; raises ``ConfigError`` naming the key
    typed, the closest keys and the override spelled with the closest one."""
    key = override.key_or_group
    if has_key(config, key):
        return
    value = override.input_line.partition("=")[2]
    close = closest_keys(key, list(key_paths(config)))
    if close:
        others = f" (or {', '.join(close[1:])})" if len(close) > 1 else ""
        advice = f"did you mean {close[0]}={value}?{others}"
    else:
        advice = "no key is close to it"
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "the script"
    raise ConfigError(
        f"{override.input_line}: the config has no key '{key}'; {advice} (python src/{script} --cfg job lists "
        "every key)"
    )


def has_key(config: Any, dotted: str) -> bool:
    """Returns whether the dotted key path exists in a plain container (list items by index)."""
    node = config
    for part in dotted.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def key_paths(config: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Yields the dotted path of every key in a plain container, nested mappings included (list items not)."""
    for key, value in config.items():
        path = f"{prefix}{key}"
        yield path
        if isinstance(value, Mapping):
            yield from key_paths(value, f"{path}.")


def closest_keys(typed: str, keys: Iterable[str], n: int = 3) -> list[str]:
    """Returns up to ``n`` keys closest to ``typed``, best first: by the whole dotted path (difflib ratio >= 0.6,
    as ``difflib.get_close_matches``' default), or, for a key deeper than the one typed (its prefix left out), by
    the last part alone (>= 0.8), so ``ema_decay`` finds ``method.teacher.ema_decay``; ties go to the closer
    whole path."""

    def ratio(a: str, b: str) -> float:
        return difflib.SequenceMatcher(None, a, b).ratio()

    leaf, depth = typed.rpartition(".")[2], typed.count(".")
    scored = []
    for key in keys:
        whole = ratio(typed, key)
        last = ratio(leaf, key.rpartition(".")[2]) if key.count(".") > depth else 0.0
        score = max(whole if whole >= 0.6 else 0.0, last if last >= 0.8 else 0.0)
        if score:
            scored.append((score, whole, key))
    return [key for _, _, key in sorted(scored, key=lambda item: (-item[0], -item[1], item[2]))[:n]]


def name_studies(overrides: list[Any], conf_dirs: list[Path]) -> None:
    """Returns None after registering, for each ``experiment=<name>`` without ``<conf dir>/experiment/<name>.yaml``
    in any of ``conf_dirs`` (the package's and a user's ``--config-dir``), a preset that only sets
    ``experiment: <name>`` (package ``_global_``, so it replaces the primary config's
    ``experiment`` as a preset file would); raises ``ConfigError`` for a name that is not one plain folder name.

    The preset goes to Hydra's ConfigStore, which every config search path reads (``structured://``,
    ``hydra/_internal/utils.py:create_config_search_path``): Hydra then resolves ``experiment=<name>`` as any
    group choice, in a single run and in each job of a sweep (``-m experiment=a,b``). A name close to a preset's
    (a typo of ``tiny_demo``?) is still a study of its own, said in one line on stderr.
    """
    presets = [path.stem for folder in conf_dirs for path in (folder / STUDY_GROUP).glob("*.yaml")]
    for override in overrides:
        if override.key_or_group != STUDY_GROUP or override.is_delete():
            continue
        for study in sweep_values(override):
            with config_check():
                path_name(study, STUDY_GROUP, "the command line")
            if study in presets:
                continue
            ConfigStore.instance().store(
                group=STUDY_GROUP, name=study, node={STUDY_GROUP: study}, package="_global_", provider="sparsectx"
            )
            close = difflib.get_close_matches(study, presets, n=3, cutoff=0.8)
            if close:
                print(
                    f"note: experiment={study} names a study of your own (no conf/{STUDY_GROUP}/{study}.yaml); "
                    f"the preset{'s' if len(close) > 1 else ''} close to it: {', '.join(close)}",
                    file=sys.stderr,
                )


def cheap_checks(cfg: DictConfig) -> None:
    """Returns None, or raises ``ConfigError`` for a ``???`` value left unset, a name that cannot become a
    folder (``NAME_KEYS``, ``sparsectx.paths.path_name``) or a budget outside (0, 1] (``BUDGET_KEYS``,
    ``sparsectx.budget.check_budget``). None of this imports torch, so the answer comes in a second."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        study = " (experiment: a preset in conf/experiment/, or for train, evaluate and make_tables any study name)"
        raise ConfigError(
            f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no value (??? in the config): add "
            f"{' '.join(f'{key}=<value>' for key in missing)} to the command{study if STUDY_GROUP in missing else ''}"
        )
    with config_check():
        for key in NAME_KEYS:
            name = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
            if name is not None:
                path_name(name, key)
        for key in BUDGET_KEYS:
            value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
            for budget in value if OmegaConf.is_list(value) else [] if value is None else [value]:
                if key == "budget":
                    budget_tag(budget)  # a non-number: the message the run folders' resolver gives
                check_budget(budget, key)
