#!/usr/bin/python3
"""sim_platform.py: SimGrid platform files for bench/sim/ina_sim.

  emulated N M   the emulated cluster of scripts/netns.sh: every host (w0..wN-1, a0..aM-1) on
                 one bridge through its own link of 1 Gbit/s each way (tbf), 20 us; "hw", an
                 aggregator host with an unshaped link; a host "vm" of 2 cores where every CPU
                 cost runs (all namespaces share the VM's cores)
  fattree N M K  a two-level fat tree of 100 Gbit/s links: leaves of K hosts, each leaf's
                 uplink K x 100 Gbit/s each way (non-blocking), workers w0..wN-1 then aggregator
                 hosts a0..aM-1 filling the leaves; plus "hw", a hardware switch at the top
                 with N ports at line rate (one link of N x 100 Gbit/s each way)
Writes the XML to stdout."""
import sys


def header():
    return ['<?xml version="1.0"?>',
            '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
            '<platform version="4.1">']


def emulated(n, m):
    hosts = ["w%d" % i for i in range(n)] + ["a%d" % j for j in range(m)] + ["hw"]
    out = header() + ['<zone id="emu" routing="Full">']
    for h in hosts:
        out.append('<host id="%s" speed="1Gf"/>' % h)
        # "hw": the aggregator host whose link compare.sh leaves unshaped (a hardware switch)
        out.append('<link id="l_%s" bandwidth="%s" latency="20us" sharing_policy="SPLITDUPLEX"/>'
                   % (h, "1000Gbps" if h == "hw" else "1Gbps"))
    out.append('<host id="vm" speed="1Gf" core="2"/>')
    for s in hosts:
        for d in hosts:
            if s != d:
                out.append('<route src="%s" dst="%s" symmetrical="NO"><link_ctn id="l_%s" direction="UP"/>'
                           '<link_ctn id="l_%s" direction="DOWN"/></route>' % (s, d, s, d))
    out += ['</zone>', '</platform>']
    return out


def fattree(n, m, k):
    hosts = ["w%d" % i for i in range(n)] + ["a%d" % j for j in range(m)]
    leaves = [hosts[i:i + k] for i in range(0, len(hosts), k)]
    out = header() + ['<zone id="top" routing="Full">']
    for li, leaf in enumerate(leaves):
        out.append('<zone id="leaf%d" routing="Full">' % li)
        out.append('<router id="r%d"/>' % li)
        for h in leaf:
            out.append('<host id="%s" speed="100Gf" core="32"/>' % h)
            out.append('<link id="l_%s" bandwidth="100Gbps" latency="1us" sharing_policy="SPLITDUPLEX"/>' % h)
        for h in leaf:
            out.append('<route src="%s" dst="r%d" symmetrical="NO"><link_ctn id="l_%s" direction="UP"/></route>' % (h, li, h))
            out.append('<route src="r%d" dst="%s" symmetrical="NO"><link_ctn id="l_%s" direction="DOWN"/></route>' % (li, h, h))
            for d in leaf:
                if d != h:
                    out.append('<route src="%s" dst="%s" symmetrical="NO"><link_ctn id="l_%s" direction="UP"/>'
                               '<link_ctn id="l_%s" direction="DOWN"/></route>' % (h, d, h, d))
        out.append('</zone>')
    out.append('<zone id="hwz" routing="Full"><host id="hw" speed="100Gf" core="32"/></zone>')
    for li, leaf in enumerate(leaves):
        out.append('<link id="up%d" bandwidth="%dGbps" latency="1us" sharing_policy="SPLITDUPLEX"/>'
                   % (li, 100 * len(leaf)))
    out.append('<link id="hwlink" bandwidth="%dGbps" latency="1us" sharing_policy="SPLITDUPLEX"/>' % (100 * n))
    zones = [("leaf%d" % li, "r%d" % li, "up%d" % li) for li in range(len(leaves))] + [("hwz", "hw", "hwlink")]
    for zs, gs, ls in zones:
        for zd, gd, ld in zones:
            if zs != zd:
                out.append('<zoneRoute src="%s" dst="%s" gw_src="%s" gw_dst="%s" symmetrical="NO">'
                           '<link_ctn id="%s" direction="UP"/><link_ctn id="%s" direction="DOWN"/></zoneRoute>'
                           % (zs, zd, gs, gd, ls, ld))
    out += ['</zone>', '</platform>']
    return out


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    if argv[1] == "emulated" and len(argv) == 4:
        lines = emulated(int(argv[2]), int(argv[3]))
    elif argv[1] == "fattree" and len(argv) == 5:
        lines = fattree(int(argv[2]), int(argv[3]), int(argv[4]))
    else:
        sys.exit("sim_platform.py: usage: emulated N M | fattree N M K (--help)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
