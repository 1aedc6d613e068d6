"""corpus=ptb / wikitext2 / wikitext103: downloads from a local HTTP server (loopback only), checksums,
interrupted downloads, local copies, the published statistics, and the token-id cache."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import random
import socket
import tarfile
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from nplm.data import id_cache
from nplm.data.corpora.ptb import PTB
from nplm.data.corpora.published import Published
from nplm.data.corpora.wikitext import WikiText2, WikiText103
from nplm.data.datamodule import LMDataModule
from nplm.data.vocabulary import Vocabulary
from nplm.errors import UserError

from conftest import compose_cfg

SPLITS = ("train", "valid", "test")
WORDS = ["the", "N", "of", "to", "a", "in", "and", "<unk>", "for", "is", "market", "stock", "said", "it"]


@pytest.fixture(autouse=True)
def no_local_copies(monkeypatch):
    for env in ("NPLM_PTB_DIR", "NPLM_WIKITEXT2_DIR", "NPLM_WIKITEXT103_DIR"):
        monkeypatch.delenv(env, raising=False)


def split_texts(seed: int = 0, blank_lines: bool = False) -> dict[str, str]:
    """Small split files in the corpus' line format: ' w1 w2 ... \\n' (and ' \\n' blank lines)."""
    rng = random.Random(seed)
    texts = {}
    for split, n_lines in zip(SPLITS, (40, 8, 9)):
        lines = []
        for i in range(n_lines):
            if blank_lines and i % 4 == 3:
                lines.append(" \n")
            else:
                lines.append(" " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + " \n")
        texts[split] = "".join(lines)
    texts["train"] += " " + " ".join(WORDS) + " \n"  # every word in train: a closed vocabulary, as PTB's
    return texts


def statistics(texts: dict[str, str]) -> Published:
    """The counts of `texts` as the published figures count them (words, lines, train types + <eos>)."""
    return Published(words={s: len(t.split()) for s, t in texts.items()},
                     lines={s: t.count("\n") for s, t in texts.items()},
                     types=len(set(texts["train"].split())) + 1, source="this test")


def ptb_tarball(texts: dict[str, str]) -> bytes:
    """simple-examples.tgz's layout: simple-examples/data/ptb.*.txt among other files."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        members = {f"simple-examples/data/ptb.{s}.txt": texts[s].encode() for s in SPLITS}
        members["simple-examples/data/ptb.char.train.txt"] = b"a _ b\n"
        members["simple-examples/1-train/README"] = b"rnnlm examples\n"
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def wikitext_zip(texts: dict[str, str], folder: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for s in SPLITS:
            z.writestr(f"{folder}/wiki.{s}.tokens", texts[s])
    return out.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Server:
    """A threaded HTTP server on 127.0.0.1 (ephemeral port) serving `files` {path: bytes}; a path in
    `cut` is sent with its full Content-Length but only its first half, then the connection closes."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.cut: set[str] = set()
        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.path in server.cut:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                else:
                    self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)  # (stops in 10 ms)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def corpus_cfg(tmp_path: Path, name: str, *overrides: str) -> tuple[dict, str]:
    """The composed `corpus=name` group (the real yaml) and paths.data_dir."""
    cfg = compose_cfg(tmp_path, f"corpus={name}", *overrides)
    return OmegaConf.to_container(cfg.corpus, resolve=True), cfg.paths.data_dir


def datamodule(cfg: dict, data_dir: str, k: int = 3) -> LMDataModule:
    dm = LMDataModule(cfg, k, 8, 16, data_dir=data_dir)
    dm.setup()
    return dm


def cache_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


# -- downloads ---------------------------------------------------------------------------------------------
def test_ptb_downloads_unpacks_and_counts_as_constructed(tmp_path, server, monkeypatch):
    texts = split_texts()
    server.files["/simple-examples.tgz"] = ptb_tarball(texts)
    monkeypatch.setattr(PTB, "member_sha256", {s: sha(texts[s].encode()) for s in SPLITS})
    monkeypatch.setattr(PTB, "published", statistics(texts))
    cfg, data_dir = corpus_cfg(tmp_path, "ptb", f"corpus.url={server.url}/simple-examples.tgz")
    assert cfg["verify"] and cfg["eos"] and cfg["path"] is None
    dm = datamodule(cfg, data_dir)
    # unpacked into paths.data_dir/ptb, the archive and its other files not kept
    assert cache_files(Path(data_dir) / "ptb") == ["ptb.test.txt", "ptb.train.txt", "ptb.valid.txt"]
    for s in SPLITS:
        words, lines = len(texts[s].split()), texts[s].count("\n")
        assert dm.stats[s].tokens == words + lines  # one <eos> per line
        assert dm.vocab.decode(dm.ids[s][:3]) == texts[s].split()[:3]
        assert (dm.ids[s] == dm.vocab.index["<eos>"]).sum() == lines
    assert len(dm.vocab) == len(WORDS) + 1 == PTB.published.types  # |V| with <eos> counted
    assert dm.stats["train"].oov_rate == pytest.approx(texts["train"].split().count("<unk>") / dm.stats["train"].tokens)
    assert sum(dm.vocab.counts) == dm.stats["train"].tokens
    # a second run finds the cache and downloads nothing
    datamodule(cfg, data_dir)
    assert server.requests == ["/simple-examples.tgz"]


