#!/usr/bin/python3
"""Fine-tune stories260K to repeat a passage: a trained model that copies its input.

    /usr/bin/python3 bench/copy_model.py PDSERVE IN.gguf OUT.gguf [--steps N] [--batch B]
        [--passages P] [--seed S]

What for (issue #18): prompt lookup (`--speculative ngram`) wins where the model copies its
input, and the one trained model here, stories260K, copies little (8-46 % of its prompt-lookup
proposals are accepted on bench/spec_bench's copy task, no gain at batch 1). This script
teaches it to: it
fine-tunes all of stories260K's weights on texts in spec_bench's copy format,

    <s>Repeat the story. Story: PASSAGE Repeat: PASSAGE

Each PASSAGE joins random sentences of stories that stories260K itself wrote (sampled at
temperature 1 from its own BOS, seeds 1..N), so it keeps stories260K's vocabulary and domain.
The loss is the next-token loss of " Repeat: PASSAGE" only. The model learns to copy, but
not only that: over 1,500 steps each sentence comes back ~20 times, and the model also
learns to recall them, and it loses some of its story telling (it is trained on no story).
Two variants tried and not kept (2026-12-05): adding the KL divergence from the original
model on the first PASSAGE (distillation) kept the stories but, over 2,500 steps, the model
recalled training sentences instead of copying (76.7 % of held-out copy tokens, " Repeat:"
included, against the original's 63.0 %; and it did not repeat spec_bench's passage);
PASSAGEs of tokens drawn at random with their story frequencies made it copy random tokens
(loss ~0.03) but not stories (22.8 %).

OUT.gguf is IN.gguf with the new F32 weights in place (same metadata, shapes and layout).
Widen it with bench/widen_model.py to make a decode step bound by reading the weights, as
spec_bench.sh's copytuned parts do.

The forward pass is llama.cpp's for the llama architecture (RMSNorm, RoPE in its "normal"
mode on adjacent pairs, grouped-query attention, SiLU-gated FFN); before training the script
checks that it gives IN.gguf's greedy tokens as `PDSERVE generate --ids` does. After training
it reports, on 64 whole stories kept out of training, the share of the copy's passage tokens
it predicts (teacher-forced) and how many of 16 it repeats exactly (greedy), and the same for
the original model (which wrote those stories, so it predicts many of their tokens anyway).

Needs PyTorch (Debian: apt-get install python3-torch libopenblas0-pthread, then run with
/usr/bin/python3; Debian's torch calls the generic libblas.so.3, which OpenBLAS then
provides: its matmuls ~5x faster). Not used by the tests; only by this benchmark. GGUF format:
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md.
"""
import argparse
import atexit
import concurrent.futures
import importlib.util
import math
import os
import struct
import subprocess
import sys

# glibc hands PyTorch's large CPU buffers back to the kernel on every free, so each op
# page-faults its output in again (steps several times slower here): keep freed memory.
if __name__ == "__main__" and "MALLOC_MMAP_THRESHOLD_" not in os.environ:
    os.environ.update(MALLOC_MMAP_THRESHOLD_="4294967296", MALLOC_TRIM_THRESHOLD_="68719476736")
    os.execv(sys.executable, [sys.executable] + sys.orig_argv[1:])

try:
    import torch  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
except ImportError:
    sys.exit(f"copy_model: needs PyTorch, which {sys.executable} does not have "
             "(Debian: apt-get install python3-torch libopenblas0-pthread, then run with /usr/bin/python3)")

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("widen_model", os.path.join(HERE, "widen_model.py"))
wm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wm)

GGML_F32 = wm.GGML_F32


def read_gguf(path):
    """(metadata {key: (type, raw value bytes)}, tensors {name: (dims, byte offset in file)},
    file bytes); a one-line exit for a file that is missing, not GGUF, truncated, not llama or
    not all F32."""
    try:
        data = open(path, "rb").read()
    except OSError as e:
        sys.exit(f"copy_model: cannot read {path}: {e.strerror}")
    try:
        return parse_gguf(path, data)
    except struct.error:
        sys.exit(f"copy_model: {path} is truncated (its header runs past the end of the file)")


