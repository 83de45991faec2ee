# SPDX-License-Identifier: Apache-2.0
"""Reference fixtures for servekit's GPT-2 tokenizer, made with Hugging Face's GPT2TokenizerFast.

Writes, under tests/fixtures/tokenizer/:
  cases.jsonl  one {"text": ..., "ids": [...]} per line: hand-picked texts (prose, code,
               whitespace runs, contractions, numbers, URLs, many scripts, emoji, the special
               token) and seeded random texts drawn from characters chosen to stress the
               pre-split.
  classes.txt  "first last class" lines (hex code points) giving, for every code point, the class
               HF's pre-split regex sees: L (\\p{L}), N (\\p{N}), S (\\s) or P (anything else).

usage: $(tools/venv.sh minimal) tools/make_tokenizer_fixture.py [--gpt2 DIR] [--bench]
  --bench  also print HF's encode speed on the text bench_tokenizer_encode uses.
"""
import argparse
import json
import os
import random
import shutil
import tempfile
import time
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")

PROSE = [
    "Hello world",
    "Hello, world!",
    " Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, "
    "it was the age of foolishness.",
    "GPT-2 is a large transformer-based language model with 1.5 billion parameters, trained on "
    "a dataset of 8 million web pages.",
    "In 1969, Neil Armstrong became the first person to walk on the Moon.",
    "She sells sea-shells on the sea-shore; the shells she sells are sea-shells, I'm sure.",
    "Mr. Smith (aged 42) paid $3.50 for a coffee -- which, frankly, is too much.",
    "ALL CAPS SENTENCE WITH SHOUTING!!!",
    "camelCaseIdentifier and snake_case_identifier and kebab-case-identifier",
    "antidisestablishmentarianism supercalifragilisticexpialidocious",
    "Once upon a time\nthere was a tokenizer.\n\nThe end.",
]

CONTRACTIONS = [
    "I'm you're he's she'll we've they'd it's can't won't don't",
    "I'M YOU'RE HE'S SHE'LL WE'VE THEY'D IT'S CAN'T",
    "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D",
    "rock'n'roll o'clock ma'am y'all",
    "the dog's bone, the dogs' bones",
    "''s '''t 'x 'l 'r 'v 're's",
    "I\u2019m curly \u2018quoted\u2019 and \u201cdouble\u201d",
    "don\u2019t it\u2019s they\u2019re",
    "'",
    "'s",
    "a'",
    " 's",
    "'ll've'd're",
]

NUMBERS = [
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 10000 100000 1000000",
    "3.14159265358979323846264338327950288419716939937510",
    "1,234,567.89 -42 +7 1e-10 0x1F 0b1010 007",
    "2026-11-22T10:15:30Z",
    "Call 555-0199 or +1 (800) 555-0100.",
    "\u0661\u0662\u0663 \u0967\u0968\u0969 \uff11\uff12\uff13 \u2160\u2161\u2162 \u00bd \u00b2 \u2460",
    "v1.2.3-rc.4+build.5",
    "12345678901234567890123456789012345678901234567890",
    " 1",
    "  42",
]

PUNCT = [
    "!!!???...",
    "Wait... what?!",
    "--- *** ___ === +++ ~~~",
    "a+b=c; x->y; p::q; r&&s || t",
    "(((nested))) [[[brackets]]] {{{braces}}}",
    "#!@$%^&*()_+-=[]{}|;':\",./<>?`~",
    "\u2014\u2013\u2026\u00a7\u00b6\u2020\u2021\u2022",
    "\u00bf\u00a1Hola!? \u00ab\u00bb \u2039\u203a",
    ".",
    " .",
    "  ...",
    "unassigned \u0378\u0379 private use \ue000\U000f0000 noncharacters \ufdd0\uffff",
    "controls \x00\x01\x07\x1b[0m \x7f \x9f",
]

