"""README.md and docs/ stay true where code can tell: the top-level key table lists every key the schema knows,
every option of every group is named, docs/options.md is what the schema says, every `nplm-train` command
shown composes and passes the checks nplm-train runs before training, the other commands' flags exist, the
scripts and make targets named exist, the "What is checked" examples give their messages, every key of
docs/options.md has its default, links resolve, and
no page names an issue, a session or a commit, nor any experiment page or config comment an issue or
a session."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import torch

from nplm.cli.train import check_composition, check_overrides
from nplm.config import CONF_DIR
from nplm.config.schema import FIXED_GROUPS, TOP, groups
from nplm.errors import UserError

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
CONFIGURATION = DOCS / "configuration.md"
LISTED_GROUPS = ("data", "callbacks", "progress")  # the fixed groups whose keys the table lists one by one
# The worked example's option exists only in the package copy tests/test_extending.py makes and runs.
EXAMPLE_ONLY = "cbow"


def page_text(path: Path) -> str:
    return path.read_text()


def test_the_top_level_key_table_lists_every_key():
    text = page_text(CONFIGURATION)
    table = text[text.index("| key | default | what it does |"):]
    table = table[:table.index("\n\n")]
    listed = set(re.findall(r"^\| `([a-z0-9_.]+)` \|", table, re.M))
    known = set(TOP) | {f"{g}.{k}" for g in LISTED_GROUPS for k in FIXED_GROUPS[g].options[""]}
    assert listed == known, (f"missing from docs/configuration.md: {sorted(known - listed)}; "
                             f"not keys: {sorted(listed - known)}")


GROUP_FOLDERS = ("corpus", "model", "head", "tree", "optimizer", "trainer", "logger", "experiment", "sweep", "debug")


@pytest.mark.parametrize("group", GROUP_FOLDERS)
def test_every_option_of_every_group_is_named_in_the_configuration_page(group):
    text = page_text(CONFIGURATION)
    named = set(re.findall(r"`([\w/]+)`", text))
    options = [p.relative_to(CONF_DIR / group).with_suffix("").as_posix() for p in (CONF_DIR / group).rglob("*.yaml")]
    missing = [o for o in options if o not in named and o.rsplit("/", 1)[-1] not in named]
    assert not missing, f"docs/configuration.md does not name {group}={missing}"


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_options_page_is_written_from_the_schema():
    writer = load_script(DOCS / "options.py")
    page = writer.page()
    assert writer.PAGE.read_text() == page, "docs/options.md differs from the schema: python docs/options.py"
    for group in writer.REGISTERED:  # every registered key of every option is on the page
        for option, keys in groups()[group].options.items():
            assert f"### `{group}={option}`" in page
            for key in keys:
                assert f"| `{group}.{key}` |" in page, (group, option, key)


def test_the_options_page_gives_every_key_its_default():
    """Every key row of docs/options.md has a default: its yaml value (`required` where the user must set it),
    the same value train.yaml and the option files give."""
    from omegaconf import OmegaConf

    from nplm.config.rules import show
    from nplm.config.schema import yaml_default

    text = (DOCS / "options.md").read_text()
    headers = re.findall(r"^\| key \|.*$", text, re.M)
    assert headers and set(headers) == {"| key | default | allowed | what it does |"}, set(headers)
    found = re.findall(r"^\| `([\w.]+)` \| ((?:[^|\\]|\\.)*?) \|", text, re.M)
    assert len(found) == sum(line.startswith("| `") for line in text.splitlines()) >= 150
    for key, default in found:
        assert re.fullmatch(r"`[^`]+`(?: \(Lightning's\))?(?:; `[^`]+` with [\w=, /]+)*|required", default), (key, default)
    rows = dict(found)
    for group in ("data", "callbacks", "progress"):  # train.yaml's own sections
        for key in FIXED_GROUPS[group].options[""]:
            assert rows[f"{group}.{key}"] == f"`{show(yaml_default(group, key))}`", (group, key)
    trainer = OmegaConf.load(CONF_DIR / "trainer" / "default.yaml")
    assert rows["trainer.max_epochs"] == f"`{trainer.max_epochs}`"
    assert rows["tree.path"] == "required"  # tree=file: ??? in its yaml


def shown_commands(program: str) -> list[tuple[str, str]]:
    """(page, command line) of every `program ...` line in a ```bash block (continuation lines joined, the
    comment dropped) and every inline code span that starts with `program `, on every page."""
    found = []
    for path in PAGES:
        text = page_text(path)
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if line.startswith(program + " "):
                    found.append((path.name, " ".join(shlex.split(line, comments=True))))
        for span in re.findall(r"`(" + re.escape(program) + r" [^`]+)`", text):
            found.append((path.name, " ".join(shlex.split(span.replace("\n", " "), comments=True))))
    return found


def test_the_pages_show_commands():
    commands = shown_commands("nplm-train")
    assert len(commands) >= 30 and {page for page, _ in commands} >= {"README.md", "configuration.md", "gpu.md"}


@pytest.fixture
def a_machine_with_gpus(monkeypatch, tmp_path):
    """The commands for a GPU compose as on a machine with 8 of them; run folders are tried under tmp_path."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.chdir(tmp_path)


def train_commands(multirun: bool) -> dict[str, str]:
    """{command line: the page that shows it} of the `nplm-train` commands shown: runs or sweeps (`-m`)."""
    shown = {}
    for page, command in shown_commands("nplm-train"):
        if EXAMPLE_ONLY not in command and (shlex.split(command)[1] in ("-m", "--multirun")) == multirun:
            shown.setdefault(command, page)
    return shown


def passes_the_checks(page: str, command: str) -> None:
    """`command` passes what nplm-train checks before it trains: the overrides, the composed config of the run
    or of every job of the sweep, the run folder; with --help, the options it asks about exist."""
    argv = shlex.split(command)[1:]
    if "--help" in argv:
        for group, option in (a.split("=", 1) for a in argv if "=" in a):
            if group in groups():  # not the placeholder `group=option`
                assert option in groups()[group].options, (page, command)
        return
    argv = [a for a in argv if a not in ("--cfg", "job")]
    try:
        check_overrides(argv)
        check_composition(argv)
    except UserError as err:
        pytest.fail(f"{page}: {command}: {err}")


@pytest.mark.slow  # Hydra composes each: about a second apiece on a busy 2-core machine
def test_every_run_shown_passes_the_checks_before_training(a_machine_with_gpus):
    runs = train_commands(multirun=False)
    assert len(runs) >= 20
    for command, page in runs.items():
        passes_the_checks(page, command)


@pytest.mark.slow  # every job of every sweep composed and checked, and Lightning's Trainer built for them
def test_every_sweep_shown_passes_the_checks_before_any_job_starts(a_machine_with_gpus):
    sweeps = train_commands(multirun=True)
    assert len(sweeps) >= 5
    for command, page in sweeps.items():
        passes_the_checks(page, command)


@pytest.mark.parametrize("program, module", [("nplm-eval", "evaluate"), ("nplm-predict", "predict"),
                                             ("nplm-generate", "generate"), ("nplm-mix", "mix"),
                                             ("nplm-compare", "compare")])
def test_every_flag_of_the_other_commands_exists(program, module, capsys):
    main = importlib.import_module(f"nplm.cli.{module}").main
    with pytest.raises(SystemExit):
        main(["--help"])
    flags = set(re.findall(r"--[\w-]+", capsys.readouterr().out))
    shown = [(page, command) for page, command in shown_commands(program)]
    for page, command in shown:
        assert set(re.findall(r"(?<![\w-])--[\w-]+", command)) <= flags, (page, command, sorted(flags))
    text = "\n".join(page_text(p) for p in PAGES)  # flags named in prose: `nplm-eval --text FILE`
    for flag in re.findall(re.escape(program) + r" (?:CKPT )?(--[\w-]+)", text):
        assert flag in flags, (program, flag)


def test_every_script_and_make_target_named_exists():
    text = "\n".join(page_text(p) for p in PAGES)
    scripts = set(re.findall(r"python3? ((?:experiments|docs)/[\w/]+\.py)", text))
    assert len(scripts) >= 5
    for script in scripts:
        assert (REPO / script).is_file(), script
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    named = set(re.findall(r"`make ([\w-]+)`|^make ([\w-]+)", text, re.M))
    for target in {t for pair in named for t in pair if t}:
        assert target in targets, f"make {target}: no such target in the Makefile"


@pytest.mark.slow  # Hydra composes most of them
def test_what_is_checked_examples_give_the_messages_shown(a_machine_with_gpus):
    text = page_text(CONFIGURATION)
    table = text[text.index("| what | example | message |"):]
    table = table[:table.index("\n\n")]
    checked = 0
    for example, message in re.findall(r"^\| [^|]+ \| `([^`]+)`[^|]* \| `([^`]+)` \|$", table, re.M):
        if example.startswith("trainer") and example.split("=")[0] in ("trainer", "trainer.devices"):
            continue  # depends on the machine's GPUs and cores: tests/test_bad_input.py checks these
        with pytest.raises(UserError) as err:
            check_overrides(shlex.split(example))
            check_composition(shlex.split(example))
        assert str(err.value).startswith(message.split(" ...")[0].rstrip(".")), (example, str(err.value))
        checked += 1
    assert checked >= 9


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_resolves():
    for path in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page_text(path)):
            if re.match(r"[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            assert linked.exists(), f"{path.name}: {target}"
            if anchor:
                headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.M)
                assert anchor in {slug(h) for h in headings}, f"{path.name}: {target}"


# The project's internal work tracking, which no page or config comment names (an issue number may wrap a line).
TRACKING = re.compile(r"\bissues?\s+\d+|\bsessions?\b|\bthe brief\b", re.I)
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")


def test_no_page_names_an_issue_a_session_or_a_commit():
    for path in PAGES:
        text = page_text(path)
        found = TRACKING.findall(text) + COMMIT.findall(text)
        assert not found, f"{path.name}: {found}"


def test_no_experiment_page_names_an_issue_or_a_session():
    """experiments/**/*.md, generated or not; their commits stay (a result's provenance in its table or notes)."""
    pages = sorted((REPO / "experiments").rglob("*.md"))
    assert len(pages) >= 15
    for path in pages:
        found = TRACKING.findall(page_text(path))
        assert not found, f"{path.relative_to(REPO)}: {found}"


def test_no_config_comment_names_an_issue_or_a_session():
    """The comments of the shipped configs, which users read beside `nplm-train --help`."""
    files = sorted(CONF_DIR.rglob("*.yaml"))
    assert len(files) >= 50
    for path in files:
        comments = "\n".join(re.findall(r"(?:^|\s)#(.*)$", path.read_text(), re.M))
        found = TRACKING.findall(comments)
        assert not found, f"{path.relative_to(CONF_DIR)}: {found}"