def parse_gguf(path, data):
    _, kv, _, arch, header_tensors, base = wm.read_header(data, "copy_model", path)
    meta = {key.decode(): (t, raw) for key, t, raw in kv}
    tensors = {}
    for name, dims, t, off in header_tensors:
        if t != GGML_F32:
            sys.exit(f"copy_model: {name.decode()} is not F32 (type {t}); start from the F32 model")
        tensors[name.decode()] = (dims, base + off)
    for name, (dims, off) in tensors.items():
        if off + 4 * math.prod(dims) > len(data):
            sys.exit(f"copy_model: {path} is truncated ({name} ends past the end of the file)")
    if arch != b"llama":
        sys.exit(f"copy_model: {path}: architecture {(arch or b'(none)').decode()}: only llama is supported")
    return meta, tensors, bytearray(data)


def meta_u32(meta, key):
    return struct.unpack("<I", meta[key][1])[0]


def meta_f32(meta, key, default):
    return struct.unpack("<f", meta[key][1])[0] if key in meta else default


class Llama(torch.nn.Module):
    """llama.cpp's llama forward over a whole sequence batch [B, T] -> logits [B, T, vocab]."""

    def __init__(self, meta, tensors, data):
        super().__init__()
        self.n_layer = meta_u32(meta, "llama.block_count")
        self.n_head = meta_u32(meta, "llama.attention.head_count")
        self.n_kv = meta_u32(meta, "llama.attention.head_count_kv")
        self.eps = meta_f32(meta, "llama.attention.layer_norm_rms_epsilon", 1e-5)
        self.base = meta_f32(meta, "llama.rope.freq_base", 10000.0)
        n_embd = meta_u32(meta, "llama.embedding_length")
        self.hd = n_embd // self.n_head
        self.w = torch.nn.ParameterDict()
        for name, (dims, off) in tensors.items():
            n = 1
            for d in dims:
                n *= d
            t = torch.frombuffer(bytearray(data[off:off + 4 * n]), dtype=torch.float32).clone()
            shape = list(reversed(dims))  # ggml ne0 is the innermost (row) length
            self.w[name.replace(".", "_")] = torch.nn.Parameter(t.reshape(shape))
        self.tensors = tensors

    def p(self, name):
        return self.w[name.replace(".", "_")]

    def rms(self, x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x):  # x [B, T, H, hd]; "normal" mode: pairs (2i, 2i+1)
        T, hd = x.shape[1], x.shape[3]
        pos = torch.arange(T, dtype=torch.float32)[:, None]
        inv = self.base ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        ang = pos * inv[None, :]  # [T, hd/2]
        cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)

    def forward(self, tok):
        B, T = tok.shape
        x = self.p("token_embd.weight")[tok]
        mask = torch.full((T, T), float("-inf")).triu(1)
        g = self.n_head // self.n_kv
        for l in range(self.n_layer):
            b = f"blk.{l}."
            h = self.rms(x, self.p(b + "attn_norm.weight"))
            q = self.rope((h @ self.p(b + "attn_q.weight").T).view(B, T, self.n_head, self.hd))
            k = self.rope((h @ self.p(b + "attn_k.weight").T).view(B, T, self.n_kv, self.hd))
            v = (h @ self.p(b + "attn_v.weight").T).view(B, T, self.n_kv, self.hd)
            k = k.repeat_interleave(g, dim=2)  # query head h reads KV head h / g
            v = v.repeat_interleave(g, dim=2)
            s = torch.einsum("bthd,bshd->bhts", q, k) / self.hd ** 0.5 + mask
            o = torch.einsum("bhts,bshd->bthd", s.softmax(-1), v).reshape(B, T, -1)
            x = x + o @ self.p(b + "attn_output.weight").T
            h = self.rms(x, self.p(b + "ffn_norm.weight"))
            f = F.silu(h @ self.p(b + "ffn_gate.weight").T) * (h @ self.p(b + "ffn_up.weight").T)
            x = x + f @ self.p(b + "ffn_down.weight").T
        x = self.rms(x, self.p("output_norm.weight"))
        out = self.p("output.weight") if "output.weight" in self.tensors else self.p("token_embd.weight")
        return x @ out.T

    @torch.no_grad()
    def generate(self, prompts, n, temperature=0.0, gen=None):
        """prompts: equal-length token lists; n new tokens each (greedy, or sampled)."""
        tok = torch.tensor(prompts)
        for _ in range(n):
            logits = self(tok)[:, -1]
            if temperature == 0:
                nxt = logits.argmax(-1)
            else:
                nxt = torch.multinomial((logits / temperature).softmax(-1), 1, generator=gen)[:, 0]
            tok = torch.cat([tok, nxt[:, None]], 1)
        return tok[:, len(prompts[0]):].tolist()


