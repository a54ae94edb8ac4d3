#!/usr/bin/env python3
"""Answers a tokenizer differential's cases with Hugging Face `tokenizers`, the reference.

Reads the JSON Lines cases that tools/reference/tokenizer_diff.js gives cairn-run
--tokenize-batch and writes the answers in the same format, from tokenizers.Tokenizer on the same
tokenizer.json (tests/README.md, "Tokenizer differential"):

  python3 tools/reference/tokenizer_diff_hf.py --tokenizer DIR/tokenizer.json \
      --cases build/tokenizer-diff/cases.jsonl --out hf_answers.jsonl

  {"encode_hex": HEX}               -> {"ids": [...]} or {"error": ...} (text that is not UTF-8
                                       is an error: a Rust str cannot hold it)
  {"decode": [ids], "skip_special"} -> {"text": ...} (ids the vocabulary lacks are dropped, as
                                       tokenizers does; Cairn refuses them)

Prints the versions it ran with ({"tokenizers", "python", "unicodedata"}) on stderr. Needs only
the `tokenizers` package; run where it is installed (the GPU machine has it, no GPU is needed).
"""
import argparse
import json
import sys
import unicodedata

import tokenizers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--tokenizer', required=True)
    parser.add_argument('--cases', required=True)
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    tok = tokenizers.Tokenizer.from_file(args.tokenizer)
    print(json.dumps({'tokenizers': tokenizers.__version__, 'python': sys.version.split()[0],
                      'unicodedata': unicodedata.unidata_version}), file=sys.stderr)
    with open(args.cases, encoding='utf-8') as f, open(args.out, 'w', encoding='utf-8') as out:
        for line in f:
            if not line.strip():
                continue
            case = json.loads(line)
            if 'encode_hex' in case:
                try:
                    text = bytes.fromhex(case['encode_hex']).decode('utf-8')
                except UnicodeDecodeError as e:
                    answer = {'error': str(e)}
                else:
                    answer = {'ids': tok.encode(text, add_special_tokens=False).ids}
            else:
                answer = {'text': tok.decode(case['decode'],
                                             skip_special_tokens=case.get('skip_special', False))}
            out.write(json.dumps(answer, ensure_ascii=False) + '\n')


if __name__ == '__main__':
    main()
