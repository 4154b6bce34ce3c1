"""Context budgets: tiktoken encodings loaded from installed packages (verified by hash) and the
`ContextBuilder` that packs system prompt, memories and dialogue into a token budget."""

from engine.budget.builder import BudgetError, Context, ContextBuilder, split_sentences
from engine.budget.tokens import (
    ENCODING_NAMES,
    EncodingIntegrityError,
    EncodingUnavailable,
    TokenCounter,
    UnknownEncoding,
    counter,
    get_encoding,
)

__all__ = [
    "ENCODING_NAMES", "BudgetError", "Context", "ContextBuilder", "EncodingIntegrityError",
    "EncodingUnavailable", "TokenCounter", "UnknownEncoding", "counter", "get_encoding",
    "split_sentences",
]
