/* ebpf_none.c: ina-switch built without the eBPF dataplane: --dataplane ebpf says why and fails. */
#include <errno.h>
#include <stdio.h>

#include "switch/ebpf/ebpf_dp.h"

int ina__ebpf_built(char *err, size_t errlen)
{
    snprintf(err, errlen,
             "this ina-switch was built without the eBPF dataplane: building it needs clang "
             "(BPF target), libbpf-dev and bpftool (scripts/deps.sh), then a rebuild");
    return 0;
}

int ina__ebpf_open(struct ina_ebpf **out, const struct ina_ebpf_opts *o, char *err, size_t errlen)
{
    (void)o;
    *out = NULL;
    ina__ebpf_built(err, errlen);
    return -ENOTSUP;
}

void ina__ebpf_bind(struct ina_ebpf *e, struct ina_switch *sw)
{
    (void)e;
    (void)sw;
}

int ina__ebpf_event_fd(const struct ina_ebpf *e)
{
    (void)e;
    return -1;
}

int ina__ebpf_poll(struct ina_ebpf *e)
{
    (void)e;
    return 0;
}

void ina__ebpf_report(const struct ina_ebpf *e, FILE *f)
{
    (void)e;
    (void)f;
}

void ina__ebpf_close(struct ina_ebpf *e) { (void)e; }

uint32_t ina__ebpf_mtu_elems(const struct ina_ebpf *e)
{
    (void)e;
    return 0;
}

int ina__ebpf_test_run(struct ina_ebpf *e, const void *frame, uint32_t len, void *out,
                      uint32_t *outlen, int *retval)
{
    (void)e;
    (void)frame;
    (void)len;
    (void)out;
    (void)outlen;
    (void)retval;
    return -ENOTSUP;
}
