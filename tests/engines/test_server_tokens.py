"""Client and server agree on tokens for any tokenizer (:meth:`ModelFolder.check_tokenizer`).

The tokenizer here is the trained tiny model's (its ``<s>`` is a BOS it does not add by itself,
as the Gemma 3 GGUF's tokenizer does not add ``<bos>``). A server that only frames the text with
special tokens is followed, exactly; any other difference is refused with the ids that differ.
The real case, a stock SGLang server of Gemma 3 and the GGUF's own tokenizer, is in
``tests/integration/test_gemma3.py``."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from presto_sgl.engines.text import ModelFolder, TokenizerView, special_framing  # noqa: E402
from presto_sgl.errors import ConfigError  # noqa: E402
from presto_sgl.models import asset_dir  # noqa: E402


class Folder(ModelFolder):
    """A server engine's model view with the tokenizer here set directly."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self.model_source = self.model_path = "served-model"


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(str(asset_dir("tiny-adder")))


def test_a_servers_bos_is_adopted_for_every_text_it_would_tokenize(tokenizer):
    folder = Folder(tokenizer)
    probe = folder.probe_text()
    plain = folder.text.encode(probe)
    bos = tokenizer.bos_token_id
    assert folder.text.encode(probe, special=True) == plain  # this tokenizer adds nothing
    folder.check_tokenizer([bos, *plain], probe)
    assert isinstance(folder.text, TokenizerView) and folder.text.framing == ((bos,), ())
    assert folder.text.encode("Q:4+5=", special=True) == [bos, *tokenizer.encode("Q:4+5=", add_special_tokens=False)]
    assert folder.text.prompt_ids("Q:4+5=", chat=True)[0] == bos  # no chat template: the plain prompt, framed
    assert folder.text.encode("Q:4+5=")[0] != bos  # continuations (program text, choices) stay unframed
    folder.check_tokenizer([bos, *plain], probe)  # agreeing now: nothing changes
    assert folder.text.framing == ((bos,), ())


def test_a_real_mismatch_names_the_first_ids_that_differ(tokenizer):
    folder = Folder(tokenizer)
    probe = folder.probe_text()
    plain = folder.text.encode(probe)
    other = [*plain[:5], (plain[5] + 1) % 10, *plain[6:]]
    with pytest.raises(ConfigError, match=r"from position 5 the server has \[.*\], this tokenizer \[") as err:
        folder.check_tokenizer(other, probe)
    assert err.value.param == "tokenizer"
    assert folder.text.framing is None
    with pytest.raises(ConfigError, match=r"the server adds special token 1 \('<s>'\), this tokenizer does not"):
        folder.check_tokenizer([1, *other], probe)
    folder.check_tokenizer(None, probe)  # a server that cannot say: no check


def test_special_framing():
    assert special_framing([2, 5, 6, 1], [5, 6], {1, 2}) == ((2,), (1,))
    assert special_framing([5, 6], [5, 6], {1, 2}) == ((), ())
    assert special_framing([9, 5, 6], [5, 6], {1, 2}) is None  # 9 is no special token
    assert special_framing([2, 5, 7], [5, 6], {1, 2}) is None