def test_wikitext_downloads_with_the_archive_checksum(tmp_path, server, monkeypatch):
    texts = split_texts(1, blank_lines=True)
    archive = wikitext_zip(texts, "wikitext-2")
    server.files["/wikitext-2-v1.zip"] = archive
    monkeypatch.setattr(WikiText2, "published", statistics(texts))
    cfg, data_dir = corpus_cfg(tmp_path, "wikitext2", f"corpus.url={server.url}/wikitext-2-v1.zip",
                               f"corpus.sha256={sha(archive)}")
    dm = datamodule(cfg, data_dir)
    blank = texts["train"].count(" \n") - texts["train"].count("  \n")
    assert blank > 0
    assert dm.stats["train"].tokens == len(texts["train"].split()) + texts["train"].count("\n")  # blank lines' <eos> too
    assert cache_files(Path(data_dir) / "wikitext2") == sorted(f"wiki.{s}.tokens" for s in SPLITS)


def test_a_corrupt_download_is_refused_naming_both_checksums_and_leaves_the_cache_clean(tmp_path, server):
    texts = split_texts(2, blank_lines=True)
    good = wikitext_zip(texts, "wikitext-103")
    corrupt = good[:-40] + bytes(40)
    server.files["/wikitext-103-v1.zip"] = corrupt
    cfg, data_dir = corpus_cfg(tmp_path, "wikitext103", f"corpus.url={server.url}/wikitext-103-v1.zip",
                               f"corpus.sha256={sha(good)}")
    with pytest.raises(UserError) as info:
        datamodule(cfg, data_dir)
    message = str(info.value)
    assert "\n" not in message
    assert f"has sha256 {sha(corrupt)}, expected {sha(good)}" in message
    assert cache_files(Path(data_dir) / "wikitext103") == []
    assert not (Path(data_dir) / "ids").exists() or cache_files(Path(data_dir) / "ids") == []


def test_an_interrupted_download_leaves_nothing_and_a_retry_succeeds(tmp_path, server, monkeypatch):
    texts = split_texts(3, blank_lines=True)
    archive = wikitext_zip(texts, "wikitext-103")
    server.files["/wikitext-103-v1.zip"] = archive
    server.cut.add("/wikitext-103-v1.zip")
    monkeypatch.setattr(WikiText103, "published", statistics(texts))
    cfg, data_dir = corpus_cfg(tmp_path, "wikitext103", f"corpus.url={server.url}/wikitext-103-v1.zip",
                               f"corpus.sha256={sha(archive)}")
    with pytest.raises(UserError, match=rf"stopped after {len(archive) // 2:,} of {len(archive):,} bytes"):
        datamodule(cfg, data_dir)
    assert cache_files(Path(data_dir) / "wikitext103") == []
    server.cut.clear()
    dm = datamodule(cfg, data_dir)
    assert dm.stats["valid"].tokens == len(texts["valid"].split()) + texts["valid"].count("\n")


def test_an_interrupted_download_without_a_published_checksum_is_caught_too(tmp_path, server, monkeypatch):
    """simple-examples.tgz has no published checksum: the length check alone catches the cut."""
    texts = split_texts(4)
    server.files["/simple-examples.tgz"] = ptb_tarball(texts)
    server.cut.add("/simple-examples.tgz")
    cfg, data_dir = corpus_cfg(tmp_path, "ptb", f"corpus.url={server.url}/simple-examples.tgz")
    assert cfg["sha256"] is None
    with pytest.raises(UserError, match="stopped after"):
        datamodule(cfg, data_dir)
    assert cache_files(Path(data_dir) / "ptb") == []


