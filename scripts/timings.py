#!/usr/bin/env python3
"""Writes a `balance --timings` file (JSON Lines, one measured micro-batch a line) from a hidden
cost model that is NOT in the span of the calibrator's terms, to check the calibration on what
it cannot fit exactly:

- language: 2.4e-6 s a token, full causal attention over the whole micro-batch (the square of
  its token count, not document-masked), 0.15 ms a sample, 0.8 ms a micro-batch;
- vision: 1.1e-6 s an image token plus a cost growing as tokens^1.5, and 0.4 ms an image;
- 3% Gaussian noise per phase, 2% of the micro-batches slowed 2x.

Micro-batches are anyres-like samples (40 to 1,200 text tokens, 0 to 3 images of 576 to 2,880
tokens) packed to at most 16,384 tokens. The 1-based lines of the slowed micro-batches go to
stderr.

    python3 scripts/timings.py out.jsonl [seed] [rows]
    cargo run --release --example balance -- --timings out.jsonl --model internvl2.5-8b --json
"""

import json
import random
import sys


def main() -> None:
    path = sys.argv[1]
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 5)
    rows = int(sys.argv[3]) if len(sys.argv) > 3 else 800

    def sample() -> dict:
        k = rng.choice([0, 0, 1, 1, 1, 2, 3])
        images = [rng.choice([576, 1152, 1728, 2304, 2880]) for _ in range(k)]
        return {"text_tokens": rng.randint(40, 1200), "image_tokens": images}

    def tokens(mb: list) -> int:
        return sum(s["text_tokens"] + sum(s["image_tokens"]) for s in mb)

    slowed = []
    with open(path, "w") as f:
        for line in range(1, rows + 1):
            mb: list = []
            while True:
                s = sample()
                if tokens(mb + [s]) > 16384:
                    break
                mb.append(s)
            images = [i for s in mb for i in s["image_tokens"]]
            vision = sum(1.1e-6 * i + 1e-8 * i**1.5 + 4e-4 for i in images)
            t = tokens(mb)
            language = 2.4e-6 * t + 6.0e-11 * t**2 + 1.5e-4 * len(mb) + 8e-4
            vision *= 1 + 0.03 * rng.gauss(0, 1)
            language *= 1 + 0.03 * rng.gauss(0, 1)
            if rng.random() < 0.02:
                vision, language = 2 * vision, 2 * language
                slowed.append(line)
            f.write(json.dumps({"samples": mb, "vision_seconds": vision, "language_seconds": language}) + "\n")
    print("slowed lines:", " ".join(map(str, slowed)), file=sys.stderr)


if __name__ == "__main__":
    main()
