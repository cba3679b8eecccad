#!/usr/bin/env python3
"""Ideal prefix-hit ratio of the first N requests of the Mooncake trace, scaled as
`pdserve bench --trace mooncake --length-scale 0.03125 --max-input 448` scales it
(src/loadgen/workload.cc scale_trace): input = round(input_length / 32) capped at 448,
a 512-token hash block -> one 16-token KV block, hash_ids cut to ceil(input / 16) blocks.

A block is an ideal hit when its hash_id appeared in an earlier request (an infinite,
shared cache; Mooncake hash_ids are chained, so a seen id implies its whole prefix was
seen). Prints the block ratio and the token ratio (hit blocks x 16 / prompt tokens; the
token version `pdserve bench` prints as "Ideal prefix hit ratio" also counts a partial
last block as far as an earlier prompt covered it).

Usage: bench/mooncake_ideal_hits.py [N ...]   (default 300)"""
import json
import math
import sys

TRACE = "../shared/traces/mooncake_conversation_trace.jsonl"


def ideal(n, scale=1 / 32, block=16, max_input=448):
    seen, blocks, hits, tokens = set(), 0, 0, 0
    with open(TRACE) as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            e = json.loads(line)
            length = min(max(math.floor(e["input_length"] * scale + 0.5), 1), max_input)
            tokens += length
            for h in e["hash_ids"][: (length + block - 1) // block]:
                blocks += 1
                hits += h in seen
                seen.add(h)
    return blocks, hits, tokens


for n in [int(a) for a in sys.argv[1:]] or [300]:
    b, h, t = ideal(n)
    print(f"first {n} requests: {h}/{b} blocks seen before = {100 * h / b:.1f} %; "
          f"{16 * h}/{t} prompt tokens = {100 * 16 * h / t:.1f} %")