def test_a_ptb_file_that_is_not_the_published_one_is_refused(tmp_path, server):
    """The tarball's files are checked against their published SHA-256 (PTB.member_sha256)."""
    texts = split_texts(5)
    server.files["/simple-examples.tgz"] = ptb_tarball(texts)
    cfg, data_dir = corpus_cfg(tmp_path, "ptb", f"corpus.url={server.url}/simple-examples.tgz")
    with pytest.raises(UserError) as info:
        datamodule(cfg, data_dir)
    assert (f"simple-examples/data/ptb.train.txt in {Path(data_dir) / 'ptb' / 'simple-examples.tgz'} has sha256 "
            f"{sha(texts['train'].encode())}, expected {PTB.member_sha256['train']}") in str(info.value)
    assert cache_files(Path(data_dir) / "ptb") == []


def test_the_split_files_from_a_mirror_folder(tmp_path, server, monkeypatch):
    """corpus.url ending in / : the three files one by one (Zaremba's mirror of the PTB files)."""
    texts = split_texts(6)
    for s in SPLITS:
        server.files[f"/data/ptb.{s}.txt"] = texts[s].encode()
    monkeypatch.setattr(PTB, "member_sha256", {s: sha(texts[s].encode()) for s in SPLITS})
    cfg, data_dir = corpus_cfg(tmp_path, "ptb", f"corpus.url={server.url}/data/", "corpus.verify=false")
    dm = datamodule(cfg, data_dir)
    assert dm.stats["test"].tokens == len(texts["test"].split()) + texts["test"].count("\n")


def test_offline_with_no_copy_says_which_files_to_put_where(tmp_path):
    with socket.socket() as s:  # a port nobody listens on: the download fails at once, as offline
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    cfg, data_dir = corpus_cfg(tmp_path, "ptb", f"corpus.url=http://127.0.0.1:{dead}/simple-examples.tgz")
    with pytest.raises(UserError) as info:
        datamodule(cfg, data_dir)
    message = str(info.value)
    cache = Path(data_dir) / "ptb"
    assert "\n" not in message
    assert message.startswith(f"could not download http://127.0.0.1:{dead}/simple-examples.tgz (")
    assert message.endswith(f"; put ptb.train.txt, ptb.valid.txt, ptb.test.txt (the data/ folder of "
                            f"simple-examples.tgz) in {cache}, or set NPLM_PTB_DIR=/folder/with/them "
                            "(or corpus.path=...)")
    cfg, data_dir = corpus_cfg(tmp_path, "wikitext103", "corpus.download=false")
    with pytest.raises(UserError, match=r"^corpus=wikitext103: no local copy and corpus.download=false; put "
                                        r"wiki.train.tokens, wiki.valid.tokens, wiki.test.tokens \(the "
                                        r"wikitext-103/ folder of wikitext-103-v1.zip\) in .*wikitext103, or set "
                                        r"NPLM_WIKITEXT103_DIR="):
        datamodule(cfg, data_dir)


# -- local copies --------------------------------------------------------------------------------------------
def test_a_local_copy_from_the_environment_or_corpus_path(tmp_path, monkeypatch):
    texts = split_texts(7)
    folder = tmp_path / "copy" / "simple-examples" / "data"  # the unpacked tarball's layout
    folder.mkdir(parents=True)
    for s in SPLITS:
        (folder / f"ptb.{s}.txt").write_text(texts[s])
    monkeypatch.setenv("NPLM_PTB_DIR", str(tmp_path / "copy"))
    cfg, data_dir = corpus_cfg(tmp_path, "ptb", "corpus.verify=false", "corpus.download=false")
    assert cfg["path"] == str(tmp_path / "copy")
    dm = datamodule(cfg, data_dir)
    assert set(dm.files) == {str(folder / f"ptb.{s}.txt") for s in SPLITS}
    # the tarball itself as corpus.path: unpacked into the cache once
    tarball = tmp_path / "simple-examples.tgz"
    tarball.write_bytes(ptb_tarball(texts))
    monkeypatch.setattr(PTB, "member_sha256", {s: sha(texts[s].encode()) for s in SPLITS})
    cfg, data_dir = corpus_cfg(tmp_path, "ptb", f"corpus.path={tarball}", "corpus.verify=false")
    assert datamodule(cfg, data_dir).ids["train"].tolist() == dm.ids["train"].tolist()
    monkeypatch.setattr(id_cache, "_read_split", None)  # the second run reads neither the tarball nor the text
    monkeypatch.setattr(PTB, "_unpack", None)
    assert datamodule(cfg, data_dir).ids["train"].tolist() == dm.ids["train"].tolist()
    with pytest.raises(UserError, match=r"^corpus.path=.*nowhere: no such file or folder; give the folder holding"):
        datamodule({**cfg, "path": str(tmp_path / "nowhere")}, data_dir)


