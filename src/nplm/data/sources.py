"""Finding corpus files: a local copy named by config or environment, else a real download.

Every loader goes through here, so the error a user sees when data is missing is always one line
that says which setting or environment variable to use.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.request
from pathlib import Path

from nplm.errors import UserError


def sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, dest: Path, expected_sha256: str | None, timeout: float = 30.0) -> Path:
    """HTTP download to `dest` (written atomically), verified against `expected_sha256`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".part")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise UserError(f"could not download {url} ({err}); put a local copy at {dest} "
                        "or point the corpus' path option at one") from None
    got = sha256(tmp)
    if expected_sha256 and got != expected_sha256:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{url} has sha256 {got}, expected {expected_sha256}; the download is corrupt, try again")
    tmp.replace(dest)
    return dest


def read_text(path: str | Path, encoding: str = "utf-8", option: str = "corpus.path") -> str:
    """Read a corpus file. A missing file, a folder, an unreadable or empty file, or bytes that are not
    valid in `encoding` raise a one-line `UserError` naming `option`, the file and where it went wrong."""
    p = Path(path).expanduser()
    where = f"{option}={path}"
    if p.is_dir():
        raise UserError(f"{where}: is a folder, not a text file; give the path of a file")
    if not p.is_file():
        raise UserError(f"{where}: no such file ({p.resolve()}); set {option}=/path/to/file")
    try:
        data = p.read_bytes()
    except OSError as err:
        raise UserError(f"{where}: cannot be read ({err.strerror or err})") from None
    if not data.strip():
        raise UserError(f"{where}: the file is empty ({len(data)} bytes, no text); give {option} a file with text")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise UserError(
            f"{where}: not valid {encoding} at byte offset {err.start} (line {line}, byte {data[err.start]:#04x}); "
            f"set corpus.encoding to the file's encoding (e.g. corpus.encoding=latin-1) or convert the file to {encoding}"
        ) from None


def nltk_corpus_root(name: str, nltk_data: str | None, download_dir: str, allow_download: bool):
    """Locate NLTK's `corpora/<name>` (zip or folder): `nltk_data` / $NLTK_DATA / NLTK's defaults,
    then `nltk.download` into `download_dir`. Returns (NLTK path pointer, file on disk); raises a
    `UserError` saying exactly what to do when the corpus is neither present nor downloadable."""
    import nltk

    searched = [p for p in (nltk_data, os.environ.get("NLTK_DATA"), download_dir) if p]
    paths = searched + [p for p in nltk.data.path if p not in searched]
    nltk.data.path[:] = paths  # NLTK's readers refuse corpora outside nltk.data.path
    for place in paths:  # in order of precedence: a folder or a zip, whichever this place has
        for resource in (f"corpora/{name}", f"corpora/{name}.zip/{name}/"):
            try:
                return _pointer_and_file(nltk.data.find(resource, paths=[place]))
            except LookupError:
                pass
    if allow_download:
        import socket

        previous = socket.getdefaulttimeout()
        socket.setdefaulttimeout(20)
        try:
            ok = nltk.download(name, download_dir=download_dir, quiet=True, raise_on_error=False)
        except Exception:  # nltk raises assorted errors when offline
            ok = False
        finally:
            socket.setdefaulttimeout(previous)
        if ok:
            return _pointer_and_file(nltk.data.find(f"corpora/{name}.zip/{name}/", paths=[download_dir]))
    raise UserError(
        f"NLTK corpus '{name}' not found in {searched or nltk.data.path[:3]} and "
        f"{'the download failed (no network?)' if allow_download else 'downloads are off'}; "
        f"set NLTK_DATA=/dir/with/corpora/{name}.zip (or corpus.nltk_data=...), "
        f"or run: python -m nltk.downloader -d {download_dir} {name}"
    )


def _pointer_and_file(pointer):
    zipfile = getattr(pointer, "zipfile", None)
    return pointer, Path(zipfile.filename if zipfile is not None else pointer.path)
