"""Checks what each target's compiled code really is.

isa LIB:      objdump the library; every function of a per-target namespace must use
              that target's registers: AVX-512 copies use zmm FMAs, AVX2 copies ymm FMAs
              and no zmm, SSE and scalar copies no VEX/EVEX instruction at all.
weak OBJS:    nm the xsimd per-arch objects; no weak symbol may be defined by two of
              them (the linker would keep one copy, possibly AVX-512, for all).
"""
import collections
import re
import subprocess
import sys

GROUPS = {
    # group: (needs FMA on this register, forbidden pattern)
    "N_AVX3::": ("zmm", None),
    "xsimd_avx512::": ("zmm", None),
    "N_AVX2::": ("ymm", r"%zmm"),
    "xsimd_avx2::": ("ymm", r"%zmm"),
    "N_SSE4::": (None, r"^v"),
    "N_SSSE3::": (None, r"^v"),
    "N_SCALAR::": (None, r"^v"),
    "N_EMU128::": (None, r"^v"),
    "xsimd_sse4::": (None, r"^v"),
    "xsimd_sse2::": (None, r"^v"),
}
# Functions of a group: the library's own per-target namespace, and, for xsimd, its
# instantiations for that arch (which builds without full inlining keep out of line).
MARKERS = {
    "xsimd_avx512::": ("xsimd_avx512::", "xsimd::avx512bw>"),
    "xsimd_avx2::": ("xsimd_avx2::", "xsimd::fma3<xsimd::avx2> >", "xsimd::fma3<xsimd::avx2>>"),
    "xsimd_sse4::": ("xsimd_sse4::", "xsimd::sse4_2>"),
    "xsimd_sse2::": ("xsimd_sse2::", "xsimd::sse2>"),
}


def group_of(name):
    for g in GROUPS:
        if g.startswith("N_"):
            if g in name and "octattn::kernels::" in name:
                return g
        elif any(m in name for m in MARKERS[g]):
            return g
    return None


def check_isa(lib):
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", lib], check=True,
                         capture_output=True, text=True).stdout
    insns = collections.defaultdict(list)
    current = None
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            name = m.group(1)
            current = group_of(name)
            continue
        if current is None:
            continue
        parts = line.split("\t")
        if len(parts) >= 2 and parts[-1].strip():
            insns[current].append(parts[-1].strip())
    failures = []
    for group, (fma_reg, forbidden) in GROUPS.items():
        code = insns.get(group)
        if not code:
            if group in ("N_SCALAR::", "N_EMU128::"):
                continue  # one of the two exists
            failures.append(f"{group}: no code found")
            continue
        fmas = sum(1 for i in code if re.match(r"vfmadd\w*ps\b.*%" + fma_reg, i)) if fma_reg else 0
        bad = [i for i in code if forbidden and re.search(forbidden, i)]
        print(f"{group:16} {len(code):6} instructions, {fmas:4} {fma_reg or '-'} FMAs, {len(bad)} forbidden")
        if fma_reg and fmas == 0:
            failures.append(f"{group}: no vfmadd*ps on {fma_reg}")
        if bad:
            failures.append(f"{group}: {len(bad)} instructions its target lacks, e.g. {bad[:3]}")
    return failures


def check_weak(objs):
    per_arch = [o for o in objs if re.search(r"xsimd_(avx512|avx2|sse4|sse2)\.cc\.o$", o)]
    if len(per_arch) != 4:
        return [f"expected 4 xsimd per-arch objects, got {per_arch}"]
    owners = collections.defaultdict(set)
    for obj in per_arch:
        out = subprocess.run(["nm", "-C", "--defined-only", obj], check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            parts = line.split(" ", 2)
            # DW.ref.* are personality-routine pointers (data, identical everywhere).
            if len(parts) == 3 and parts[1] in ("W", "V", "u") and not parts[2].startswith("DW.ref."):
                owners[parts[2]].add(obj.rsplit("/", 1)[-1])
    shared = {s: o for s, o in owners.items() if len(o) > 1}
    print(f"{len(owners)} weak symbols in the per-arch objects, {len(shared)} defined by more than one")
    return [f"weak symbol in {sorted(o)}: {s}" for s, o in list(shared.items())[:20]]


def main():
    mode, args = sys.argv[1], [a for arg in sys.argv[2:] for a in arg.split(";") if a]
    failures = check_isa(args[0]) if mode == "isa" else check_weak(args)
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
