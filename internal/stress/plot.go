package stress

import (
	"fmt"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writePlots renders plot.png (median wall time against workspaces, one line
// per arm and neighbour count) and fsync_p99.png (fsync p99 against
// workspaces).
func writePlots(dir string, rows []SummaryRow) error {
	if err := linePlot(filepath.Join(dir, "plot.png"), rows, "Median wall time per workspace", "seconds",
		func(r SummaryRow) float64 { return r.MedianWallS }); err != nil {
		return err
	}
	return linePlot(filepath.Join(dir, "fsync_p99.png"), rows, "fsync p99 latency", "milliseconds",
		func(r SummaryRow) float64 { return r.FsyncP99Ms })
}

func linePlot(path string, rows []SummaryRow, title, ylabel string, y func(SummaryRow) float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "workspaces"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	type key struct {
		arm string
		nb  int
	}
	var order []key
	points := map[key]plotter.XYs{}
	for _, r := range rows {
		k := key{r.Arm, r.Neighbours}
		if _, ok := points[k]; !ok {
			order = append(order, k)
		}
		points[k] = append(points[k], plotter.XY{X: float64(r.Workspaces), Y: y(r)})
	}
	var args []any
	for _, k := range order {
		pts := points[k]
		slices.SortFunc(pts, func(a, b plotter.XY) int { return int(a.X - b.X) })
		name := k.arm
		if k.nb > 0 {
			name = fmt.Sprintf("%s +%d neighbours", k.arm, k.nb)
		}
		args = append(args, name, pts)
	}
	if len(args) > 0 {
		if err := plotutil.AddLinePoints(p, args...); err != nil {
			return err
		}
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
