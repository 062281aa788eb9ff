/* busy_poll.c: SO_BUSY_POLL on a socket, best effort (busy_poll.h). */
#include <errno.h>
#include <sys/socket.h>

#include "common/busy_poll.h"

#ifndef SO_BUSY_POLL
#define SO_BUSY_POLL 46 /* linux/socket.h, since Linux 3.11 */
#endif

int ina_sock_busy_poll(int fd, int us)
{
    if (us <= 0)
        return 0;
    return setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof(us)) == 0 ? 0 : -errno;
}
