#!/usr/bin/env python3
"""Reference outputs of transformers for cairn's random-weight Qwen3-family checkpoints.

Loads the checkpoint folders written by `cairn-make-model --preset NAME` with transformers' own
model classes (fp32 math from the bf16 weights), checks that every tensor loaded with no
missing, unexpected or mismatched keys, runs one fixed prompt per model in a single forward
call (the chunked GDN path, crossing chunk boundaries of 64) and 32 greedy tokens (cached
decode, the recurrent path), and writes one small JSON file per model:

  {"preset", "model_type", "transformers", "torch", "prompt": [ids],
   "positions": [p...], "logits": [[vocab floats] per position], "argmax": [id per position],
   "greedy": [32 ids], "load_report": {...}}

The C++ tests (tests/unit/services/infer/models/reference_test.cc) regenerate the identical
weights with the writer and compare. Needs transformers >= 5.17 (PR #45513) and torch.

Usage: qwen3_hybrid_reference.py --models DIR --out DIR [--presets dense,next,moe,qwen3]
                                 [--wrappers dense-wrapped,moe-wrapped]

How the committed files were made (the folders are ~1 MB each; build them here, carry them to a
machine with transformers, copy the JSON back into tests/data/models/):
  for p in dense next moe qwen3 dense-wrapped moe-wrapped; do
    cairn-make-model --preset $p --out build/engine/refmodels/$p; done
  python3 tools/reference/qwen3_hybrid_reference.py --models build/engine/refmodels \
      --out OUT --wrappers dense-wrapped,moe-wrapped
Seen with transformers 5.17.0 and torch 2.11.0 (CPU, fp32): every preset loaded with no
missing, unexpected or mismatched keys, and both wrapper folders load through
AutoModelForCausalLM as well; the qwen3 preset (plain Qwen3) loads through Qwen3ForCausalLM.
"""

import argparse
import json
import os
import random
import sys
import traceback

import torch
import transformers

# Preset -> transformers class that loads its text-only checkpoint.
CLASSES = {
    "dense": "Qwen3_5ForCausalLM",
    "next": "Qwen3NextForCausalLM",
    "moe": "Qwen3_5MoeForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
PROMPT_TOKENS = 300          # Several chunks of 64, the last one partial.
PROMPT_SEED = 1234
LOGIT_POSITIONS = [0, 63, 64, 150, 299]
GREEDY_TOKENS = 32
LOGIT_DECIMALS = 5


def prompt_ids(vocab):
    rng = random.Random(PROMPT_SEED)
    return [rng.randrange(vocab) for _ in range(PROMPT_TOKENS)]


def load(path, class_name):
    cls = getattr(transformers, class_name, None) or transformers.AutoModelForCausalLM
    model, info = cls.from_pretrained(path, dtype=torch.float32, output_loading_info=True,
                                      attn_implementation="eager")
    report = {k: sorted(map(str, v)) for k, v in info.items() if v}
    return model.eval(), report


def run(preset, path):
    model, report = load(path, CLASSES[preset])
    problems = {k: v for k, v in report.items()
                if k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")}
    if problems:
        raise SystemExit(f"{preset}: weights did not load cleanly: {problems}")
    vocab = model.config.vocab_size
    ids = prompt_ids(vocab)
    inputs = torch.tensor([ids])
    with torch.no_grad():
        logits = model(inputs, use_cache=False).logits[0].float()
        generated = model.generate(inputs, max_new_tokens=GREEDY_TOKENS,
                                   min_new_tokens=GREEDY_TOKENS, do_sample=False,
                                   eos_token_id=None, pad_token_id=0)
    greedy = generated[0, len(ids):].tolist()
    return {
        "preset": preset,
        "model_type": model.config.model_type,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "prompt": ids,
        "positions": LOGIT_POSITIONS,
        "logits": [[round(float(x), LOGIT_DECIMALS) for x in logits[p]] for p in LOGIT_POSITIONS],
        "argmax": logits.argmax(-1).tolist(),
        "greedy": greedy,
        "load_report": report,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", required=True, help="folder holding one folder per preset")
    parser.add_argument("--out", required=True)
    parser.add_argument("--presets", default="dense,next,moe,qwen3")
    parser.add_argument("--wrappers", default="", help="wrapper presets to try loading")
    args = parser.parse_args()
    torch.manual_seed(0)
    print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    for preset in args.presets.split(","):
        try:
            result = run(preset, os.path.join(args.models, preset))
        except BaseException:  # Report and go on with the other presets.
            traceback.print_exc()
            failed += 1
            continue
        with open(os.path.join(args.out, f"{preset}.json"), "w") as f:
            json.dump(result, f, separators=(",", ":"))
            f.write("\n")
        print(preset, "ok; load report:", result["load_report"], "greedy:", result["greedy"],
              flush=True)
    for wrapped in args.wrappers.split(",") if args.wrappers else []:
        # Informational: do transformers' auto classes take the wrapper folder too?
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                os.path.join(args.models, wrapped), dtype=torch.float32,
                output_loading_info=True)
            print(wrapped, "loads with AutoModelForCausalLM; report:",
                  {k: v for k, v in model[1].items() if v}, flush=True)
        except BaseException as e:  # Informational only.
            print(wrapped, "does not load with AutoModelForCausalLM:", repr(e)[:300], flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
