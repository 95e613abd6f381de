"""Checks what each target's compiled code really is.

isa LIB:      objdump the library; every function of a per-target namespace must use
              that target's registers: AVX-512 copies use zmm FMAs, AVX2 copies ymm FMAs
              and no zmm, SSE and scalar copies no VEX/EVEX instruction at all; the
              avx512_bf16 and amx_bf16 units have vdpbf16ps and vpdpbusd (AVX512_VNNI)
              and no other function does;
              the amx_bf16 unit has tdpbf16ps (AMX tiles) and no other function does.
weak OBJS:    nm the xsimd per-arch objects; no weak symbol may be defined by two of
              them (the linker would keep one copy, possibly AVX-512, for all), and none
              of the avx512_bf16 or amx_bf16 units' by any other object.
isa-arm64 OBJDUMP LIB:
              the ARM64 library: the NEON copies (Highway's and xsimd's) use NEON FMAs
              (fmla on v registers), the SVE copies SVE FMAs (z registers), and no
              function outside the SVE namespaces has an SVE instruction (z or p
              registers), so nothing a NEON-only CPU runs can fault.
weak-arm64 NM OBJS:
              no weak symbol of an SVE unit's object is defined by any other object (the
              linker could hand its SVE copy to every caller).
"""
import collections
import re
import subprocess
import sys

