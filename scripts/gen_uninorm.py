"""Write user_c's NFC tables (build/user/uninorm.h) from Python's `unicodedata`.

Qwen3.5's tokenizer NFC-normalises text before it splits it; user_c/nfc.c does the same
with these tables: canonical combining classes, full canonical decompositions (Hangul
syllables are computed, not listed) and the primary composites (pairs that NFC composes,
exclusions already left out: a pair is listed only if unicodedata's NFC composes it).

    python scripts/gen_uninorm.py build/user/uninorm.h
"""

from __future__ import annotations

import sys
import unicodedata

from gen_uniclass import c_array, write_header  # scripts/ is on the path

HANGUL = range(0xAC00, 0xD7A4)


def tables() -> tuple[list[int], list[tuple[int, list[int]]], list[tuple[int, int, int]]]:
    ccc, dec, comp = [], [], []
    for cp in range(0x110000):
        c = chr(cp)
        if 0xD800 <= cp < 0xE000:
            continue
        if unicodedata.combining(c):
            ccc.append(cp << 8 | unicodedata.combining(c))
        if cp in HANGUL:
            continue
        d = unicodedata.normalize("NFD", c)
        if d != c:
            dec.append((cp, [ord(x) for x in d]))
        raw = unicodedata.decomposition(c)
        if raw and not raw.startswith("<"):
            parts = [int(x, 16) for x in raw.split()]
            if len(parts) == 2 and unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == c:
                comp.append((parts[0], parts[1], cp))
    comp.sort()
    return ccc, dec, comp


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    ccc, dec, comp = tables()
    seq: list[int] = []
    offs = []
    for _, d in dec:
        offs.append(len(seq) << 3 | len(d))
        seq += d
    write_header(argv[0], "gen_uninorm.py", [
        f"#define NF_NCCC {len(ccc)}", f"#define NF_NDEC {len(dec)}",
        f"#define NF_NCOMP {len(comp)}", f"#define NF_MAXDEC {max(len(d) for _, d in dec)}",
        *c_array("nf_ccc", ccc),            # cp << 8 | class, sorted
        *c_array("nf_dec", [cp for cp, _ in dec]),  # sorted
        *c_array("nf_decoff", offs),        # offset << 3 | length into nf_decseq
        *c_array("nf_decseq", seq),
        *c_array("nf_comp", [v for a, b, c in comp for v in (a, b, c)])])  # by (a, b)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