WHITESPACE = [
    "",
    " ",
    "  ",
    "   ",
    "\n",
    "\n\n",
    "\t",
    "\r\n",
    "a b",
    "a  b",
    "a   b",
    "a    b    c",
    "trailing space ",
    "trailing spaces   ",
    "  leading spaces",
    "line one\nline two\n",
    "line one\r\nline two\r\n",
    "mixed \t \n \r\n \t\t  end",
    "tab\tseparated\tvalues\t1\t2",
    "\n\n\nthree newlines before",
    "word\n\n\n",
    " \n \n ",
    "a\u00a0b\u00a0\u00a0c",
    "thin\u2009space em\u2003space ideographic\u3000space",
    "nel\u0085line line\u2028sep para\u2029sep",
    "vt\x0bff\x0cend",
    "unit\x1fsep\x1erecord\x1dgroup\x1cfile",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom",
    "   \t\t   \n\n   x",
    " \u00a0x",
    "\u3000\u3000\u6f22",
]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "class Foo:\n\tdef __init__(self, x):\n\t\tself.x = x  # tab indented\n",
    "#include <vector>\n\nint main() {\n  std::vector<int> v{1, 2, 3};\n"
    "  for (auto& x : v) x *= 2;\n  return 0;\n}\n",
    "template <class T>\nconstexpr T square(T x) noexcept { return x * x; }\n",
    "if (a != b && c >= d) { printf(\"%d\\n\", a); }",
    "for i in range(10):\n\tprint(f\"{i:>4}\")\n",
    "SELECT id, name FROM users WHERE age > 21 ORDER BY name;",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "$ ls -la /usr/local/bin | grep -v '^d' && echo done",
    "    indented with four spaces\n        and eight\n",
    "x = [\n    1,\n    2,\n]\n",
    "// comment\n/* block\n   comment */\n",
    "fn main() { println!(\"hello\"); }",
    "   \n    \n",
]

URLS = [
    "https://huggingface.co/docs/tokenizers/index",
    "http://example.com/path?query=1&b=two#frag",
    "Visit www.example.org or email someone@example.com today.",
    "git@github.com:owner/repo.git",
    "file:///home/user/file.txt",
]

SCRIPTS = [
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u6211\u7231\u81ea\u7136\u8bed\u8a00\u5904\u7406",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3002",
    "\u6771\u4eac\u30bf\u30ef\u30fc\u306f333\u30e1\u30fc\u30c8\u30eb\u3067\u3059\u3002",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4! \ud55c\uad6d\uc5b4 \ud14c\uc2a4\ud2b8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629\u064f \u062c\u0645\u064a\u0644\u0629\u064c",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u0967\u0968\u0969",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u0411\u042b\u0421\u0422\u0420\u0410\u042f \u0431\u0443\u0440\u0430\u044f \u043b\u0438\u0441\u0430",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u03b1\u03b2\u03b3\u03b4\u03b5 \u0391\u0392\u0393\u0394\u0395 \u03c0 \u2248 3.14",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u05e2\u05b4\u05d1\u05b0\u05e8\u05b4\u05d9\u05ea \u05e2\u05dd \u05e0\u05d9\u05e7\u05d5\u05d3",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e44\u0e21\u0e48\u0e21\u0e35\u0e0a\u0e48\u0e2d\u0e07\u0e27\u0e48\u0e32\u0e07",
    "Gr\u00fc\u00dfe aus M\u00fcnchen, \u00e7a va? \u00f1and\u00fa, \u00e5\u00e6\u00f8",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0 \u0532\u0561\u0580\u0565\u0582",
    "\u1200\u1208\u121d \u0d28\u0d2e\u0d38\u0d4d\u0d15\u0d3e\u0d30\u0d02 \u0b95\u0bae\u0bcd",
    "mixed English \u4e2d\u6587 \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 text",
]

COMBINING = [
    "e\u0301 vs \u00e9",
    "cafe\u0301 na\u0308ive",
    "a\u0300\u0301\u0302\u0303\u0304\u0305\u0306\u0307",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "\u1100\u1161\u11a8 jamo",
    "\u0915\u094d\u0937 \u0924\u094d\u0930",
    "\u0301leading mark",
    " \u0301",
]

