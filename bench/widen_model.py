#!/usr/bin/env python3
"""Widen a llama GGUF with zero weights: the same function, more bytes per token.

    bench/widen_model.py IN.gguf OUT.gguf [--embd D] [--ff F]

The model width grows from n_embd to D (every weight's input rows and the residual stream
get zero columns / rows; the heads keep their width, now stated in attention.key_length /
value_length) and the FFN from n_ff to F rows (an extra unit computes silu(0) * 0 = 0 and adds
0 · 0). RMSNorm then averages over D values of which D - n_embd are 0, so its epsilon is
scaled by n_embd / D and its weights by sqrt(n_embd / D): the normalised values are the old
ones, exactly when D / n_embd is a power of 4 (every factor a power of 2). So the widened
model computes the input's function — up to the summation order of longer rows — while
reading far more weight bytes per token.

What for: speculative decoding pays where a decode step is bound by reading the weights
(issue #18). stories260K, the one trained model here, fits in L2 and is compute-bound;
widened to a few hundred MB it is as bandwidth-bound as a 1B model's decode but still
predicts (and copies) like stories260K, and stories260K itself is then a cheap draft with
its vocabulary. F32 input tensors only (stories260K's type); `pdserve quantize` the output
for another type. GGUF format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md.
"""
import argparse
import math
import struct
import sys

# GGUF metadata value types -> struct format (scalars); 8 = string, 9 = array.
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
GGML_F32 = 0


class Reader:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.o)
        self.o += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.d[self.o:self.o + n]
        self.o += n
        return s

    def value(self, t):
        """The raw bytes of a metadata value of type t (copied through unchanged)."""
        start = self.o
        if t in SCALAR:
            self.take(SCALAR[t])
        elif t == 8:
            self.string()
        elif t == 9:
            et, n = self.take("I"), self.take("Q")
            for _ in range(n):
                self.value(et)
        else:
            sys.exit(f"widen_model: unknown GGUF metadata type {t} at byte {start}")
        return self.d[start:self.o]


def read_header(data, prog, path):
    """A GGUF file's header: (version, kv [[key, type, raw value bytes]], alignment,
    architecture (bytes, None if absent), tensors [[name, dims, type, offset from base]], base:
    the data section's file offset). Exits with "prog: ..." on a file that is not GGUF v2/v3;
    a truncated header raises struct.error."""
    if data[:4] != b"GGUF":
        sys.exit(f"{prog}: {path} is not a GGUF file (magic {data[:4]!r})")
    r = Reader(data)
    r.o = 4
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    if version not in (2, 3):
        sys.exit(f"{prog}: GGUF version {version} is not supported (2 or 3)")
    kv = []
    alignment, arch = 32, None
    for _ in range(n_kv):
        key, t = r.string(), r.take("I")
        raw = r.value(t)
        if key == b"general.alignment":
            alignment = struct.unpack("<I", raw)[0]
        if key == b"general.architecture":
            arch = raw[8:]
        kv.append([key, t, raw])
    tensors = []
    for _ in range(n_tensors):
        name, nd = r.string(), r.take("I")
        dims = [r.take("Q") for _ in range(nd)]
        t, off = r.take("I"), r.take("Q")
        tensors.append([name, dims, t, off])
    base = (r.o + alignment - 1) // alignment * alignment
    return version, kv, alignment, arch, tensors, base


