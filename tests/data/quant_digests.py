#!/usr/bin/env python3
"""Per-tensor SHA-256 of a GGUF file's tensor data: one line per tensor, `NAME TYPE_ID SHA256`,
in file order. usage: quant_digests.py FILE.gguf > OUT.sha256"""
import hashlib, struct, sys

BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 10: (256, 84),
         11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 20: (32, 18), 23: (256, 136), 30: (1, 2)}

def main(path):
    f = open(path, 'rb')
    rd = lambda fmt: struct.unpack('<' + fmt, f.read(struct.calcsize('<' + fmt)))
    rs = lambda: f.read(rd('Q')[0]).decode()
    def skip(t):
        if t == 8: rs()
        elif t == 9:
            at, n = rd('IQ')
            for _ in range(n): skip(at)
        else: f.read({0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[t])
    assert f.read(4) == b'GGUF'
    _, n_t, n_kv = rd('IQQ')
    align = 32
    for _ in range(n_kv):
        k = rs(); t, = rd('I')
        if k == 'general.alignment': align, = rd('I')
        else: skip(t)
    infos = []
    for _ in range(n_t):
        name = rs(); nd, = rd('I'); dims = rd('Q' * nd); t, off = rd('IQ')
        n = 1
        for d in dims: n *= d
        be, bb = BLOCK[t]
        infos.append((name, t, off, n // be * bb))
    base = (f.tell() + align - 1) // align * align
    for name, t, off, nbytes in infos:
        f.seek(base + off)
        print(name, t, hashlib.sha256(f.read(nbytes)).hexdigest())

if __name__ == '__main__':
    main(sys.argv[1])
