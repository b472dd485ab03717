#!/usr/bin/env python3
"""Random Unicode texts and the pieces Python's `regex` module (Oniguruma-like semantics, \\p classes)
finds for the GPT-2 and Llama 3 split patterns, for SplitPattern.MatchesPythonRegexOnRandomUnicode.
Prints `no-regex` when the module is missing. Each line: pattern name, TAB, code points in hex joined
by ',', TAB, match lengths joined by '|'."""
import random
import sys

try:
    import regex
except ImportError:
    print("no-regex")
    sys.exit(0)

PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}
# Letters of every case kind, numbers of every kind, Unicode spaces, marks, emoji, controls.
POOL = list("aZ 0'\n\r\t sStTlLdD-!") + [
    "\u00a0", "\u3000", "\u2003", "\u0085", "\u2028", "\x0b", "\x0c", "\x1c", "\u200b", "é", "ß", "日", "本",
    "²", "٣", "Ⅻ", "½", "\u017f", "\u212a", "\u0301", "😀", "ǅ", "ʰ", "𝔸"]
random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5000):
    text = "".join(random.choice(POOL) for _ in range(random.randint(1, 14)))
    code = ",".join("%x" % ord(c) for c in text)
    for name, pattern in PATTERNS.items():
        print(name + "\t" + code + "\t" + "|".join(str(len(m)) for m in regex.findall(pattern, text)))