EMOJI = [
    "I love \U0001f355 and \U0001f680!",
    "\U0001f600\U0001f601\U0001f602\U0001f923\U0001f603",
    "family: \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f469\U0001f3fd\u200d\U0001f4bb coding",
    "flags \U0001f1fa\U0001f1f8 \U0001f1ef\U0001f1f5 \U0001f1e9\U0001f1ea \U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "\u2764\ufe0f \u2764 \u263a\ufe0f \u270c\U0001f3fb",
    "\U0001f44d\U0001f3ff\U0001f44d\U0001f3fe\U0001f44d\U0001f3fd",
    "keycaps 1\ufe0f\u20e3 #\ufe0f\u20e3",
    "\U0001f3f3\ufe0f\u200d\U0001f308 \U0001f3f4\u200d\u2620\ufe0f",
    "ascii :) :-( <3 \u00af\\_(\u30c4)_/\u00af",
    "math \U0001d400\U0001d401\U0001d402 \u2200x\u2208\u211d: x\u00b2\u22650",
    "old italic \U00010300\U00010301 gothic \U00010330",
]

EOT = "<|endoftext|>"
SPECIAL = [
    EOT,
    EOT + EOT,
    "Hello" + EOT + "world",
    "end of doc." + EOT + "Start of next",
    " " + EOT + " ",
    "\n" + EOT + "\n",
    "a " + EOT + "b",
    "<|endoftext|",
    "<|endoftext>",
    "< |endoftext|>",
    "<|ENDOFTEXT|>",
    "<|endoftext|><|endoftext|>x<|endoftext|>",
    "text then " + EOT,
]


def long_text():
    parts = []
    for i in range(40):
        parts.append(PROSE[i % len(PROSE)])
        parts.append(CODE[i % len(CODE)])
        parts.append(SCRIPTS[i % len(SCRIPTS)])
        parts.append(EMOJI[i % len(EMOJI)])
    return "\n".join(parts)


# Characters chosen to hit every branch of the pre-split: the four classes, the space that joins
# what follows, apostrophes and the contraction letters, multi-byte letters/digits/marks, and
# whitespace that is not U+0020.
POOL = (
    list("aestdmlrvASTDMLRV") + list("0123456789") + list("!.,;'\"-_()/#") +
    [" "] * 8 + ["\n", "\t", "\r\n", "\u00a0", "\u3000", "\u2009", "\x0b", "\x1f", "\u0085"] +
    ["\u00e9", "\u00df", "\u4e2d", "\u6587", "\u3042", "\u0436", "\u03a9", "\u05d0", "\u0627",
     "\u0e01", "\u0915", "\u1100"] +
    ["\u0661", "\uff19", "\u2163", "\u00bd", "\u00b2"] +
    ["\u0301", "\u093f", "\u0e31", "\u200d", "\ufe0f", "\u2019", "\u2014", "\u20ac", "\U0001f600",
     "\U0001f44d", "\U0001f3fd", "\U0001f1fa", "\U0001f1f8", "\U0001d400"] + [EOT]
)


def random_texts(rng, count):
    out = []
    for _ in range(count):
        n = rng.choice([1, 2, 3, 5, 8, 13, 21, 34, 55, 89])
        out.append("".join(rng.choice(POOL) for _ in range(n)))
    return out


def random_words(rng, count):
    # Word-like random strings: BPE paths through rare merges.
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for _ in range(count):
        words = []
        for _ in range(rng.randint(1, 12)):
            w = "".join(rng.choice(letters) for _ in range(rng.randint(1, 14)))
            words.append(w.capitalize() if rng.random() < 0.2 else w)
        seps = [" ", "  ", ", ", ". ", "\n", "-", "'s "]
        out.append("".join(w + rng.choice(seps) for w in words).rstrip(" "))
    return out


def random_bytes_text(rng, count):
    # Random code points of every plane (no surrogates): exercises the class table.
    out = []
    for _ in range(count):
        cps = []
        for _ in range(rng.randint(1, 40)):
            plane = rng.choice([0x80, 0x800, 0x3000, 0x10000, 0x20000, 0xE0000])
            cp = rng.randrange(plane)
            # Surrogates cannot be encoded; code points unassigned in Python's Unicode data may be
            # assigned in HF's newer tables (docs/tokenizer.md): both are drawn again.
            while 0xD800 <= cp < 0xE000 or unicodedata.category(chr(cp)) == "Cn":
                cp = rng.randrange(plane)
            cps.append(chr(cp))
            if rng.random() < 0.3:
                cps.append(rng.choice([" ", "  ", "a", "1", "!", "\n"]))
        out.append("".join(cps))
    return out


