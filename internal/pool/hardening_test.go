package pool

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"wsfs/internal/vfs"
)

// logBuffer is a slog handler target safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func bufLogger() (*slog.Logger, *logBuffer) {
	var lb logBuffer
	return slog.New(slog.NewTextHandler(&lb, nil)), &lb
}

// TestDedupAgainstDamagedObject is hardening issue item 2: a process that
// has not seen an object before deduplicates against it only after
// comparing it with the caller's bytes. A damaged object of the right size
// is replaced from those bytes (ERROR logged), so the content reads back,
// in this process and in a fresh one; and the drain then succeeds.
func TestDedupAgainstDamagedObject(t *testing.T) {
	tests := []struct {
		name   string
		mutate func([]byte) []byte
	}{
		{"flip one byte, same size", func(b []byte) []byte { b[len(b)/3] ^= 0x01; return b }},
		{"zeroed, same size", func(b []byte) []byte { return make([]byte, len(b)) }},
		{"short", func(b []byte) []byte { return b[:len(b)-7] }},
	}
	for _, fc := range fsCases {
		for _, tt := range tests {
			t.Run(fc.name+"/"+tt.name, func(t *testing.T) {
				fsys, dir := fc.new(t)
				data := content(21, 200<<10)
				id, _, err := openPool(t, fsys, dir, Options{}).Put(data)
				if err != nil {
					t.Fatal(err)
				}
				overwrite(t, fsys, filepath.Join(dir, objectsDir, id.String()[:1], id.String()), tt.mutate)

				lg, logs := bufLogger()
				q := openPool(t, fsys, dir, Options{Logger: lg}) // a new daemon
				got, dedup, err := q.Put(data)
				if err != nil || got != id || dedup {
					t.Fatalf("Put over a damaged object: id ok %v, dedup=%v, err=%v; want a repair (dedup=false)", got == id, dedup, err)
				}
				if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), id.String()) {
					t.Errorf("no ERROR line naming the object; log:\n%s", logs)
				}
				if err := q.SyncObjects([]ID{id}, 0); err != nil {
					t.Fatalf("drain after the repair: %v", err)
				}
				if b, err := openPool(t, fsys, dir, Options{}).ReadAll(id); err != nil || !bytes.Equal(b, data) {
					t.Fatalf("fresh process reads %d bytes, %v", len(b), err)
				}
				fsck(t, fsys, dir, 0)
			})
		}
	}
}

// TestDedupVerifiesOncePerProcess: a healthy dedup hit reads the object
// once per process (then trusts its verification), and reports dedup.
func TestDedupVerifiesOncePerProcess(t *testing.T) {
	base, dir := fsCases[1].new(t)
	data := content(22, 100_000)
	if _, _, err := openPool(t, base, dir, Options{}).Put(data); err != nil {
		t.Fatal(err)
	}
	var c opCounter
	q := openPool(t, c.wrap(base), dir, Options{})
	for i := range 3 {
		c.reset()
		_, dedup, err := q.Put(data)
		if err != nil || !dedup {
			t.Fatalf("Put %d: dedup=%v err=%v", i, dedup, err)
		}
		want := int64(0)
		if i == 0 {
			want = 1
		}
		if got := c.get(vfs.OpOpen); got != want {
			t.Errorf("Put %d opened %d files, want %d", i, got, want)
		}
	}
}

// TestDrainRefusesUnverifiedDamage: the drain hashes an object this
// process has not verified, and a damaged one fails the drain (never
// acknowledged) with a *CorruptObjectError; the next Put of the content
// repairs it, as the error's advice says.
func TestDrainRefusesUnverifiedDamage(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, dir := fc.new(t)
			data := content(23, 80_000)
			id, _, err := openPool(t, fsys, dir, Options{}).Put(data)
			if err != nil {
				t.Fatal(err)
			}
			overwrite(t, fsys, filepath.Join(dir, objectsDir, id.String()[:1], id.String()), func(b []byte) []byte { b[0] ^= 0xff; return b })
			q := openPool(t, fsys, dir, Options{})
			err = q.SyncObjects([]ID{id}, 0)
			var se *SyncError
			var ce *CorruptObjectError
			if !errors.As(err, &se) || !errors.As(err, &ce) || len(se.Republish) != 1 {
				t.Fatalf("drain of a damaged, unverified object: %v; want a *SyncError with a *CorruptObjectError", err)
			}
			if !strings.Contains(ce.Error(), "Put the original content again") {
				t.Errorf("advice missing: %v", ce)
			}
			if _, dedup, err := q.Put(data); err != nil || dedup {
				t.Fatalf("Put to repair: dedup=%v err=%v", dedup, err)
			}
			if err := q.SyncObjects([]ID{id}, 0); err != nil {
				t.Fatalf("drain after repair: %v", err)
			}
			fsck(t, fsys, dir, 0)
		})
	}
}