def run_pdserve(cmd):
    """pdserve's stdout's first line, or a one-line error naming the command."""
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split("\n")[0]
    except OSError as e:
        sys.exit(f"copy_model: cannot run {cmd[0]}: {e.strerror}")
    except subprocess.CalledProcessError as e:
        last = (e.stderr.strip().splitlines() or ["no message"])[-1]
        sys.exit(f"copy_model: {cmd[0]} {cmd[3]} failed (exit {e.returncode}): {last}")
    if not out.strip() or not all(t.lstrip("-").isdigit() for t in out.split()):
        sys.exit(f"copy_model: {cmd[0]} {cmd[3]} printed no token ids: is it pdserve?")
    return [int(t) for t in out.split()]


def tokenize(pdserve, model, text, bos):
    return run_pdserve([pdserve, "--log-level", "warn", "tokenize", "-m", model, "--text", text] +
                       (["--add-bos"] if bos else []))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] + " Needs PyTorch (see the file's header).")
    ap.add_argument("pdserve", help="a pdserve binary (tokenizes, and gives the reference greedy tokens)")
    ap.add_argument("input", help="stories260K.gguf (F32)")
    ap.add_argument("output", help="the fine-tuned model: IN's GGUF with the new F32 weights")
    ap.add_argument("--steps", type=int, default=1500, help="Adam steps (default 1500; ~15 min on 2 cores)")
    ap.add_argument("--batch", type=int, default=16, help="texts per step (default 16)")
    ap.add_argument("--passages", type=int, default=1200, help="stories sampled for sentences (default 1200)")
    ap.add_argument("--seed", type=int, default=1, help="sampling and training seed (default 1)")
    a = ap.parse_args()
    if a.steps < 1 or a.batch < 1 or a.passages < 128:
        sys.exit("copy_model: --steps and --batch must be >= 1 and --passages >= 128 (64 are held out)")
    tmp = a.output + ".tmp"  # written at the end, renamed to OUT: no half-written OUT, and
    try:                     # an unwritable OUT fails now, not after the training
        open(tmp, "wb").close()
    except OSError as e:
        sys.exit(f"copy_model: cannot write {tmp}: {e.strerror}")
    atexit.register(lambda: os.path.exists(tmp) and os.remove(tmp))  # on an error exit
    torch.manual_seed(a.seed)
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    meta, tensors, data = read_gguf(a.input)
    model = Llama(meta, tensors, data)

    # 1. The forward pass is pdserve's (and so llama.cpp's): same greedy tokens.
    opening = "Once upon a time, there was a little girl named Lily. She had a red ball and she loved to"
    ids = tokenize(a.pdserve, a.input, opening, True)
    ref = run_pdserve([a.pdserve, "--log-level", "warn", "generate", "-m", a.input, "-p", opening, "-n", "40", "--ids"])
    ours = model.generate([ids], 40)[0]
    if ref != ours:
        sys.exit(f"copy_model: the torch forward pass differs from pdserve's greedy tokens:\n {ref}\n {ours}")
    print(f"forward pass checked: 40 greedy tokens equal pdserve's", flush=True)

    # 2. Passages: stories stories260K writes from BOS (temperature 1, seeds 1..N), cut after
    # their last full stop past 24 tokens.
    eos = meta_u32(meta, "tokenizer.ggml.eos_token_id")
    full_stop = tokenize(a.pdserve, a.input, "Tom.", False)[-1]

    def sample(seed):
        s = run_pdserve([a.pdserve, "--log-level", "warn", "generate", "-m", a.input, "-p", "", "-n", "72",
                         "--temperature", "1", "--seed", str(seed), "--ids"])
        s = s[:s.index(eos)] if eos in s else s  # one story: up to its end
        cut = max([i for i, t in enumerate(s) if t == full_stop and i >= 24], default=-1)
        return s[:cut + 1] if cut >= 0 else None

    with concurrent.futures.ThreadPoolExecutor(max(1, len(os.sched_getaffinity(0)))) as pool:
        passages = [p for p in pool.map(sample, range(1, a.passages + 1)) if p]
    gen = torch.Generator().manual_seed(a.seed)
    head = tokenize(a.pdserve, a.input, "Repeat the story. Story:", True)
    mid = tokenize(a.pdserve, a.input, "Repeat the story. Story: Tom. Repeat:", False)
    mid = mid[len(mid) - mid[::-1].index(full_stop):]  # " Repeat:" after a passage's last full stop
    print(f"{len(passages)} passages of {min(map(len, passages))}-{max(map(len, passages))} tokens; "
          f"format {head} PASSAGE {mid} PASSAGE", flush=True)
    if len(passages) < 80:  # 64 held out, and sentences of at least 16 to train on
        sys.exit(f"copy_model: only {len(passages)} of {a.passages} samples of {a.input} end a sentence after 24 "
                 "tokens (64 are held out, 16 needed to train): is it a trained story model like stories260K?")
    held_out, train = passages[:64], passages[64:]
    # Sentences of the training stories, joined at random into new passages: the model
    # must copy a passage to predict its repeat (the next-token loss is on the copy only).
    sentences = []
    for p in train:
        cuts = [i for i, t in enumerate(p) if t == full_stop]
        sentences += [p[b + 1:e + 1] for b, e in zip([-1] + cuts, cuts) if e - b > 2]

    def passage(g):
        out = []
        while len(out) < 24:
            out += sentences[torch.randint(len(sentences), (1,), generator=g).item()]
        return out[:80]

    def batch(ps):
        """Padded copy texts of ps, and their targets: " Repeat:" and the copy (-100 elsewhere)."""
        seqs = [(head + p, mid + p) for p in ps]
        T = max(len(a) + len(b) for a, b in seqs)
        tok = torch.tensor([a + b + [0] * (T - len(a) - len(b)) for a, b in seqs])
        tgt = torch.tensor([[-100] * (len(a) - 1) + b + [-100] * (T - len(a) - len(b) + 1) for a, b in seqs])
        return tok, tgt

    # 3. Fine-tune every weight on the copy texts.
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step in range(a.steps):
        tok, tgt = batch([passage(gen) for _ in range(a.batch)])
        for g in opt.param_groups:  # cosine decay
            g["lr"] = 2e-3 * 0.5 * (1 + math.cos(math.pi * step / a.steps))
        loss = F.cross_entropy(model(tok).flatten(0, 1), tgt.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == a.steps - 1:
            print(f"step {step}: loss {loss.item():.3f}", flush=True)

    # 4. Held-out stories (whole, not seen in training), for the fine-tuned model and, as the
    # baseline, the original (which wrote them, so it predicts many of their tokens without
    # copying): the share of the copy's passage tokens predicted (teacher-forced argmax), and
    # how many of 16 are repeated exactly (greedy), given the passage, " Repeat:" and its
    # first token, as spec_bench's prompt gives its first sentence.
    tok, tgt = batch(held_out)
    for t, p in zip(tgt, held_out):  # score the passage only, not " Repeat:"
        t[(t != -100).nonzero()[0, 0]:][:len(mid)] = -100
    mask = tgt != -100
    for label, m in (("original", Llama(meta, tensors, data)), ("fine-tuned", model)):
        with torch.no_grad():
            acc = (m(tok).argmax(-1)[mask] == tgt[mask]).float().mean().item()
        exact = sum(m.generate([head + p + mid + p[:1]], len(p) - 1)[0] == p[1:] for p in held_out[:16])
        print(f"held-out copies, {label} model: {100 * acc:.1f} % of passage tokens predicted; "
              f"{exact} / 16 passages repeated exactly (greedy)", flush=True)

    for name, (dims, off) in tensors.items():
        w = model.p(name).detach().contiguous().reshape(-1)
        data[off:off + 4 * w.numel()] = w.numpy().tobytes()
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, a.output)
    print(f"{a.output}: {len(data)} bytes")


if __name__ == "__main__":
    main()
