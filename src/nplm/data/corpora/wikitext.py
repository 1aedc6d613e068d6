"""`corpus=wikitext2` and `corpus=wikitext103`: WikiText (Merity et al. 2016, "Pointer Sentinel Mixture
Models"), the tokenised word-level v1 archives wikitext-2-v1.zip and wikitext-103-v1.zip.

Wikipedia Good and Featured articles, tokenised (" @-@ " for a hyphen inside a word, " @,@ " and
" @.@ " in numbers), case kept, words seen fewer than 3 times replaced by `<unk>` in the files, headings
as " = Title = " lines, a blank line between paragraphs. Splits as distributed; WikiText-2 and
WikiText-103 share the valid and test articles. The published token counts put one `<eos>` after
every line, blank lines included (the convention of PyTorch's word_language_model and the papers).
"""

from __future__ import annotations

from nplm.data.corpora import register_corpus
from nplm.data.corpora.published import KEYS, Published, PublishedCorpus

# Merity et al. (2016), Table 1: tokens (one <eos> per line) 2,088,628 / 103,227,021 train, 217,646 valid,
# 245,569 test; |V| 33,278 / 267,735. Lines: torchtext's and Hugging Face's line counts. Words = tokens
# - lines (WikiText-103's 101,425,671 training words is also the file's `wc -w`).
VALID_TEST_WORDS = {"valid": 217_646 - 3_760, "test": 245_569 - 4_358}
VALID_TEST_LINES = {"valid": 3_760, "test": 4_358}
FILES = {"train": "wiki.train.tokens", "valid": "wiki.valid.tokens", "test": "wiki.test.tokens"}


@register_corpus("wikitext2", keys=KEYS)
class WikiText2(PublishedCorpus):
    """WikiText-2 (v1, tokenised): 33,278 words with <unk> and <eos>, 2,088,628 training tokens."""

    folder = "wikitext2"
    env = "NPLM_WIKITEXT2_DIR"
    files = FILES
    members = {split: f"wikitext-2/{file}" for split, file in FILES.items()}
    subdirs = ("", "wikitext-2")
    origin = "the wikitext-2/ folder of wikitext-2-v1.zip"
    published = Published(words={"train": 2_088_628 - 36_718, **VALID_TEST_WORDS},
                          lines={"train": 36_718, **VALID_TEST_LINES}, types=33_278, source="Merity et al. 2016")


@register_corpus("wikitext103", keys=KEYS)
class WikiText103(PublishedCorpus):
    """WikiText-103 (v1, tokenised): 267,735 words with <unk> and <eos>, 103,227,021 training tokens."""

    folder = "wikitext103"
    env = "NPLM_WIKITEXT103_DIR"
    files = FILES
    members = {split: f"wikitext-103/{file}" for split, file in FILES.items()}
    subdirs = ("", "wikitext-103")
    origin = "the wikitext-103/ folder of wikitext-103-v1.zip"
    published = Published(words={"train": 103_227_021 - 1_801_350, **VALID_TEST_WORDS},
                          lines={"train": 1_801_350, **VALID_TEST_LINES}, types=267_735,
                          source="Merity et al. 2016")
