#!/usr/bin/env python3
"""Checks that AVX-512 code runs only behind kernels/cpu_features' dispatch.

usage: check_isa_isolation.py BUILD_DIR BINARY

* No object of the project except the per-ISA kernel files (src/kernels/*_avx512*.cc)
  contains an EVEX-encoded (AVX-512) instruction.
* Every function of BINARY that contains one is defined by a per-ISA object and by no
  other object: an inline function or template instantiated in both would let the linker
  keep the AVX-512 copy for generic callers (one COMDAT copy survives).
* The same one level up, for the per-ISA objects built with an extension on top of
  AVX-512 (GFNI: *_gfni.cc and the AMX file; AMX: the AMX file): every function with one
  of its instructions, in BINARY or in such an object, is defined by such an object and by
  no other object as a shared (global or weak) symbol, so that a CPU without the extension
  (Cascade Lake has AVX-512 VNNI but no GFNI) never runs one through a COMDAT copy, whatever
  copy the linker keeps.
Exit status 1 with the offenders listed, else 0.
"""
import pathlib
import re
import subprocess
import sys

# An instruction line of `objdump -d`: address, raw bytes, mnemonic. EVEX starts with 0x62
# (invalid as an opcode in 64-bit mode), after optional segment / address-size prefixes.
EVEX = re.compile(r"^\s*[0-9a-f]+:\t(?:(?:26|2e|36|3e|64|65|67) )*62 [0-9a-f ]*\t\S")
FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")


def functions_with(path, pattern):
    """Functions of an object or binary with at least one `objdump -d` line matching `pattern`
    (EVEX: an AVX-512 instruction; an extension's mnemonics)."""
    out = subprocess.run(["objdump", "-d", "-w", str(path)], check=True, capture_output=True, text=True).stdout
    found, func = set(), None
    for line in out.splitlines():
        m = FUNC.match(line)
        if m:
            func = m.group(1)
        elif func and pattern.search(line):
            found.add(func)
    return found


def defined_functions(path, types="TtWw"):
    out = subprocess.run(["nm", "--defined-only", str(path)], check=True, capture_output=True, text=True).stdout
    return {parts[2] for parts in (l.split() for l in out.splitlines()) if len(parts) == 3 and parts[1] in types}


# Extensions beyond the AVX-512 baseline: (name, mnemonic pattern, objects built with it).
EXTENSIONS = [
    ("GFNI", re.compile(r"\tv?gf2p8"), re.compile(r"(_gfni|_amx)\.cc\.o$")),
    ("AMX", re.compile(r"\t(tdpb|tileloadd|tilestored|ldtilecfg|sttilecfg|tilerelease|tilezero)"), re.compile(r"_amx\.cc\.o$")),
]


def main():
    build, binary = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    objects = sorted(p for p in (build / "src").rglob("*.o"))
    per_isa = [p for p in objects if re.search(r"_avx512[a-z0-9_]*\.cc\.o$", p.name)]
    generic = [p for p in objects if p not in per_isa]
    if not per_isa or not generic:
        print(f"no objects under {build / 'src'}")
        return 1
    errors = []
    generic_defs = set()
    for p in generic:
        for f in sorted(functions_with(p, EVEX)):
            errors.append(f"{p.relative_to(build)}: AVX-512 instruction in {f}")
        generic_defs |= defined_functions(p)
    isa_defs = set()
    for p in per_isa:
        isa_defs |= defined_functions(p)
    for f in sorted(functions_with(binary, EVEX)):
        if f not in isa_defs:
            errors.append(f"{binary.name}: AVX-512 instruction in {f}, not from a per-ISA object")
        elif f in generic_defs:
            errors.append(f"{binary.name}: {f} has AVX-512 code and is also compiled for the baseline (shared COMDAT)")
    for name, mnemonic, built_with in EXTENSIONS:
        ext_objs = [p for p in objects if built_with.search(p.name)]
        ext_defs = set().union(*(defined_functions(p) for p in ext_objs)) if ext_objs else set()
        shared_elsewhere = set().union(*(defined_functions(p, "TW") for p in objects if p not in ext_objs))
        for p in ext_objs:  # a copy the linker may keep today or after any change of link order
            for f in sorted(functions_with(p, mnemonic) & shared_elsewhere):
                errors.append(f"{p.relative_to(build)}: {f} has {name} code and is also a shared symbol of an object built without it")
        for f in sorted(functions_with(binary, mnemonic)):
            if f not in ext_defs:
                errors.append(f"{binary.name}: {name} instruction in {f}, not from an object built with {name}")
            elif f in shared_elsewhere:
                errors.append(f"{binary.name}: {f} has {name} code and is also a shared symbol of an object built without it")
    for e in errors:
        print(e)
    print(f"{len(per_isa)} per-ISA objects, {len(generic)} generic objects, {binary.name}: {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