def test_files_that_differ_from_the_published_counts_are_refused(tmp_path, monkeypatch):
    texts = split_texts(8)
    for s in SPLITS:
        (tmp_path / f"ptb.{s}.txt").write_text(texts[s])
    cfg, data_dir = corpus_cfg(tmp_path, "ptb", f"corpus.path={tmp_path}")
    train = statistics(texts)
    with pytest.raises(UserError) as info:
        datamodule(cfg, data_dir)
    assert str(info.value) == (
        f"corpus=ptb: {tmp_path / 'ptb.train.txt'} has {train.words['train']:,} words, {train.lines['train']:,} "
        f"lines, {train.types:,} types; the published train split has 887,521 words, 42,068 lines, 10,000 types "
        "(the standard PTB statistics): a different version or preprocessing; replace it with the distributed "
        "file, or set corpus.verify=false to use it anyway")
    monkeypatch.setattr(PTB, "published", train)  # the counts as constructed: accepted
    assert len(datamodule(cfg, data_dir).vocab) == train.types


def test_the_published_statistics():
    """The figures each corpus is checked against (module docstrings give the sources)."""
    ptb = PTB.published
    assert (ptb.words["train"], ptb.lines["train"], ptb.types) == (887_521, 42_068, 10_000)
    assert [ptb.tokens(s) for s in SPLITS] == [929_589, 73_760, 82_430]
    assert [WikiText2.published.tokens(s) for s in SPLITS] == [2_088_628, 217_646, 245_569]
    assert [WikiText103.published.tokens(s) for s in SPLITS] == [103_227_021, 217_646, 245_569]
    assert WikiText103.published.words["train"] == 101_425_671  # the file's `wc -w`
    assert (WikiText2.published.types, WikiText103.published.types) == (33_278, 267_735)


def test_tokens_of_any_text_as_the_corpus_tokenises_its_own():
    assert PTB.tokens({"name": "ptb", "eos": True}, " a b \n\n c\r\n") == ["a", "b", "<eos>", "<eos>", "c", "<eos>"]
    assert WikiText2.tokens({"name": "wikitext2", "eos": False}, " a b \n c") == ["a", "b", "c"]


# -- the token-id cache ----------------------------------------------------------------------------------------
def local_ptb(tmp_path: Path, seed: int = 9) -> tuple[dict, str, dict[str, str]]:
    texts = split_texts(seed)
    folder = tmp_path / "ptb_copy"
    folder.mkdir(exist_ok=True)
    for s in SPLITS:
        (folder / f"ptb.{s}.txt").write_text(texts[s])
    cfg, data_dir = corpus_cfg(tmp_path, "ptb", f"corpus.path={folder}", "corpus.verify=false")
    return cfg, data_dir, texts


def test_the_ids_are_built_once_and_memory_mapped_later(tmp_path, monkeypatch):
    cfg, data_dir, texts = local_ptb(tmp_path)
    first = datamodule(cfg, data_dir)
    assert first.id_cache.built
    folder = first.id_cache.cache_dir
    assert folder.parent == Path(data_dir) / "ids"
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "test.npy", "train.npy", "valid.npy",
                                                        "vocab.json"]
    assert not list(folder.parent.glob(".*.part"))

    def never(*args, **kwargs):
        raise AssertionError("the text was read again")

    monkeypatch.setattr(id_cache, "_read_split", never)
    monkeypatch.setattr(id_cache, "_write_ids", never)
    monkeypatch.setattr(id_cache.sources, "sha256", never)  # unchanged files are not even hashed again
    second = datamodule(cfg, data_dir)
    assert not second.id_cache.built and second.id_cache.cache_dir == folder
    assert isinstance(np.load(folder / "train.npy", mmap_mode="r"), np.memmap)
    for s in SPLITS:
        assert second.ids[s].dtype == torch.long and torch.equal(second.ids[s], first.ids[s])
    assert second.vocab.tokens == first.vocab.tokens and second.vocab.counts == first.vocab.counts
    assert second.stats == first.stats


def test_a_changed_file_or_setting_rebuilds_the_ids(tmp_path, monkeypatch):
    cfg, data_dir, texts = local_ptb(tmp_path)
    base = datamodule(cfg, data_dir).id_cache.cache_dir
    assert not datamodule(cfg, data_dir).id_cache.built
    for change in ({"min_count": 2}, {"eos": False}, {"max_vocab": 5}, {"vocab_from": "all"}):
        dm = datamodule({**cfg, **change}, data_dir)
        assert dm.id_cache.built and dm.id_cache.cache_dir != base, change
    assert len(datamodule({**cfg, "max_vocab": 5}, data_dir).vocab) == 5
    assert "<eos>" not in datamodule({**cfg, "eos": False}, data_dir).vocab.index
    train = Path(cfg["path"]) / "ptb.train.txt"
    train.write_text(texts["train"] + " the market said \n")
    dm = datamodule(cfg, data_dir)
    assert dm.id_cache.built and dm.id_cache.cache_dir != base
    assert dm.vocab.decode(dm.ids["train"][-4:]) == ["the", "market", "said", "<eos>"]


