package stress

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"
)

// display shows the progress of the run in progress: one bar per workspace
// on a terminal, plain lines otherwise.
type display interface {
	// runStart begins a run of n workspaces.
	runStart(label string, n int)
	// update reports that workspace ws finished done of total in phase.
	update(ws int, phase string, done, total int)
	// runEnd ends the run labelled label (runStart may not have been
	// called if the run failed during setup); line summarises it.
	runEnd(label, line string)
	// logf prints a line between runs.
	logf(format string, args ...any)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func newDisplay(w io.Writer) display {
	if isTerminal(w) {
		return &barDisplay{w: w}
	}
	return &plainDisplay{w: w}
}

// plainDisplay prints one line per run start, per phase a workspace
// completes (only for the first workspace, to keep logs short) and per run
// end.
type plainDisplay struct {
	w     io.Writer
	mu    sync.Mutex
	label string
}

func (d *plainDisplay) runStart(label string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.label = label
	fmt.Fprintf(d.w, "%s: started %d workspace(s)\n", label, n)
}

func (d *plainDisplay) update(ws int, phase string, done, total int) {
	if ws != 0 || done != total {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.w, "%s: workspace 0 finished %s (%d)\n", d.label, phase, total)
}

func (d *plainDisplay) runEnd(label, line string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.w, "%s: %s\n", label, line)
}

func (d *plainDisplay) logf(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.w, format+"\n", args...)
}

// barDisplay draws a bar per workspace with mpb. A bar's scale is 1000 per
// phase, so it advances evenly through the six phases.
type barDisplay struct {
	w      io.Writer
	mu     sync.Mutex
	label  string
	p      *mpb.Progress
	bars   []*mpb.Bar
	phases []string
}

const barPerPhase = 1000

func (d *barDisplay) runStart(label string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.label = label
	d.p = mpb.New(mpb.WithOutput(d.w), mpb.WithWidth(40))
	d.bars = make([]*mpb.Bar, n)
	d.phases = make([]string, n)
	for i := range n {
		i := i
		d.bars[i] = d.p.AddBar(int64(len(Phases)*barPerPhase),
			mpb.PrependDecorators(
				decor.Name(fmt.Sprintf("%s ws%-2d ", label, i)),
				decor.Any(func(decor.Statistics) string {
					d.mu.Lock()
					defer d.mu.Unlock()
					return fmt.Sprintf("%-9s", d.phases[i])
				}),
			),
			mpb.AppendDecorators(decor.Percentage(), decor.Name(" "), decor.Elapsed(decor.ET_STYLE_GO)),
		)
	}
}

func (d *barDisplay) update(ws int, phase string, done, total int) {
	d.mu.Lock()
	if ws < 0 || ws >= len(d.bars) {
		d.mu.Unlock()
		return
	}
	d.phases[ws] = phase
	bar := d.bars[ws]
	d.mu.Unlock()
	idx := 0
	for i, p := range Phases {
		if p == phase {
			idx = i
		}
	}
	v := int64(idx * barPerPhase)
	if total > 0 {
		v += int64(done * barPerPhase / total)
	}
	bar.SetCurrent(v)
}

func (d *barDisplay) runEnd(label, line string) {
	d.mu.Lock()
	bars, p := d.bars, d.p
	d.bars, d.p = nil, nil
	d.mu.Unlock()
	for _, b := range bars {
		if !b.Completed() {
			b.Abort(false)
		}
	}
	if p != nil {
		p.Wait()
	}
	fmt.Fprintf(d.w, "%s: %s\n", label, line)
}

func (d *barDisplay) logf(format string, args ...any) {
	fmt.Fprintf(d.w, format+"\n", args...)
}
