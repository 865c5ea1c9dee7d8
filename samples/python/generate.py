#!/usr/bin/env python3
"""Generates after a prompt with the pulseinfer package: default model and engine parameters,
the prompt as plain text, greedy, the text (or with --ids the token ids) streamed to stdout."""
import argparse
import sys

import pulseinfer


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="a GGUF file or Hugging Face directory")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--ids", action="store_true",
                        help="print the generated token ids, comma-separated, instead of the text")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    sampling = pulseinfer.SamplingParams(temperature=0, max_tokens=args.max_tokens)
    try:
        with pulseinfer.Model(args.model) as model, pulseinfer.Engine(model) as engine:
            with engine.generate(args.prompt, sampling) as generation:
                for index, token in enumerate(generation):
                    if args.ids:
                        print("," if index > 0 else "", token.id, sep="", end="", flush=True)
                    else:
                        print(token.text, end="", flush=True)
        print()
    except pulseinfer.PulseError as error:
        print(f"generate.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
