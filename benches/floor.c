/* The floor of a durable first run: what any wrapper that records a claim
 * and an outcome, each durably, cannot avoid doing. It starts, opens its
 * record, writes and fsyncs the claim, forks and execs the command (PATH
 * lookup, as idem does), waits, writes and fsyncs the outcome, and exits
 * with the command's status. bench.py builds it with cc and measures idem's
 * first run against it.
 *
 *     floor RECORD COMMAND [ARGS]...
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void durable(int fd, const char *line)
{
    /* Appended, as a write-ahead log is: the record grows with each run. */
    if (write(fd, line, strlen(line)) < 0 || fsync(fd) < 0) {
        perror("floor: record");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fputs("usage: floor RECORD COMMAND [ARGS]...\n", stderr);
        return 2;
    }
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    durable(fd, "claimed\n");
    pid_t child = fork();
    if (child < 0) {
        perror("floor: fork");
        return 1;
    }
    if (child == 0) {
        execvp(argv[2], argv + 2);
        perror(argv[2]);
        _exit(127);
    }
    int status;
    if (waitpid(child, &status, 0) < 0) {
        perror("floor: wait");
        return 1;
    }
    durable(fd, WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "succeeded\n" : "failed\n");
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
