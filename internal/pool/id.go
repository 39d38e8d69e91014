package pool

import "wsfs/internal/objid"

// ID names a pool object. It is objid.ID, the one content-ID type (hashing
// and parsing live there); the pool's own code calls it ID.
type ID = objid.ID
