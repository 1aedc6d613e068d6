"""Finding corpus files: a local copy named by config or environment, else a real download.

Every loader goes through here, so the error a user sees when data is missing is always one line
that says which setting or environment variable to use.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import tarfile
import tempfile
import urllib.request
import zipfile
import zlib
from pathlib import Path

from nplm.errors import UserError
from nplm.files import FIXES, cannot_write


def sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, dest: Path, expected_sha256: str | None, timeout: float = 30.0, fix: str | None = None) -> Path:
    """HTTP download to `dest`, verified against `expected_sha256` (None: unverified). Written under a
    unique temporary name beside `dest` and renamed into place only once complete and verified, so
    neither a failed, interrupted or corrupt download nor two jobs downloading at once leave a partial
    file at `dest`. A failure raises a one-line `UserError` ending with `fix` (default: where to put a
    local copy)."""
    fix = fix or f"put a local copy at {dest} or point the corpus' path option at one"
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    except OSError as err:  # downloads go to paths.data_dir (the commands' --data-dir)
        raise cannot_write(dest.parent, err, fix=f"{FIXES.get(err.errno, 'pick another folder')} (set paths.data_dir, "
                           f"or --data-dir), or {fix}") from None
    tmp = Path(name)
    try:
        digest, received, expected_size = hashlib.sha256(), 0, None
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
                length = response.headers.get("Content-Length")
                expected_size = int(length) if length and length.isdigit() else None
                for block in iter(lambda: response.read(1 << 20), b""):
                    out.write(block)
                    digest.update(block)
                    received += len(block)
        except (OSError, http.client.HTTPException, ValueError) as err:
            raise UserError(f"could not download {url} ({_reason(err)}); {fix}") from None
        if expected_size is not None and received != expected_size:  # http.client returns a short body silently
            raise UserError(f"the download of {url} stopped after {received:,} of {expected_size:,} bytes "
                            f"(connection closed); nothing was kept, run again or {fix}")
        got = digest.hexdigest()
        if expected_sha256 and got != expected_sha256.lower():
            raise UserError(f"{url} has sha256 {got}, expected {expected_sha256}; the download is corrupt, "
                            "try again (nothing was kept)")
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)  # gone already after the rename
    return dest


def _reason(err: BaseException) -> str:
    reason = getattr(err, "reason", None) or err
    return " ".join(str(reason).split()) or type(err).__name__


def unpack(archive: Path, members: dict[str, Path], expected_sha256: dict[str, str] | None = None,
           fix: str = "delete it and download it again") -> None:
    """Extract archive members (.tar, .tgz, .tar.gz or .zip; `members`: name in the archive -> destination)
    all or nothing: each is written under a temporary name, checked against `expected_sha256[name]` when
    given, and the files are renamed into place only once every one is complete and verified. A member is
    found by its full name, else by its file name if exactly one member has it."""
    temps: dict[str, Path] = {}
    try:
        try:
            with _open_archive(archive) as (names, open_member):
                for member, dest in members.items():
                    found = _find_member(member, names)
                    if found is None:
                        raise UserError(f"{archive} has no {member}: not the expected archive; {fix}")
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
                    temps[member] = Path(name)
                    digest = hashlib.sha256()
                    with os.fdopen(fd, "wb") as out, open_member(found) as src:
                        for block in iter(lambda: src.read(1 << 20), b""):
                            out.write(block)
                            digest.update(block)
                    want = (expected_sha256 or {}).get(member)
                    if want and digest.hexdigest() != want:
                        raise UserError(f"{found} in {archive} has sha256 {digest.hexdigest()}, expected {want}; "
                                        f"not the published file; {fix}")
        except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile, zlib.error) as err:
            raise UserError(f"{archive}: cannot be unpacked ({_reason(err)}); {fix}") from None
        for member, dest in members.items():
            temps.pop(member).replace(dest)
    finally:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _open_archive(archive: Path):
    """(member names, open(name) -> binary file) of a zip or tar archive."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            yield z.namelist(), z.open
    else:
        with tarfile.open(archive) as t:
            files = {m.name.removeprefix("./"): m for m in t.getmembers() if m.isfile()}
            yield list(files), lambda name: t.extractfile(files[name])


def _find_member(member: str, names: list[str]) -> str | None:
    if member in names:
        return member
    same = [n for n in names if n.rsplit("/", 1)[-1] == member.rsplit("/", 1)[-1]]
    return same[0] if len(same) == 1 else None


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
