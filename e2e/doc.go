// Package e2e holds the end-to-end tests of the wsfs mount. It has no
// library code: every test builds the wsfs binary once (TestMain), starts
// `wsfs mount` as a real child process over a fresh host in t.TempDir(), and
// drives the mount with real system calls and real tools.
//
// Every test runs on two targets: "native", a plain directory on the host
// filesystem, and "wsfs", a live mount. The native run proves the test
// itself (its model, its comparison) is right; the wsfs run is the check of
// the filesystem. The wsfs target is skipped, with the reason, when the
// process is not root or /dev/fuse is missing; it fails when the binary
// does not build or lacks the init, create and mount commands.
//
// The tests:
//
//   - TestDifferential: a seeded random sequence of system calls applied to
//     the target and to a native directory must give the same results and
//     the same final tree (seed and op index on mismatch; replay with
//     go test ./e2e -run NAME -args -e2e.seed=N).
//   - TestTools*: git, go build, tar/cp -a/diff -r/rm -rf, SQLite in WAL mode
//     with one writer and concurrent readers.
//   - TestKill: a workload runs, the daemon is SIGKILLed at a random moment,
//     the workspace is mounted again and must be a prefix of the workload at
//     or after its last acknowledged fsync.
//   - TestKillConcurrent: the same with three workers at once; a returned
//     fsync bounds every worker's recovered prefix from below.
//   - TestKillCheckerDetects: the kill test's checker rejects a torn
//     fsynced file, a lost create and an entry no op made.
//   - TestPowerCut: the kill workload with HOME/state and HOME/pool on
//     crashfs (internal/crashfs, a FUSE layer that keeps only what was
//     synced); 100 power cuts (WSFS_POWERCUTS=N), the kill test's oracle,
//     creates redone after each cut, every file read back (verified
//     objects). TestPowerCutDetects plants dropped syncs and must see
//     violations.
//   - TestPowerCutUp: `wsfs up` with sidecars, agent processes committing
//     SQLite transactions and `wsfs state sync`, cut 10 times: each agent
//     database passes integrity_check and holds every committed (hence
//     every confirmed) transaction, and so does a restore from its
//     replica. TestPowerCutAfterStateSync is the deterministic regression
//     case of the two bugs it found.
//   - TestRemount: a clean unmount and a new mount give the same tree, byte
//     for byte.
//   - TestACLXattrKeepsMode: what cp -a does with system.posix_acl_access
//     must not leave a file with the wrong mode.
//   - TestMountPreconditions (mount only): exit code 3 and a message for a
//     workspace already served, a mounted, missing or non-empty mount
//     point, an unknown workspace; the serving daemon is unharmed.
//
// TestDifferential and TestKill also run on the mount variants
// --writeback, --passthrough and --drain syncfs (subtests wsfs-writeback,
// wsfs-passthrough, wsfs-syncfs).
//
// Run: go test -race -timeout 30m ./e2e (as root, with /dev/fuse). The
// daemon is built with -race too, and a data race it reports fails the
// test. On a busy 2-core host the package takes ~2.5 min, ~9 min under
// -race (the default 10 min timeout is too tight there); -short runs fewer
// kill rounds, smaller trees and no 5 GiB file (~40 s).
package e2e
