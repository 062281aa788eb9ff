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
  grouped N M G S  the same fat tree for ina_sim --group G (the symmetry reduction): each
                 group of G alike hosts is one host whose link is G x 100 Gbit/s, in a zone of
                 its own behind an uplink as fast (the tree is non-blocking: no uplink is ever
                 the bottleneck, so where a group's hosts sit does not matter); the N/G worker
                 groups w0.. and M/G aggregator groups a0.. (dedicated; M = 0: none). S > 0:
                 colocated with S shards, H = S/(N/G) a group: "w<g>" holds the group's H
                 hosts with a shard (link H x 100 Gbit/s), "x<g>" its G - H others. A host's
                 traffic to another of its group crosses its link up and the other's down
                 (a route from w<g> to itself included), as inside a leaf.
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


def leaf(zone, router, hosts, self_routes):
    """A leaf zone: hosts [(id, Gbit/s)] each behind its own link to the router; a host reaches
    another of the leaf over its link up and the other's down (self_routes: itself too)."""
    out = ['<zone id="%s" routing="Full">' % zone, '<router id="%s"/>' % router]
    for h, gbps in hosts:
        out.append('<host id="%s" speed="100Gf" core="32"/>' % h)
        out.append('<link id="l_%s" bandwidth="%dGbps" latency="1us" sharing_policy="SPLITDUPLEX"/>'
                   % (h, gbps))
    for h, _ in hosts:
        out.append('<route src="%s" dst="%s" symmetrical="NO"><link_ctn id="l_%s" direction="UP"/></route>' % (h, router, h))
        out.append('<route src="%s" dst="%s" symmetrical="NO"><link_ctn id="l_%s" direction="DOWN"/></route>' % (router, h, h))
        for d, _ in hosts:
            if d != h or self_routes:
                out.append('<route src="%s" dst="%s" symmetrical="NO"><link_ctn id="l_%s" direction="UP"/>'
                           '<link_ctn id="l_%s" direction="DOWN"/></route>' % (h, d, h, d))
    return out + ['</zone>']


def top(zones):
    """Every zone (id, gateway, uplink) reaches every other over its uplink and theirs."""
    out = []
    for zs, gs, ls in zones:
        for zd, gd, ld in zones:
            if zs != zd:
                out.append('<zoneRoute src="%s" dst="%s" gw_src="%s" gw_dst="%s" symmetrical="NO">'
                           '<link_ctn id="%s" direction="UP"/><link_ctn id="%s" direction="DOWN"/></zoneRoute>'
                           % (zs, zd, gs, gd, ls, ld))
    return out


def uplink(name, gbps):
    return '<link id="%s" bandwidth="%dGbps" latency="1us" sharing_policy="SPLITDUPLEX"/>' % (name, gbps)


def fattree(n, m, k):
    hosts = ["w%d" % i for i in range(n)] + ["a%d" % j for j in range(m)]
    leaves = [hosts[i:i + k] for i in range(0, len(hosts), k)]
    out = header() + ['<zone id="top" routing="Full">']
    for li, hs in enumerate(leaves):
        out += leaf("leaf%d" % li, "r%d" % li, [(h, 100) for h in hs], False)
    out.append('<zone id="hwz" routing="Full"><host id="hw" speed="100Gf" core="32"/></zone>')
    out += [uplink("up%d" % li, 100 * len(hs)) for li, hs in enumerate(leaves)]
    out.append(uplink("hwlink", 100 * n))
    out += top([("leaf%d" % li, "r%d" % li, "up%d" % li) for li in range(len(leaves))]
               + [("hwz", "hw", "hwlink")])
    return out + ['</zone>', '</platform>']


def grouped(n, m, g, s):
    zones = []  # (zone id, [(host, hosts it stands for)])
    for i in range(n // g):
        h = s // (n // g) if s else g
        zones.append(("g%d" % i, [("w%d" % i, h)] + ([("x%d" % i, g - h)] if h < g else [])))
    for j in range(m // g):
        zones.append(("ga%d" % j, [("a%d" % j, g)]))
    out = header() + ['<zone id="top" routing="Full">']
    for zi, (z, hosts) in enumerate(zones):
        out += leaf(z, "r%d" % zi, [(h, 100 * k) for h, k in hosts], True)
    out += [uplink("up%d" % zi, 100 * sum(k for _, k in hosts)) for zi, (_, hosts) in enumerate(zones)]
    out += top([(z, "r%d" % zi, "up%d" % zi) for zi, (z, _) in enumerate(zones)])
    return out + ['</zone>', '</platform>']


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    if argv[1] == "emulated" and len(argv) == 4:
        lines = emulated(int(argv[2]), int(argv[3]))
    elif argv[1] == "fattree" and len(argv) == 5:
        lines = fattree(int(argv[2]), int(argv[3]), int(argv[4]))
    elif argv[1] == "grouped" and len(argv) == 6:
        n, m, g, s = (int(x) for x in argv[2:6])
        if g < 1 or n % g or m % g or (s and (s % (n // g) or s > n)):
            sys.exit("sim_platform.py: grouped: N and M multiples of G, S a multiple of N/G, S <= N")
        lines = grouped(n, m, g, s)
    else:
        sys.exit("sim_platform.py: usage: emulated N M | fattree N M K | grouped N M G S (--help)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
