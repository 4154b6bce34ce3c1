"""Tokenization for retrieval and contradiction checks: Snowball-stemmed English words, jieba for
Chinese, numbers kept whole, stopwords dropped."""

from __future__ import annotations

import re
import threading
import unicodedata

ENGLISH_STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had
has have having he her here hers herself him himself his how i if in into is it its itself just
me more most my myself no nor not now of off on once only or other our ours ourselves out over
own same she should so some such than that the their theirs them themselves then there these
they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours yourself yourselves also yet ever s t d ll m re ve
""".split())
CHINESE_STOPWORDS = frozenset("""
的 了 是 在 和 与 及 就 都 而 也 还 又 或 即 我 你 您 他 她 它 我们 你们 他们 她们 这 那 这个 那个
之 个 吗 呢 吧 啊 呀 哦 嗯 把 被 让 给 对 从 为 以 于 着 过 等 很 么 什么 怎么 哪 哪个 谁 一个
""".split())
# fmt: on

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(
    rf"(?P<han>[{_HAN}]+)"
    r"|(?P<num>\d+(?:[.,:/]\d+)*)"
    rf"|(?P<word>[^\W\d_{_HAN}]+(?:['’][^\W\d_{_HAN}]+)*)",
    re.UNICODE,
)
_ASCII_WORD = re.compile(r"[a-z]+")


class Tokenizer:
    """Splits English and Chinese text into index terms.

    Example: ``Tokenizer()("Caroline's FX rate was fixed at 1.08。汇率固定")`` gives
    ``['carolin', 'fx', 'rate', 'fix', '1.08', '汇率', '固定']``.
    """

    def __init__(self, stem: bool = True, stopwords: bool = True, cache_size: int = 200_000):
        """Configure the tokenizer.

        Args:
            stem: apply the Snowball English stemmer to ASCII words.
            stopwords: drop very common English and Chinese function words.
            cache_size: distinct words whose normalized form is remembered.
        """
        self.stem = stem
        self.stopwords = stopwords
        self._word_cache: dict[str, str | None] = {}
        self._cache_size = cache_size
        self._stemmer = None
        self._lock = threading.Lock()
        if stem:
            import snowballstemmer

            self._stemmer = snowballstemmer.stemmer("english")

    def _word(self, word: str) -> str | None:
        cached = self._word_cache.get(word, "")
        if cached != "":
            return cached
        base = re.split(r"['’]", word, maxsplit=1)[0]  # caroline's -> caroline, don't -> don
        term: str | None = base
        if self.stopwords and (base in ENGLISH_STOPWORDS or word in ENGLISH_STOPWORDS):
            term = None
        elif self._stemmer is not None and _ASCII_WORD.fullmatch(base):
            with self._lock:  # snowballstemmer objects are not thread-safe
                term = self._stemmer.stemWord(base)
        if len(self._word_cache) >= self._cache_size:
            self._word_cache.clear()
        self._word_cache[word] = term
        return term

    def _han(self, run: str) -> list[str]:
        jieba = _jieba()
        terms = []
        for piece in jieba.lcut_for_search(run):
            if self.stopwords and piece in CHINESE_STOPWORDS:
                continue
            terms.append(piece)
        return terms

    def __call__(self, text: str) -> list[str]:
        """Tokenize text.

        Args:
            text: any text.

        Returns:
            Index terms in text order (repeats kept: BM25 counts them).
        """
        text = unicodedata.normalize("NFKC", text).casefold()
        terms: list[str] = []
        for match in _TOKEN.finditer(text):
            kind = match.lastgroup
            value = match.group()
            if kind == "han":
                terms.extend(self._han(value))
            elif kind == "num":
                terms.append(value)
            else:
                term = self._word(value)
                if term:
                    terms.append(term)
        return terms


_HAN_RUN = re.compile(rf"[{_HAN}]+")


def han_bigrams(text: str) -> list[str]:
    """The character bigrams of every run of Han characters in a text (a lone character stands for
    itself); nothing for any other script.

    A second lexical view of Chinese beside jieba's words: it matches where the segmenter cut a
    phrase differently in the memory and in the query (``冰淇淋店`` / ``冰淇淋``, names, new
    words), which words alone miss. Example: ``han_bigrams("Bart吃了冰淇淋")`` gives
    ``['吃了', '了冰', '冰淇', '淇淋']``.

    Args:
        text: any text.

    Returns:
        Bigrams in text order (repeats kept: BM25 counts them).
    """
    text = unicodedata.normalize("NFKC", text)
    terms: list[str] = []
    for run in _HAN_RUN.findall(text):
        if len(run) == 1:
            terms.append(run)
        else:
            terms.extend(run[i : i + 2] for i in range(len(run) - 1))
    return terms


_jieba_module = None
_jieba_lock = threading.Lock()


def _jieba():
    """jieba, imported and initialized once, quietly (its dictionary loads in about 1 s)."""
    global _jieba_module
    if _jieba_module is None:
        with _jieba_lock:
            if _jieba_module is None:
                import logging

                import jieba

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba_module = jieba
    return _jieba_module


tokenize = Tokenizer()
"""The default tokenizer."""
