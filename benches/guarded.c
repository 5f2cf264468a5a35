/* The floor of a durable first run that keeps idem's liveness promise:
 * floor.c plus the shape that promise needs. The claim is made durable
 * first; then a guardian process (a child subreaper, so nothing the
 * command starts escapes it, and a process apart from the wrapper, so the
 * run is stopped even when the wrapper dies) forks and execs the command;
 * the command's stdout and stderr go through pipes that the wrapper reads
 * to their end (the ledger keeps their tails); the guardian waits for the
 * command and exits with its status; the outcome is made durable last.
 * No threads, no database: only the processes, pipes and fsyncs that
 * design cannot do without. bench.py measures idem's first run against it
 * to tell the design's cost from idem's own.
 *
 *     guarded RECORD COMMAND [ARGS]...
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static void durable(int fd, const char *line)
{
    if (write(fd, line, strlen(line)) < 0 || fsync(fd) < 0) {
        perror("guarded: record");
        exit(1);
    }
}

static void guardian(char **command, int out, int err)
{
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    pid_t child = fork();
    if (child < 0)
        _exit(125);
    if (child == 0) {
        dup2(out, 1);
        dup2(err, 2);
        execvp(command[0], command);
        _exit(127);
    }
    close(out);
    close(err);
    int status = 0, main_status = 0;
    pid_t pid;
    while ((pid = wait(&status)) > 0)
        if (pid == child)
            main_status = status;
    _exit(WIFEXITED(main_status) ? WEXITSTATUS(main_status) : 128 + WTERMSIG(main_status));
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fputs("usage: guarded RECORD COMMAND [ARGS]...\n", stderr);
        return 2;
    }
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    durable(fd, "claimed\n");
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
        perror("guarded: pipe");
        return 1;
    }
    pid_t guard = fork();
    if (guard < 0) {
        perror("guarded: fork");
        return 1;
    }
    if (guard == 0)
        guardian(argv + 2, out[1], err[1]);
    close(out[1]);
    close(err[1]);
    struct pollfd fds[2] = {{.fd = out[0], .events = POLLIN}, {.fd = err[0], .events = POLLIN}};
    char buffer[65536];
    for (int open_pipes = 2; open_pipes > 0;) {
        if (poll(fds, 2, -1) < 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd >= 0 && fds[i].revents && read(fds[i].fd, buffer, sizeof buffer) <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_pipes--;
            }
        }
    }
    int status;
    if (waitpid(guard, &status, 0) < 0) {
        perror("guarded: wait");
        return 1;
    }
    durable(fd, WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "succeeded\n" : "failed\n");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