// TestDrainReprotectsOldObjects: an object whose mtime is older than a
// quarter of the minimum grace gets a fresh mtime from the drain, so a
// group retried for a long time (full log) keeps its objects out of GC.
func TestDrainReprotectsOldObjects(t *testing.T) {
	fsys, dir := fsCases[1].new(t)
	start := time.Now()
	clock := &fakeClock{t: start}
	p := openPool(t, fsys, dir, Options{Clock: clock.now})
	id, _, err := p.Put(content(24, 70_000))
	if err != nil {
		t.Fatal(err)
	}
	old := start.Add(-2 * time.Hour)
	if err := fsys.Chtimes(p.Path(id), old, old); err != nil {
		t.Fatal(err)
	}
	clock.t = start.Add(time.Minute)
	if err := p.SyncObjects([]ID{id}, 0); err != nil {
		t.Fatal(err)
	}
	fi, err := fsys.Stat(p.Path(id))
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(clock.t) {
		t.Errorf("mtime after the drain = %v, want %v (re-protected)", fi.ModTime(), clock.t)
	}
	st, err := p.GC(func(ID) bool { return false }, time.Hour)
	if err != nil || st.Removed != 0 {
		t.Fatalf("GC after the drain: %+v, %v; want the object kept", st, err)
	}
}

// TestProtectAfterRemoval: a dedup hit that finds the object gone (GC
// removed it) publishes its own copy; Protect reports it missing.
func TestProtectAfterRemoval(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, dir := fc.new(t)
			start := time.Now()
			clock := &fakeClock{t: start}
			p := openPool(t, fsys, dir, Options{Clock: clock.now})
			data := content(25, 90_000)
			id, _, err := p.Put(data)
			if err != nil {
				t.Fatal(err)
			}
			clock.t = start.Add(2 * time.Hour)
			gc := openPool(t, fsys, dir, Options{Clock: clock.now})
			if st, err := gc.GC(func(ID) bool { return false }, time.Hour); err != nil || st.Removed != 1 {
				t.Fatalf("GC: %+v %v", st, err)
			}
			if err := p.Protect(id); !errors.As(err, new(*MissingObjectError)) {
				t.Fatalf("Protect of a removed object: %v; want *MissingObjectError", err)
			}
			if _, dedup, err := p.Put(data); err != nil || dedup {
				t.Fatalf("Put after removal: dedup=%v err=%v; want a new object", dedup, err)
			}
			if err := p.SyncObjects([]ID{id}, 0); err != nil {
				t.Fatal(err)
			}
			fsck(t, fsys, dir, 0)
		})
	}
}

// TestGCProtectDuringMoveAside: a Protect that sets the time while GC has
// the object in its graveyard (Chtimes on the old name resolved before the
// rename) is caught by the re-check, and a Protect after the rename finds
// the name gone and makes Put publish a copy. Either way the content stays.
func TestGCProtectDuringMoveAside(t *testing.T) {
	tests := []struct {
		name string
		// race runs after GC renamed the object into its graveyard.
		race     func(t *testing.T, base vfs.FS, p *Pool, id ID, data []byte, now time.Time)
		wantKept int
		// wantRemoved: the old inode goes when the racing Put has
		// published its own copy under the name.
		wantRemoved int
	}{
		{"time set on the moved inode", func(t *testing.T, base vfs.FS, p *Pool, id ID, data []byte, now time.Time) {
			if err := base.Chtimes(p.graveName(id), now, now); err != nil {
				t.Error(err)
			}
		}, 1, 0},
		{"Put after the move", func(t *testing.T, base vfs.FS, p *Pool, id ID, data []byte, now time.Time) {
			q, err := Open(base, p.Dir(), Options{Clock: func() time.Time { return now }})
			if err != nil {
				t.Error(err)
				return
			}
			if _, dedup, err := q.Put(data); err != nil || dedup {
				t.Errorf("Put while the object is in the graveyard: dedup=%v err=%v; want a new copy", dedup, err)
			}
		}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, dir := fsCases[1].new(t)
			start := time.Now()
			clock := &fakeClock{t: start}
			data := content(26, 75_000)
			var p *Pool
			var id ID
			raced := 0
			fsys := errorfsAfterRename(base, func() {
				raced++
				tt.race(t, base, p, id, data, start.Add(3*time.Hour))
			})
			p = openPool(t, fsys, dir, Options{Clock: clock.now})
			var err error
			if id, _, err = p.Put(data); err != nil {
				t.Fatal(err)
			}
			clock.t = start.Add(2 * time.Hour)
			st, err := p.GC(func(ID) bool { return false }, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if raced != 1 || st.Removed != tt.wantRemoved || st.Kept != tt.wantKept {
				t.Errorf("raced %d, stats %+v; want 1 race, %d removed, %d kept", raced, st, tt.wantRemoved, tt.wantKept)
			}
			if b, err := openPool(t, base, dir, Options{}).ReadAll(id); err != nil || !bytes.Equal(b, data) {
				t.Fatalf("object after the race: %d bytes, %v", len(b), err)
			}
			fsck(t, base, dir, 0)
		})
	}
}

