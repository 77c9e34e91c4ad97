"""Pretrained learned optimizers: those meta-trained with `elo` and shipped inside the package,
and those published on the Hugging Face Hub in PyLO's layout (such as the paper's).

Each shipped optimizer is a small `.eqx` file (the format of [`elo.save_optimizer`][]) next to a
JSON provenance record: the command and commit that produced it, its configuration and budget,
how it was selected (on meta-validation, never on a test task) and its evaluation table. Loading
reads the package's own files: no network.
"""

import functools
import importlib.resources
import json
import os
import re
import socket
import threading
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ..optimizers._base import AbstractLearnedOptimizer
from ._optimizer_file import load_optimizer
from ._pylo import import_pylo


PRETRAINED_SCHEME = "pretrained:"
"""The prefix that names a shipped optimizer where the CLI expects a path, e.g.
`elo evaluate pretrained:small_fc_mnist8 ...`."""

HUB_SCHEME = "hf:"
"""The prefix of a Hugging Face Hub repository, e.g. `elo.pretrained("hf:OWNER/NAME")`."""

HUB_DIR_ENV = "ELO_HUB_DIR"
"""The environment variable naming a local directory of Hub repositories, `OWNER/NAME/`
each, searched before downloading."""

_HUB_FILES = ("model.safetensors", "config.json")
_REACH_TIMEOUT = 2.0
"""Seconds a Hub name waits for the Hub's host to accept a connection before reading the
cache only: `huggingface_hub` itself retries an unreachable host five times over ~23 s."""
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def _directory():
    return importlib.resources.files("elo") / "pretrained"