def test_an_interrupted_build_leaves_no_cache(tmp_path, monkeypatch):
    cfg, data_dir, _ = local_ptb(tmp_path)
    real = id_cache._write_ids

    def fail_on_test(chunks, remap, path):
        if path.name == "test.npy":
            raise KeyboardInterrupt
        return real(chunks, remap, path)

    monkeypatch.setattr(id_cache, "_write_ids", fail_on_test)
    with pytest.raises(KeyboardInterrupt):
        datamodule(cfg, data_dir)
    ids = Path(data_dir) / "ids"
    assert [p.name for p in ids.iterdir() if p.is_dir()] == []
    monkeypatch.setattr(id_cache, "_write_ids", real)
    assert datamodule(cfg, data_dir).id_cache.built


def test_a_given_vocabulary_encodes_through_its_own_cache(tmp_path):
    cfg, data_dir, texts = local_ptb(tmp_path)
    built = datamodule(cfg, data_dir)
    vocab = Vocabulary(["the", "of", "<eos>", "<unk>"], [1, 1, 1, 1], unk="<unk>")  # a checkpoint's
    dm = LMDataModule(cfg, 3, 8, 16, data_dir=data_dir, vocab=vocab)
    dm.setup()
    assert dm.vocab is vocab and dm.id_cache.cache_dir != built.id_cache.cache_dir
    expected = vocab.encode([t for line in texts["valid"].splitlines() for t in line.split() + ["<eos>"]])
    assert torch.equal(dm.ids["valid"], expected)
    assert dm.stats["valid"].oov_rate == pytest.approx(vocab.oov_rate(
        [t for line in texts["valid"].splitlines() for t in line.split() + ["<eos>"]]))


@pytest.mark.slow  # two runs
def test_nplm_train_on_a_local_ptb_copy_and_its_tree_read_again(tmp_path, monkeypatch):
    """nplm-train end to end; a second run reads the ids and the tree cached beside them."""
    from nplm.training import tree_phase
    from nplm.training.train import train

    cfg, data_dir, _ = local_ptb(tmp_path)
    overrides = ["corpus=ptb", f"corpus.path={cfg['path']}", "corpus.verify=false", "model.context_size=2",
                 "model.embed_dim=8", "model.hidden_dim=8", "data.batch_size=16", "trainer.max_epochs=1",
                 "head=hierarchical", "tree=huffman"]
    result = train(compose_cfg(tmp_path, *overrides))
    assert result["test/ppl"] > 1
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert record["status"] == "finished" and record["corpus"]["vocab_size"] == len(WORDS) + 1
    trees = list((Path(data_dir) / "ids").glob("ptb-*/trees/huffman-*.json"))
    assert len(trees) == 1

    def never(*args, **kwargs):
        raise AssertionError("the tree was built again")

    monkeypatch.setattr(tree_phase, "build_tree", never)
    monkeypatch.setattr(id_cache, "_read_split", never)
    again = compose_cfg(tmp_path, *overrides)
    again.paths.output_dir = str(tmp_path / "run2")
    assert train(again)["test/ppl"] == pytest.approx(result["test/ppl"])


@pytest.mark.parametrize("eos,blank_lines", [(True, True), (True, False), (False, True)])
def test_streamed_ids_are_the_tokens_of_the_text(tmp_path, eos, blank_lines):
    """Blocks of lines read as the whole text tokenises: blank lines, CRLF, no final newline, <unk>."""
    text = " a b \r\n \n\nc <unk> a\n d" + " e f" * 3
    files = {}
    for s in SPLITS:
        files[s] = tmp_path / f"{s}.txt"
        files[s].write_bytes(text.encode())
    lines = id_cache.LineFiles("t", files, eos=eos, blank_lines=blank_lines)
    got = id_cache.load_ids(lines, {"unk": "<unk>"}, tmp_path / "data")
    expected = lines.tokens(text)
    assert got.vocab.decode(got.ids["train"]) == expected
    assert got.tokens["train"] == len(expected)
    assert got.stats["train"]["words"] == len(text.split()) and got.stats["train"]["lines"] == 5
    assert got.oov_rate["valid"] == pytest.approx(1 / len(expected))
    assert got.vocab.counts == [expected.count(t) for t in got.vocab.tokens]
