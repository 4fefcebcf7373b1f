# Marks the GLIBC_2.38 version need of an ELF64 shared object weak (VER_FLG_WEAK), so glibc 2.36
# loads it; the one symbol needing it comes from an unversioned LD_PRELOAD shim.
import struct, sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
shoff, = struct.unpack_from('<Q', b, 0x28); shentsize, shnum, shstrndx = struct.unpack_from('<HHH', b, 0x3a)
secs = [struct.unpack_from('<IIQQQQIIQQ', b, shoff + i * shentsize) for i in range(shnum)]
SHT_GNU_verneed = 0x6ffffffe
for s in secs:
    if s[1] != SHT_GNU_verneed: continue
    strtab = secs[s[6]]; stroff = strtab[4]
    def name(o): e = b.index(0, stroff + o); return b[stroff + o:e].decode()
    off = s[4]
    while True:
        vn_version, vn_cnt, vn_file, vn_aux, vn_next = struct.unpack_from('<HHIII', b, off)
        a = off + vn_aux
        for _ in range(vn_cnt):
            h, flags, other, nm, nxt = struct.unpack_from('<IHHII', b, a)
            if name(nm) == 'GLIBC_2.38':
                struct.pack_into('<H', b, a + 4, flags | 2); print('weak:', name(vn_file), name(nm))
            a += nxt
            if nxt == 0: break
        if vn_next == 0: break
        off += vn_next
open(p, 'wb').write(b)