GROUPS = {
    # group: (needs FMA on this register, forbidden pattern); more specific groups first
    "amx::N_AVX3::": ("zmm", None),
    "bf16::N_AVX3::": ("zmm", None),
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
    "amx::N_AVX3::": ("octattn::kernels::amx::N_AVX3::",),
    "bf16::N_AVX3::": ("octattn::kernels::bf16::N_AVX3::",),
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
    current, name = None, None
    # The dot product instructions of the bf16 and amx units, each counted outside them.
    dot_insns = ("vdpbf16ps", "vpdpbusd")
    dot_elsewhere = {d: collections.defaultdict(int) for d in dot_insns}
    tile_elsewhere = collections.defaultdict(int)  # AMX tile instructions outside the amx unit
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            name = m.group(1)
            current = group_of(name)
            continue
        parts = line.split("\t")
        if len(parts) < 2 or not parts[-1].strip():
            continue
        insn = parts[-1].strip()
        for d in dot_insns:
            if insn.startswith(d) and current not in ("bf16::N_AVX3::", "amx::N_AVX3::"):
                dot_elsewhere[d][name] += 1
        if re.match(r"t(dp|ile|ilestored|ileloadd|ilezero)\w*\b|ldtilecfg", insn) and \
                current != "amx::N_AVX3::":
            tile_elsewhere[name] += 1
        if current is not None:
            insns[current].append(insn)
    failures = []
    for d in dot_insns:
        dots = sum(1 for i in insns.get("bf16::N_AVX3::", []) if re.match(d + r"\b.*%zmm", i))
        print(f"{dots} zmm {d} in the avx512_bf16 unit, {sum(dot_elsewhere[d].values())} elsewhere")
        if dots == 0:
            failures.append(f"bf16::N_AVX3::: no {d} on zmm")
        for fn, n in list(dot_elsewhere[d].items())[:20]:
            failures.append(f"{d} outside the avx512_bf16 and amx_bf16 units ({n}x): {fn}")
    amx = insns.get("amx::N_AVX3::", [])
    tiles = sum(1 for i in amx if re.match(r"tdpbf16ps\b", i))
    print(f"{tiles} tdpbf16ps in the amx_bf16 unit, {sum(tile_elsewhere.values())} tile "
          "instructions elsewhere")
    if tiles == 0:
        failures.append("amx::N_AVX3::: no tdpbf16ps")
    for fn, n in list(tile_elsewhere.items())[:20]:
        failures.append(f"AMX tile instruction outside the amx_bf16 unit ({n}x): {fn}")
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
    bf16 = [o for o in objs if o.endswith("highway_avx512_bf16.cc.o")]
    amx = [o for o in objs if o.endswith("highway_amx_bf16.cc.o")]
    if len(bf16) != 1 or len(amx) != 1:
        return [f"expected the avx512_bf16 and amx_bf16 objects, got {bf16} and {amx}"]
    failures = check_weak_unit(bf16[0], objs) + check_weak_unit(amx[0], objs)
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
    return failures + [f"weak symbol in {sorted(o)}: {s}" for s, o in list(shared.items())[:20]]


def weak_symbols(nm, obj):
    out = subprocess.run([nm, "-C", "--defined-only", obj], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        parts = line.split(" ", 2)
        # DW.ref.* are personality-routine pointers (data, identical everywhere).
        if len(parts) == 3 and parts[1] in ("W", "V", "u") and not parts[2].startswith("DW.ref."):
            yield parts[2]


def check_weak_unit(unit, objs, nm="nm"):
    """No weak symbol of `unit` (compiled for CPUs others lack) is defined by another object:
    the linker could hand its copy to every caller."""
    mine = set(weak_symbols(nm, unit))
    shared = collections.defaultdict(set)
    for obj in objs:
        if obj != unit:
            for sym in mine.intersection(weak_symbols(nm, obj)):
                shared[sym].add(obj.rsplit("/", 1)[-1])
    print(f"{len(mine)} weak symbols in {unit.rsplit('/', 1)[-1]}, {len(shared)} also defined elsewhere")
    return [f"weak symbol of {unit.rsplit('/', 1)[-1]} also in {sorted(o)}: {s}"
            for s, o in list(shared.items())[:20]]


SVE_OPERAND = re.compile(r"\bz\d+\.[bhsdq]\b|\bz\d+\[|\bp\d+/[mz]\b|\bp\d+\.[bhsd]\b")
ARM_GROUPS = {
    # group: (markers, required FMA pattern, SVE allowed)
    "N_NEON::": (("N_NEON::",), r"^fml[as]\s+v\d+\.4s", False),
    "xsimd_neon64::": (("xsimd_neon64::", "xsimd::neon64>"), r"^fml[as]\s+v\d+\.4s", False),
    "N_SVE_256::": (("N_SVE_256::",), r"^(fmla|fmad|fmls|fmsb)\s+z\d+\.s", True),
    "N_SVE2_128::": (("N_SVE2_128::",), r"^(fmla|fmad|fmls|fmsb)\s+z\d+\.s", True),
    "N_EMU128::": (("N_EMU128::",), None, False),
    "N_SCALAR::": (("N_SCALAR::",), None, False),
}


def check_isa_arm64(objdump, lib):
    out = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", lib], check=True,
                         capture_output=True, text=True).stdout
    insns = collections.defaultdict(list)
    sve_elsewhere = collections.defaultdict(list)
    current, name = None, None
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            name = m.group(1)
            current = next((g for g, (marks, _, _) in ARM_GROUPS.items()
                            if "octattn::kernels::" in name or g.startswith("xsimd")
                            if any(k in name for k in marks)), None)
            continue
        parts = line.split("\t")
        if len(parts) < 2 or not parts[-1].strip() or name is None:
            continue
        insn = " ".join(p.strip() for p in parts[1:] if p.strip())
        if current:
            insns[current].append(insn)
        if SVE_OPERAND.search(insn) and not (current and ARM_GROUPS[current][2]):
            sve_elsewhere[name].append(insn)
    failures = [] if insns.get("N_SCALAR::") or insns.get("N_EMU128::") else ["no scalar target"]
    for group, (_, fma, _) in ARM_GROUPS.items():
        code = insns.get(group)
        if not code:
            if group in ("N_SCALAR::", "N_EMU128::"):
                continue  # one of the two exists
            failures.append(f"{group}: no code found")
            continue
        fmas = sum(1 for i in code if fma and re.match(fma, i))
        print(f"{group:16} {len(code):6} instructions, {fmas:4} FMAs of its kind")
        if fma and fmas == 0:
            failures.append(f"{group}: no FMA matching {fma}")
    for fn, bad in list(sve_elsewhere.items())[:20]:
        failures.append(f"SVE instruction outside the SVE namespaces, in {fn}: {bad[:2]}")
    print(f"{len(sve_elsewhere)} functions outside the SVE namespaces with SVE instructions")
    return failures


def check_weak_arm64(nm, objs):
    sve = [o for o in objs if re.search(r"highway_sve(_256|2_128)\.cc\.o$", o)]
    if len(sve) != 2:
        return [f"expected 2 SVE objects, got {sve}"]
    owners = collections.defaultdict(set)
    for obj in objs:
        out = subprocess.run([nm, "-C", "--defined-only", obj], check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1] in ("W", "V", "u") and not parts[2].startswith("DW.ref."):
                owners[parts[2]].add(obj)
    shared = {s: o for s, o in owners.items() if len(o) > 1 and any(x in sve for x in o)}
    print(f"{sum(1 for o in owners.values() if any(x in sve for x in o))} weak symbols in the SVE "
          f"objects, {len(shared)} also defined by another object")
    return [f"weak symbol in {sorted(x.rsplit('/', 1)[-1] for x in o)}: {s}"
            for s, o in list(shared.items())[:20]]


def main():
    mode, args = sys.argv[1], [a for arg in sys.argv[2:] for a in arg.split(";") if a]
    if mode == "isa-arm64":
        failures = check_isa_arm64(args[0], args[1])
    elif mode == "weak-arm64":
        failures = check_weak_arm64(args[0], args[1:])
    else:
        failures = check_isa(args[0]) if mode == "isa" else check_weak(args)
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