def available_pretrained() -> dict[str, dict[str, Any]]:
    """The shipped learned optimizers and their provenance records.

    **Returns:**

    `{name: provenance}`, where `provenance` is the JSON record shipped with the weights
    (keys include `summary`, `command`, `run_commit`, `shipped_at_commit`, `config`, `selection`
    and `evaluation`).
    """
    out = {}
    for entry in sorted(_directory().iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            out[entry.name[: -len(".json")]] = json.loads(entry.read_text())
    return out


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _unreachable(url: str, timeout: float) -> str | None:
    """Why no connection to `url`'s host (or to the proxy for it) opens within `timeout`
    seconds, name resolution included; `None` when one does."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as e:
            outcome.append(f"{host}:{port} cannot be reached ({e.strerror or e})")

    # A thread, since name resolution has no timeout of its own.
    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome[0] if outcome else f"{host}:{port} did not answer within {timeout:g} s"


def _download(repo_id: str) -> Path:
    """The directory of `repo_id`'s files in the Hugging Face cache, downloading if needed. An
    unreachable Hub (checked once, for `_REACH_TIMEOUT` seconds) leaves the cache only."""
    # The `pylo` extra, imported here so that `elo` does not need it.
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    why = None if constants.HF_HUB_OFFLINE else _unreachable(constants.ENDPOINT, _REACH_TIMEOUT)
    download = hf_hub_download
    if why is not None:
        download = functools.partial(hf_hub_download, local_files_only=True)
    try:
        path = Path(download(repo_id, _HUB_FILES[0]))
    except EntryNotFoundError:
        if why is None:
            raise
        raise ConnectionError(f"{why}, and {repo_id} is not in the Hugging Face cache") from None
    try:
        download(repo_id, _HUB_FILES[1])
    except EntryNotFoundError:
        pass  # config.json is optional: the tensors say what the optimizer is
    return path.parent


def _hub_directory(name: str, hub_dir: str | os.PathLike | None) -> Path:
    repo_id = name[len(HUB_SCHEME) :]
    if not _REPO_ID.fullmatch(repo_id):
        raise ValueError(
            f"Malformed Hub name {name!r}; expected {HUB_SCHEME}OWNER/NAME, e.g. "
            f"'{HUB_SCHEME}DiamondXL/elo'."
        )
    roots = [Path(hub_dir).expanduser()] if hub_dir is not None else []
    if os.environ.get(HUB_DIR_ENV):
        roots.append(Path(os.environ[HUB_DIR_ENV]).expanduser())
    for root in roots:
        if (root / repo_id / _HUB_FILES[0]).is_file():
            return root / repo_id
    looked = " or ".join(str(root / repo_id) for root in roots)
    local = f"no {_HUB_FILES[0]} in {looked}, and " if roots else ""
    try:
        return _download(repo_id)
    except ImportError:
        reason = "huggingface_hub is not installed (pip install 'elo-optimizers[pylo]')"
    except Exception as e:  # offline, unknown repository, HTTP errors: all end the same way
        reason = f"the download failed: {_one_line(e).rstrip('.')}"
    raise ValueError(
        f"Cannot load {name!r}: {local}{reason}. Offline, pass a local directory in the Hub "
        f"layout ({_HUB_FILES[0]}, {_HUB_FILES[1]}): elo.pretrained('/path/to/dir'), or "
        f"hub_dir=... / ${HUB_DIR_ENV} holding {repo_id}/{_HUB_FILES[0]}."
    )


def pretrained(
    name: str | os.PathLike, *, hub_dir: str | os.PathLike | None = None
) -> AbstractLearnedOptimizer:
    """A pretrained learned optimizer: shipped with `elo`, on the Hugging Face Hub, or local.

    `name` is one of:

    - a shipped optimizer, one of [`elo.available_pretrained`][]`()` (e.g.
      `"small_fc_mnist8"`), read from the package (no network);
    - `"hf:OWNER/NAME"`, a Hub repository in PyLO's layout (`model.safetensors` and
      `config.json`), e.g. the paper's `"hf:DiamondXL/elo"` (ELO, small_fc) and
      `"hf:DiamondXL/elo-celo2"` (ELO-Celo2). It is looked for first in `hub_dir`, then in the
      directory named by `$ELO_HUB_DIR` (as `OWNER/NAME/model.safetensors`), then downloaded
      with `huggingface_hub` (the `pylo` extra: `pip install "elo-optimizers[pylo]"`) into its
      cache, which later calls, and offline ones (`HF_HUB_OFFLINE=1`), read again;
    - a local path: a directory in the Hub layout or a `.safetensors` file (read with
      [`elo.import_pylo`][], hyperparameters as described there), or an `.eqx` file or run
      directory of `elo` (read with [`elo.load_optimizer`][]).

    **Arguments:**

    - `name`: as above.
    - `hub_dir`: a local directory of Hub repositories, `OWNER/NAME/` each, searched first for
      `hf:` names (e.g. copies made with `elo.export_pylo(f"{hub_dir}/OWNER/NAME", lo)` or
      `hf download OWNER/NAME --local-dir {hub_dir}/OWNER/NAME`).

    **Returns:**

    The learned optimizer (an [`elo.SmallFC`][] or [`elo.Celo2`][]). Use it with
    [`elo.as_optax`][]`(lo, num_steps=N)` or [`elo.evaluate`][].

    **Raises:**

    `ValueError` for an unknown name (the message lists the shipped ones), for a Hub name that
    is neither found locally nor downloadable (the message says how to pass a local directory),
    and for files that cannot be read ([`elo.CheckpointError`][]).

    !!! example

        ```python
        lo = elo.pretrained("small_fc_mnist8")
        opt = elo.as_optax(lo, num_steps=1000)
        print(elo.available_pretrained()["small_fc_mnist8"]["summary"])
        celo2 = elo.pretrained("hf:DiamondXL/elo-celo2")  # downloads once
        ```
    """
    if not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"pretrained expects a name or a path, got {type(name).__name__}.")
    text = os.fspath(name)
    if not text.strip():
        raise ValueError(
            f"elo.pretrained needs a name, got {text!r}: one of the shipped optimizers "
            f"({', '.join(available_pretrained()) or 'none'}), '{HUB_SCHEME}OWNER/NAME', or a "
            "path."
        )
    if text.startswith(HUB_SCHEME):
        return import_pylo(_hub_directory(text, hub_dir))
    known = available_pretrained()
    if text in known:
        with importlib.resources.as_file(_directory() / f"{text}.eqx") as path:
            return load_optimizer(path)
    path = Path(text).expanduser()
    if path.suffix == ".safetensors" or (path / _HUB_FILES[0]).is_file():
        return import_pylo(path)
    if path.exists():
        return load_optimizer(path)
    raise ValueError(
        f"Unknown pretrained optimizer {text!r}; shipped: {', '.join(known) or 'none'}; or "
        f"pass '{HUB_SCHEME}OWNER/NAME' or a local directory in the Hub layout."
    )
