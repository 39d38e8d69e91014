// Package pool is the content pool shared by every wsfs daemon on a host:
// immutable objects named by the hash of their content (see Sum), stored as
//
//	POOL/format                                        layout version ("wsfs-pool-layout 2")
//	POOL/objects/<first hex digit>/<64 hex digits>     published objects
//	POOL/tmp/<kind>-<random>                           Put and repair temps, GC graveyard
//
// Sixteen fan-out directories, not 256: the drain syncs every fan-out
// directory holding an object of the group, each sync a separate write and
// cache flush, so a group syncs at most 16 (docs/benchmarks.md, "Pool
// drain: directory syncs", has the measurement). An ext4 directory's hash tree (two index levels, more
// with large_dir) holds millions of entries, so 16 directories serve pools
// of tens of millions of objects; GC lists one directory at a time. Open writes POOL/format when it
// creates a pool and refuses a pool of another layout (there is no
// migration).
//
// Many daemon processes use one pool directory at the same time. They share
// nothing but the file system: no lock is held to publish, read or protect
// an object. Everything below holds for concurrent publishers in other
// processes.
//
// # Publication
//
// Put writes the content to a fresh temp in POOL/tmp (same file system as
// objects/) and then hard-links the temp to the object's name, failing if the
// name exists, and removes the temp. Link, not rename, on purpose: rename
// would replace an existing object's inode with an unsynced one. If process A
// has synced the object and committed a reference to it, and process B then
// renamed its own identical, unsynced copy over it, a power loss could leave
// the name pointing at B's unsynced inode (empty or garbage) although A's
// commit depends on it. With link-if-absent the first published inode stays
// in place for as long as the object exists, and a reader's open file keeps
// meaning the same inode. The only code that replaces an object's inode is
// repair (Republish, and Put healing a damaged object), and it syncs the new
// inode before renaming it into place, so whichever directory entry survives
// a crash names durable bytes.
//
// Publication does not sync anything, but for objects of 64 KiB or more it
// starts writeback of the new content (vfs.File.StartWriteback:
// sync_file_range SYNC_FILE_RANGE_WRITE on the OS), so that by the time the
// drain fdatasyncs the object its pages are written or in flight: the write
// moves from the drain, which every fsync waiter of the group waits for, to
// publication, which runs ahead of it. That is a hint, never proof: only the drain's fdatasync makes the data
// durable, and a writeback error still reaches it (the hint does not wait,
// so it does not consume the error). A failure to start writeback fails
// the publication. Fan-out directories are created on demand with MkdirAll
// and never removed (not even by GC).
//
// # Durability: the drain
//
// A published object is visible to every process at once, but it is durable
// only after its data has been synced (SyncData), its fan-out directory has
// been synced (so the entry survives), and objects/ has been synced after the
// fan-out directory was created. SyncObjects does exactly that for a set of
// objects; the committer calls it for every group before the group's log
// record, and the group's set must hold both the objects the group published
// and the objects it deduplicated against: a dedup hit may point at an object
// that another process published a moment ago and has not synced yet (or
// never will, if that process dies). Syncing it again costs little if it is
// already clean.
//
// SyncObjects skips objects this process itself made durable within the
// last durableWindow (ten minutes) of their mtime; GC cannot remove and
// someone re-publish an object that quickly, so the skipped object is the
// inode that was synced.
//
// Because the pool cannot know whether another process ever synced
// objects/ after creating a fan-out directory, each process syncs objects/
// once for every fan-out directory it has not yet seen durable (at Open for
// those that exist then, in the drain for later ones).
//
// # Garbage collection and protection
//
// GC (Collect) removes an object only if the caller says it is
// unreferenced and its mtime is older than the grace period before the
// caller began marking (GCOptions.MarkStart). A dedup hit bumps the
// object's mtime (Protect) before Put returns, so an object that a group is
// about to reference cannot be collected during the group's commit window,
// as long as the grace period is far longer than a commit window (GC
// refuses anything shorter than MinGrace, one hour; TestMinGraceEnv lowers
// it for tests). The drain sets a fresh mtime on any object of its group
// older than a quarter of the minimum grace, so a group retried for a long
// time (a full log filesystem) keeps its objects.
//
// GC renames a candidate to POOL/tmp/gc-<id> and reads its mtime again
// there; Protect sets the mtime and then checks that the name still
// resolves. Either the time was set before the rename (GC sees it and
// links the object back, syncing its directory) or Protect reports the
// object missing and Put publishes its own copy: a dedup hit and a removal
// never both succeed. The next pass finishes what an interrupted one left
// in gc-<id>. The same grace period applies to temps in POOL/tmp: a temp
// lives only for the length of one Put or repair, so an older one was left
// by a crashed process.
//
// # Dedup verification
//
// A dedup hit compares the existing object with the caller's bytes unless
// this process has verified it since it last changed (every object this
// process published or compared counts); a damaged one (wrong bytes or
// size) is replaced by a synced copy of the caller's bytes, renamed over it,
// and an ERROR names it. SyncObjects hashes any object of its set that this
// process has not verified, so a group never commits over bytes nobody
// checked.
//
// # Reads
//
// Open and ReadAll verify that the bytes hash to the object's ID; a mismatch
// is a *CorruptObjectError, never wrong bytes. Open verifies an object once
// per process (and again if its size changed); ReadAll verifies every time.
// A corrupt object is remembered, and the next Put of its content replaces
// it durably.
//
// # Fetching (lazy pull)
//
// A pool opened with a Fetcher (Options.Fetcher: the remote tier a
// workspace was pulled from) treats a missing object as not yet fetched:
// Open, ReadAll, Protect and SyncObjects fetch it, hash it, and publish it
// with Put (so the usual publication rules hold) before going on; Open and
// ReadAll also replace a corrupt local object from it. Bytes that do not
// hash to the name are a *FetchError and are never published. Concurrent
// fetches of one object share one call. A fetch is not synced; whoever
// needs it durable syncs it (the drain, or the prefetch's SyncObjects),
// and until then the Fetcher stays the object's source (fetch.go).
//
// # Failed syncs (fsyncgate)
//
// A failed SyncData means the kernel may have dropped the dirty pages, so a
// later SyncData that succeeds proves nothing. SyncObjects marks nothing
// durable when any step fails and returns a *SyncError listing the objects
// to Republish: Republish reads the object back, verifies it, writes a new
// copy, syncs it, renames it over the object and syncs the directory.
//
// Known limit: a sync failure seen by one process is not seen by another
// process that syncs the same object afterwards (Linux reports a writeback
// error to the file descriptions open when it happened, and to a later one
// only if nobody has seen it yet). Until the failing process has
// republished the object, another process may believe it durable.
package pool
