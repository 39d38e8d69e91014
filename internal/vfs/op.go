package vfs

// Op names a kind of file system operation. MemFS reports the
// durability-relevant ones to its hook (see SetHook); errorfs matches
// injection rules against all of them.
type Op int

// Operation kinds. The values are not persisted anywhere.
const (
	OpCreate         Op = iota + 1 // Create, CreateExcl (a new or truncated file)
	OpOpen                         // Open, OpenReadWrite, OpenDir
	OpRead                         // File.Read, File.ReadAt
	OpWrite                        // File.Write, File.WriteAt
	OpSync                         // File.Sync (files and directories)
	OpSyncData                     // File.SyncData
	OpTruncate                     // File.Truncate
	OpRename                       // FS.Rename
	OpLink                         // FS.Link
	OpRemove                       // FS.Remove, FS.RemoveAll
	OpMkdir                        // FS.MkdirAll
	OpList                         // FS.List
	OpStat                         // FS.Stat, File.Stat
	OpChtimes                      // FS.Chtimes
	OpLock                         // FS.Lock
	OpSyncFS                       // FS.SyncFS
	OpStatfs                       // FS.Statfs
	OpClose                        // File.Close
	OpStartWriteback               // File.StartWriteback
)

var opNames = map[Op]string{
	OpCreate:   "create",
	OpOpen:     "open",
	OpRead:     "read",
	OpWrite:    "write",
	OpSync:     "sync",
	OpSyncData: "syncdata",
	OpTruncate: "truncate",
	OpRename:   "rename",
	OpLink:     "link",
	OpRemove:   "remove",
	OpMkdir:    "mkdir",
	OpList:     "list",
	OpStat:     "stat",
	OpChtimes:  "chtimes",
	OpLock:     "lock",
	OpSyncFS:   "syncfs",
	OpStatfs:   "statfs",
	OpClose:    "close",

	OpStartWriteback: "startwriteback",
}

// String returns the lower-case name of the operation ("syncdata").
func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return "op(?)"
}