def all_cases():
    rng = random.Random(20261122)
    texts = (PROSE + CONTRACTIONS + NUMBERS + PUNCT + WHITESPACE + CODE + URLS + SCRIPTS +
             COMBINING + EMOJI + SPECIAL + [long_text()] + random_texts(rng, 60) +
             random_words(rng, 20) + random_bytes_text(rng, 30))
    seen, unique = set(), []
    for t in texts:
        if t not in seen:
            seen.add(t)
            unique.append(t)
    return unique


def load_hf(gpt2_dir, tmp):
    from transformers import GPT2TokenizerFast
    # HF layout is the same content under other names.
    shutil.copy(os.path.join(gpt2_dir, "encoder.json"), os.path.join(tmp, "vocab.json"))
    shutil.copy(os.path.join(gpt2_dir, "vocab.bpe"), os.path.join(tmp, "merges.txt"))
    return GPT2TokenizerFast.from_pretrained(tmp)


def class_table(tok):
    # The class of c is found by what it joins: "a"+c is one pre-token only if c is a letter, etc.
    pre = tok.backend_tokenizer.pre_tokenizer

    def one_piece(s):
        return len(pre.pre_tokenize_str(s)) == 1

    classes = []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            classes.append("P")  # not encodable; keeps the ranges contiguous
            continue
        c = chr(cp)
        if one_piece("a" + c):
            classes.append("L")
        elif one_piece("1" + c):
            classes.append("N")
        elif one_piece("!" + c):
            classes.append("P")
        elif one_piece("\t" + c + "\t"):
            classes.append("S")
        else:
            raise SystemExit(f"U+{cp:04X}: no class fits")
    runs, start = [], 0
    for i in range(1, len(classes) + 1):
        if i == len(classes) or classes[i] != classes[start]:
            runs.append(f"{start:X} {i - 1:X} {classes[start]}")
            start = i
    return runs


def bench_text(cases):
    # Same recipe as bench/tokenizer_encode.cpp: the fixture texts joined by "\n", repeated to 4 MB.
    unit = "\n".join(c["text"] for c in cases)
    reps = (4 << 20) // len(unit.encode()) + 1
    return "\n".join([unit] * reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpt2", default=os.path.join(ROOT, "data", "gpt2"))
    ap.add_argument("--bench", action="store_true")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tok = load_hf(args.gpt2, tmp)
        assert tok.eos_token_id == 50256 and len(tok) == 50257
        cases = [{"text": t, "ids": tok(t)["input_ids"]} for t in all_cases()]
        with open(os.path.join(OUT, "cases.jsonl"), "w", encoding="utf-8") as f:
            for c in cases:
                f.write(json.dumps(c, ensure_ascii=True) + "\n")
        runs = class_table(tok)
        with open(os.path.join(OUT, "classes.txt"), "w") as f:
            f.write("\n".join(runs) + "\n")
        longest = max(len(c["text"].encode()) for c in cases)
        print(f"wrote {len(cases)} cases (longest {longest} bytes), {len(runs)} class ranges")
        if args.bench:
            text = bench_text(cases)
            mb = len(text.encode()) / 1e6
            backend = tok.backend_tokenizer
            lines = text.split("\n")
            for name in ["first", "second"]:
                t0 = time.perf_counter()
                backend.encode(text, add_special_tokens=False)
                dt = time.perf_counter() - t0
                print(f"HF tokenizers, {name} pass, one call: {mb / dt:.2f} MB/s ({mb:.2f} MB)")
            for name in ["first", "second"]:
                t0 = time.perf_counter()
                for piece in lines:
                    backend.encode(piece, add_special_tokens=False)
                dt = time.perf_counter() - t0
                print(f"HF tokenizers, {name} pass, one call per line ({len(lines)} calls): "
                      f"{mb / dt:.2f} MB/s")


if __name__ == "__main__":
    main()
