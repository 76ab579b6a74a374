/* SPDX-License-Identifier: Apache-2.0 */
#ifndef TKBOX_PATCH_APPLY_WRITE_H
#define TKBOX_PATCH_APPLY_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "macro.h"
#include "patch/apply-answer.h"

/*
 * The writer of tkbox apply (issue 14; the reference's "Change your
 * repository behind your back" row): the decided files, in order, into the
 * checkout. Box writes them itself; git never runs on the checkout.
 *
 * The child, `tkbox-host apply-write --checkout DIR --scratch DIR`, confines
 * itself first (SANDBOX_APPLY_WRITE: writes only beneath the checkout, reads
 * only the scratch, runs no program, opens no socket), reads the write order
 * (apply-answer.h, at most APPLY_PLAN_MAX_BYTES) on stdin, which must name the
 * same two directories, and then, per file (apply_write_files):
 *   1. the result re-read from <scratch>/tree/<path> (safe_openat: no
 *      symlink followed; a symlink result read with readlinkat beneath its
 *      parent; at most PATCH_MAX_FILE_BYTES) and checked against the decided
 *      sha256, git mode and size (rule result-mismatch); these bytes are what
 *      is written;
 *   2. the parent opened from the checkout root one component at a time with
 *      O_NOFOLLOW|O_DIRECTORY (a symlink: rule symlink-parent; anything else
 *      that is not a directory: checkout-changed); a creation's missing
 *      parents made (0755) the same way;
 *   3. the checkout's entry checked against the plan's pre state: type, git
 *      mode and sha256 (rule checkout-changed);
 *   4. a file: temp `.tkbox-apply-<16 hex>` in the same directory,
 *      openat(O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW), fchmod to 0644/0755, write,
 *      fsync, renameat over the name; a symlink: symlinkat to a temp name,
 *      renameat; a delete: fstatat(AT_SYMLINK_NOFOLLOW) must show a regular
 *      file or a symlink (rule delete-not-file), then unlinkat; then the
 *      directory is fsync'ed (rule write-failed for an I/O error, naming it);
 *   5. what is there now re-read (O_NOFOLLOW) and checked against the decision
 *      (rule written-mismatch: in place but not what was decided);
 *   6. {"written":"path"} printed and flushed.
 * After the last: {"done":N}. On any failure: one {"error",...} line naming
 * the rule and the path, then exit 1, nothing more written; its temp file is
 * removed. Directories made for that file's creation may stay (empty): the
 * profile removes no directory. Files written before it stay (not rolled back).
 *
 * Test hook (docs/development.md): TKBOX_TEST_APPLY_STOP_AFTER=N in the
 * writer's environment makes it raise SIGSTOP right after its Nth written line
 * is flushed.
 */

#define APPLY_WRITE_STOP_ENV "TKBOX_TEST_APPLY_STOP_AFTER"
#define APPLY_WRITE_TEMP_PREFIX ".tkbox-apply-"

/*
 * The writer's work (the child, once confined): the order's files into
 * checkout_fd (an O_DIRECTORY fd of order->checkout), results read beneath
 * tree_fd (<scratch>/tree), progress lines written whole to out_fd. stop_after
 * 0: no test stop. 0 when every file was written ({"done":N} printed), 1 when
 * it stopped at a file (its error line printed), -errno when out_fd could not
 * be written (nothing more can be said).
 */
_wur_ int apply_write_files(const struct apply_plan *order, int checkout_fd, int tree_fd, int out_fd,
			    unsigned stop_after);

/* The daemon's side: the running writer child. */
struct apply_writer;

/*
 * Start `EXE apply-write --checkout C --scratch S` for order (C and S are the
 * order's): its environment is PATH and LC_ALL=C only, plus
 * TKBOX_TEST_APPLY_STOP_AFTER when child_env (NULL-terminated "K=V" entries,
 * may be NULL) has it; every other child_env entry is ignored. Its stdin is
 * a sealed memfd with the encoded order, its stdout a pipe this side reads
 * without blocking (apply_write_read), its stderr /dev/null; it is killed
 * when this process dies (PR_SET_PDEATHSIG). Safe in a threaded process
 * (only async-signal-safe calls between fork and exec). -errno with a
 * message in diag.
 */
_wur_ int apply_write_start(const char *exe, const struct apply_plan *order, char *const *child_env,
			    struct apply_writer **ret, char *diag, size_t diag_size);

/* The pipe to poll for POLLIN (and POLLHUP) between apply_write_read calls. */
int apply_write_fd(const struct apply_writer *w);

/* The child's pid (for a kill when the apply must stop at once). */
pid_t apply_write_pid(const struct apply_writer *w);

/*
 * The next progress line, without blocking: 1 and *ret (release it with
 * apply_line_release) when a whole line was read, 0 when none is complete yet
 * (poll apply_write_fd), -EPIPE when the child closed its stdout with no
 * partial line, -EBADMSG / -E2BIG (diag says why: a line the decoder refuses,
 * a line over APPLY_LINE_MAX, output that ends mid-line), -errno for a read
 * error. Call again after 1: several lines may have arrived at once.
 */
_wur_ int apply_write_read(struct apply_writer *w, struct apply_line *ret, char *diag, size_t diag_size);

/*
 * Close the pipe, wait for the child to end (blocking: kill it first when it
 * must not finish) and free w. *ret_status (may be NULL) gets the wait status.
 * Accepts NULL. 0, or -errno when waitpid failed.
 */
int apply_write_end(struct apply_writer *w, int *ret_status);

#endif
