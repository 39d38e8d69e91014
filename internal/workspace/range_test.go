package workspace

import (
	"reflect"
	"syscall"
	"testing"

	"wsfs/internal/manifest"
	"wsfs/internal/namespace"
)

// TestRangeRecords: small appends with fsync to a large pooled file are
// logged as range records (no pool object put), read back correctly from
// memory, after a reopen that did not fold them (published content with
// ranges, also from a checkpoint), and after the fold on the last close.
func TestRangeRecords(t *testing.T) {
	envs(t, func(t *testing.T, e *env) {
		e.opts.ChunkSize = 4096
		e.opts.CheckpointBytes = 2 << 10 // checkpoints carry the ranges
		w := e.open()
		model := pattern(5*4096+100, 1)
		f := writeFile(t, w, RootIno, "wal", model)
		h := H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
		before := w.Stats()
		for i := 0; i < 40; i++ {
			rec := pattern(100+i, uint64(i))
			_, err := h.WriteAt(rec, int64(len(model)))
			noErr(t, err)
			model = append(model, rec...)
			// A header rewrite in the first chunk, as SQLite does.
			_, err = h.WriteAt([]byte{byte(i)}, 24)
			noErr(t, err)
			model[24] = byte(i)
			noErr(t, h.Fsync(false))
		}
		st := w.Stats()
		if put := st.BytesPooled - before.BytesPooled; put != 0 {
			t.Errorf("40 small appends with fsync put %d bytes to the pool, want 0 (range records)", put)
		}
		if got := st.RangeRecords - before.RangeRecords; got != 40 {
			t.Errorf("range records: %d, want 40", got)
		}
		eq(t, readAll(t, w, f.Ino), model, "read through the open file")
		if a := A(t)(w.GetAttr(f.Ino)); a.Size != uint64(len(model)) {
			t.Fatalf("size %d, want %d", a.Size, len(model))
		}
		// Close the workspace without closing the file: the ranges stay in
		// the log (and checkpoint) unfolded.
		noErr(t, w.Close())
		w = e.open()
		n := w.tree.Get(namespace.Ino(f.Ino))
		if n.Content.Ranges == nil {
			t.Fatalf("reopened content has no ranges: %+v", n.Content)
		}
		if w.Stats().CheckpointGroup == 0 {
			t.Errorf("no checkpoint was written: the test does not cover ranges in checkpoints")
		}
		eq(t, readAll(t, w, f.Ino), model, "published content with ranges")
		// A hard link and a rename keep the content; a write through the
		// link, then the last close folds everything into chunks.
		_, err := w.Link(f.Ino, RootIno, "link")
		noErr(t, err)
		noErr(t, w.Rename(RootIno, "wal", RootIno, "wal2", 0))
		h = H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
		_, err = h.WriteAt([]byte("tail"), int64(len(model)))
		noErr(t, err)
		model = append(model, "tail"...)
		noErr(t, h.Fsync(false))
		eq(t, readAll(t, w, f.Ino), model, "after a write over ranged content")
		noErr(t, h.Release())
		if n.Content.Ranges != nil {
			t.Errorf("the last close left %d ranges unfolded", len(n.Content.Ranges))
		}
		eq(t, readAll(t, w, f.Ino), model, "folded")
		noErr(t, w.Close())
		w = e.open()
		defer w.Close()
		eq(t, readAll(t, w, f.Ino), model, "folded, reopened")
	})
}

// TestRangeFoldThreshold: a file kept open through many small fsynced
// writes gets its ranges folded before they exceed the limits, and a
// truncate publishes a SetContent.
func TestRangeFoldThreshold(t *testing.T) {
	e := memEnv(t)
	e.opts.ChunkSize = 4096
	w := e.open()
	defer w.Close()
	model := pattern(3*4096, 2)
	f := writeFile(t, w, RootIno, "f", model)
	h := H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
	defer h.Release()
	for i := 0; i < foldRanges+10; i++ {
		_, err := h.WriteAt([]byte{byte(i), 1, 2}, int64(len(model)))
		noErr(t, err)
		model = append(model, byte(i), 1, 2)
		noErr(t, h.Fsync(false))
		if k := len(w.tree.Get(namespace.Ino(f.Ino)).Content.Ranges); k > foldRanges {
			t.Fatalf("step %d: %d pending ranges, more than %d", i, k, foldRanges)
		}
	}
	if w.Stats().RangeFolds == 0 {
		t.Errorf("no fold after %d range flushes", foldRanges+10)
	}
	eq(t, readAll(t, w, f.Ino), model, "after folds")
	_, err := w.SetAttr(f.Ino, SetAttrIn{Size: ptr(uint64(5000))})
	noErr(t, err)
	model = model[:5000]
	if w.tree.Get(namespace.Ino(f.Ino)).Content.Ranges != nil {
		t.Errorf("truncate left ranges")
	}
	eq(t, readAll(t, w, f.Ino), model, "after truncate")
}

// TestRangeSnapshot: a still tree whose open file has pending ranges
// (flushed, clean) is accepted by StillTree, and its manifest, like the
// durable shadow's, keeps the ranges: the tree loaded back has the same
// content.
func TestRangeSnapshot(t *testing.T) {
	e := memEnv(t)
	e.opts.ChunkSize = 4096
	w := e.open()
	defer w.Close()
	model := pattern(3*4096+10, 4)
	f := writeFile(t, w, RootIno, "wal", model)
	h := H(t)(w.OpenFile(f.Ino, syscall.O_RDWR))
	defer h.Release()
	_, err := h.WriteAt([]byte("frame"), int64(len(model)))
	noErr(t, err)
	noErr(t, h.Fsync(false))
	ino := namespace.Ino(f.Ino)
	for _, tc := range []struct {
		name string
		tree func(fn func(t *namespace.Tree, group uint64) error) error
	}{{"still", w.StillTree}, {"durable", w.DurableTree}} {
		err := tc.tree(func(tr *namespace.Tree, _ uint64) error {
			want := tr.Get(ino).Content
			if want.Ranges == nil {
				t.Fatalf("%s: no ranges in the tree", tc.name)
			}
			st := &manifest.PoolStore{Pool: w.pool}
			root, _, err := manifest.Build(tr, st)
			if err != nil {
				return err
			}
			back, _, err := manifest.LoadTree(st, root)
			if err != nil {
				return err
			}
			if got := back.Get(ino).Content; !reflect.DeepEqual(got, want) {
				t.Errorf("%s: manifest round trip: content %+v, want %+v", tc.name, got, want)
			}
			return nil
		})
		noErr(t, err)
	}
}