// errorfsAfterRename calls fn once, right after the first rename into the
// graveyard has happened.
func errorfsAfterRename(base vfs.FS, fn func()) vfs.FS {
	return &afterRename{FS: base, fn: fn}
}

type afterRename struct {
	vfs.FS
	fn   func()
	done bool
}

func (a *afterRename) Rename(from, to string) error {
	err := a.FS.Rename(from, to)
	if err == nil && !a.done && strings.HasPrefix(filepath.Base(to), gravePrefix) {
		a.done = true
		a.fn()
	}
	return err
}

// TestGCRecoversGraves: a pass interrupted after moving objects aside
// leaves gc-<id>; the next pass puts back one protected since, removes an
// old one, and counts both.
func TestGCRecoversGraves(t *testing.T) {
	fsys, dir := fsCases[1].new(t)
	start := time.Now()
	clock := &fakeClock{t: start}
	p := openPool(t, fsys, dir, Options{Clock: clock.now})
	keep, gone := content(27, 66_000), content(28, 67_000)
	kid, _, _ := p.Put(keep)
	gid, _, _ := p.Put(gone)
	for _, id := range []ID{kid, gid} {
		if err := fsys.Rename(p.Path(id), p.graveName(id)); err != nil {
			t.Fatal(err)
		}
	}
	clock.t = start.Add(2 * time.Hour)
	if err := fsys.Chtimes(p.graveName(kid), clock.t, clock.t); err != nil { // protected after the crash
		t.Fatal(err)
	}
	st, err := p.GC(func(ID) bool { return false }, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if st.Restored != 1 || st.TempsRemoved != 1 || st.TempBytes != int64(len(gone)) {
		t.Errorf("stats %+v; want 1 restored, 1 grave removed of %d bytes", st, len(gone))
	}
	if b, err := p.ReadAll(kid); err != nil || !bytes.Equal(b, keep) {
		t.Errorf("restored object: %d bytes, %v", len(b), err)
	}
	fsck(t, fsys, dir, 0)
}

// TestGCLockNamesHolder: a second pass while one runs is refused with
// ErrGCRunning, naming the lock, not a workspace.
func TestGCLockNamesHolder(t *testing.T) {
	for _, fc := range fsCases {
		t.Run(fc.name, func(t *testing.T) {
			fsys, dir := fc.new(t)
			p := openPool(t, fsys, dir, Options{})
			l, err := fsys.Lock(filepath.Join(dir, gcLockName))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			_, err = p.GC(func(ID) bool { return false }, time.Hour)
			if !errors.Is(err, ErrGCRunning) || !strings.Contains(err.Error(), "gc.lock") {
				t.Fatalf("GC while another holds the lock: %v; want ErrGCRunning naming gc.lock", err)
			}
		})
	}
}

// TestGCCutoffFromMarkStart: the cutoff is MarkStart-Grace, so an object
// protected after the marking began but before the sweep reads it is
// kept even if the sweep runs much later.
func TestGCCutoffFromMarkStart(t *testing.T) {
	fsys, dir := fsCases[1].new(t)
	start := time.Now()
	clock := &fakeClock{t: start}
	p := openPool(t, fsys, dir, Options{Clock: clock.now})
	id, _, _ := p.Put(content(29, 65_600))
	mark := start.Add(30 * time.Minute) // protected 30 min before the mark
	clock.t = start.Add(5 * time.Hour)  // a long mark phase
	st, err := p.Collect(func(ID) bool { return false }, GCOptions{Grace: time.Hour, MarkStart: mark})
	if err != nil || st.Removed != 0 {
		t.Fatalf("Collect: %+v %v; want the object kept", st, err)
	}
	if _, err := fsys.Stat(p.Path(id)); err != nil {
		t.Fatal(err)
	}
}

// TestTestMinGrace: the override lowers the minimum only when set, and
// shortens the trust in this process's own syncs with it.
func TestTestMinGrace(t *testing.T) {
	tests := []struct {
		env       string
		wantMin   time.Duration
		wantTrust time.Duration
	}{
		{"", MinGrace, durableWindow},
		{"6s", 6 * time.Second, time.Second},
		{"garbage", MinGrace, durableWindow},
		{"5h", MinGrace, durableWindow}, // never raises it, never above MinGrace
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv(TestMinGraceEnv, tt.env)
			fsys, dir := fsCases[1].new(t)
			p := openPool(t, fsys, dir, Options{})
			if p.minGrace != tt.wantMin || p.trust != tt.wantTrust || EffectiveMinGrace() != tt.wantMin {
				t.Errorf("min %v trust %v (effective %v); want %v %v", p.minGrace, p.trust, EffectiveMinGrace(), tt.wantMin, tt.wantTrust)
			}
			if _, err := p.GC(func(ID) bool { return false }, tt.wantMin-time.Millisecond); err == nil {
				t.Errorf("GC below the minimum %v accepted", tt.wantMin)
			}
		})
	}
}
