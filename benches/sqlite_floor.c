/* The floors of a run whose ledger is SQLite: what any wrapper that keeps
 * idem's ledger (a SQLite file in WAL mode, idem's schema) cannot avoid,
 * with none of idem's own work. bench.py builds it with cc against the
 * SQLite that idem bundles, with idem's compile-time options, and
 * measures idem's skip and first run against it: what is left between
 * them is idem's, and what lies between this floor and benches/floor.c is
 * SQLite's.
 *
 *     sqlite_floor skip LEDGER KEY
 *         opens the ledger and reads KEY's head, as a skip must; exits 0
 *         when it succeeded, 1 otherwise
 *     sqlite_floor first LEDGER COMMAND [ARGS]...
 *         opens the ledger, commits one synced write transaction (a claim),
 *         forks and execs COMMAND (PATH lookup), waits, commits a second
 *         (an outcome), and exits with COMMAND's status
 *
 * Each write is the smallest the ledger has (its fencing counter), under
 * BEGIN IMMEDIATE and synchronous=FULL, so the two commits are two syncs
 * of the WAL, as idem's claim and outcome are.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sqlite3.h"

static sqlite3 *db;

static void fail(const char *what)
{
    fprintf(stderr, "sqlite_floor: %s: %s\n", what, sqlite3_errmsg(db));
    exit(125);
}

static void exec(const char *sql)
{
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        fail(sql);
}

static void write_once(void)
{
    exec("BEGIN IMMEDIATE; UPDATE fences SET last = last + 1; COMMIT");
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "skip") != 0 && strcmp(argv[1], "first") != 0)) {
        fputs("usage: sqlite_floor skip LEDGER KEY | sqlite_floor first LEDGER COMMAND [ARGS]...\n", stderr);
        return 2;
    }
    if (sqlite3_open_v2(argv[2], &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
        fail("open");
    /* As idem keeps them: the WAL and its index stay between processes,
     * and a commit checkpoints once the WAL holds 64 pages. */
    sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
    sqlite3_wal_autocheckpoint(db, 64);
    if (strcmp(argv[1], "skip") == 0) {
        sqlite3_stmt *head;
        if (sqlite3_prepare_v2(db,
                               "SELECT r.status FROM keys k JOIN runs r ON r.id = k.head WHERE k.key = ?1",
                               -1, &head, NULL) != SQLITE_OK)
            fail("prepare");
        sqlite3_bind_text(head, 1, argv[3], -1, SQLITE_STATIC);
        int succeeded = sqlite3_step(head) == SQLITE_ROW && sqlite3_column_int(head, 0) == 1;
        return succeeded ? 0 : 1;
    }
    exec("PRAGMA synchronous = FULL");
    write_once();
    pid_t child = fork();
    if (child < 0) {
        perror("sqlite_floor: fork");
        return 125;
    }
    if (child == 0) {
        execvp(argv[3], argv + 3);
        _exit(127);
    }
    int status;
    if (waitpid(child, &status, 0) < 0) {
        perror("sqlite_floor: wait");
        return 125;
    }
    write_once();
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