def gguf_string(b):
    return struct.pack("<Q", len(b)) + b


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--embd", type=int, help="new model width (embedding_length; default: unchanged)")
    ap.add_argument("--ff", type=int, help="new FFN width (rows of ffn_gate / ffn_up; default: unchanged)")
    a = ap.parse_args()

    data = open(a.input, "rb").read()
    version, kv, alignment, arch, tensors, base = read_header(data, "widen_model", a.input)
    if arch is None:
        sys.exit("widen_model: no general.architecture")
    def find(key):
        return next((e for e in kv if e[0] == arch + key), None)

    def u32(key):
        e = find(key)
        if e is None:
            sys.exit(f"widen_model: no {(arch + key).decode()}")
        return struct.unpack("<I", e[2])[0]

    n_embd, n_ff, n_head = u32(b".embedding_length"), u32(b".feed_forward_length"), u32(b".attention.head_count")
    a.embd, a.ff = a.embd or n_embd, a.ff or n_ff
    if a.embd < n_embd or a.ff < n_ff:
        sys.exit(f"widen_model: --embd {a.embd} / --ff {a.ff} narrower than the model's {n_embd} / {n_ff}")
    if arch != b"llama":
        sys.exit(f"widen_model: architecture {arch.decode()}: only llama is supported")
    find(b".embedding_length")[2] = struct.pack("<I", a.embd)
    find(b".feed_forward_length")[2] = struct.pack("<I", a.ff)
    if a.embd != n_embd:
        # the heads keep their width: head_dim from the old n_embd, now stated
        for key in (b".attention.key_length", b".attention.value_length"):
            if find(key) is None:
                kv.append([arch + key, 4, struct.pack("<I", n_embd // n_head)])
        # rms_norm over the zero-padded D values: mean(x²) is E/D of the old one, so
        # eps·E/D and weights ·sqrt(E/D) give the old normalised values (exactly when D/E is
        # a power of 4: every factor is then a power of 2)
        e = find(b".attention.layer_norm_rms_epsilon")
        if e is None or e[1] != 6:
            sys.exit("widen_model: no float32 attention.layer_norm_rms_epsilon")
        e[2] = struct.pack("<f", struct.unpack("<f", e[2])[0] * n_embd / a.embd)


    # ggml dims: ne0 = row length (inputs), ne1 = rows (outputs). Per tensor: the widths its
    # rows and its row count grow to (None: unchanged).
    E, D, F = n_embd, a.embd, a.ff
    grow = {b"token_embd.weight": (D, None), b"output.weight": (D, None),
            b"attn_q.weight": (D, None), b"attn_k.weight": (D, None), b"attn_v.weight": (D, None),
            b"attn_output.weight": (None, D), b"ffn_gate.weight": (D, F), b"ffn_up.weight": (D, F),
            b"ffn_down.weight": (F, D), b"attn_norm.weight": (D, None), b"ffn_norm.weight": (D, None),
            b"output_norm.weight": (D, None)}
    norm_scale = (E / D) ** 0.5
    offsets = sorted(t[3] for t in tensors)
    end_of = {o: (offsets[i + 1] if i + 1 < len(offsets) else len(data) - base) for i, o in enumerate(offsets)}
    out_data = []
    for name, dims, t, off in tensors:
        short = name.split(b".", 2)[-1] if name.startswith(b"blk.") else name
        n = math.prod(dims)
        if short not in grow:  # copied as it is (with the padding after it, re-aligned below)
            out_data.append((name, dims, t, data[base + off:base + end_of[off]]))
            continue
        if t != GGML_F32:
            sys.exit(f"widen_model: {name.decode()} is not F32 (type {t}): widen the F32 model, then quantize")
        src = data[base + off:base + off + 4 * n]
        if short.endswith(b"norm.weight"):  # rms_norm over D zero-padded values: w * sqrt(E / D)
            w = struct.unpack(f"<{n}f", src)
            blob = struct.pack(f"<{n}f", *[x * norm_scale for x in w]) + bytes(4 * (D - n))
            out_data.append((name, [D], t, blob))
            continue
        cols, rows = dims[0], (dims[1] if len(dims) > 1 else 1)
        new_cols, new_rows = grow[short]
        new_cols, new_rows = new_cols or cols, new_rows or rows
        pad = bytes(4 * (new_cols - cols))
        blob = b"".join(src[i * 4 * cols:(i + 1) * 4 * cols] + pad for i in range(rows))
        blob += bytes(4 * new_cols * (new_rows - rows))
        out_data.append((name, [new_cols, new_rows], t, blob))

    hdr = [b"GGUF", struct.pack("<IQQ", version, len(tensors), len(kv))]
    for key, t, raw in kv:
        hdr += [gguf_string(key), struct.pack("<I", t), raw]
    off = 0
    body = []
    for name, dims, t, blob in out_data:
        hdr += [gguf_string(name), struct.pack("<I", len(dims))]
        hdr += [struct.pack("<Q", d) for d in dims] + [struct.pack("<IQ", t, off)]
        padded = len(blob) + (-len(blob)) % alignment
        body.append(blob + bytes(padded - len(blob)))
        off += padded
    head = b"".join(hdr)
    head += bytes((-len(head)) % alignment)
    with open(a.output, "wb") as f:
        f.write(head)
        for b in body:
            f.write(b)
    print(f"{a.output}: n_embd {n_embd} -> {a.embd}, n_ff {n_ff} -> {a.ff}, {len(head) + off} bytes")


if __name__ == "__main__":
    main()
