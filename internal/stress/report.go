package stress

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// SummaryRow is one arm × workspace count × neighbour count, over all
// repeats. Its JSON field names are a stable interface for scripts: add
// fields, never rename or remove them.
type SummaryRow struct {
	Arm        string `json:"arm"`
	Workspaces int    `json:"workspaces"`
	Neighbours int    `json:"neighbours"`
	Runs       int    `json:"runs"`

	MedianWallS float64 `json:"median_wall_s"` // median of every workspace's wall time over all repeats
	MaxWallS    float64 `json:"max_wall_s"`

	WriteP50Ms float64 `json:"write_p50_ms"`
	WriteP95Ms float64 `json:"write_p95_ms"`
	WriteP99Ms float64 `json:"write_p99_ms"`
	ReadP50Ms  float64 `json:"read_p50_ms"`
	ReadP95Ms  float64 `json:"read_p95_ms"`
	ReadP99Ms  float64 `json:"read_p99_ms"`
	FsyncP50Ms float64 `json:"fsync_p50_ms"`
	FsyncP95Ms float64 `json:"fsync_p95_ms"`
	FsyncP99Ms float64 `json:"fsync_p99_ms"`
	C2DP50Ms   float64 `json:"close_to_durable_p50_ms"`
	C2DP95Ms   float64 `json:"close_to_durable_p95_ms"`
	C2DP99Ms   float64 `json:"close_to_durable_p99_ms"`

	AggWriteMBs   float64 `json:"agg_write_mb_s"` // all agents' bytes written / slowest agent's wall, mean over repeats
	PerWSWriteMBs float64 `json:"ws_write_mb_s"`  // median over workspaces of bytes written / own wall
	PerWSReadMBs  float64 `json:"ws_read_mb_s"`   // median over workspaces of bytes read / own wall
	BytesWritten  int64   `json:"bytes_written"`  // per repeat, all workspaces
	Fsyncs        int     `json:"fsyncs_per_ws"`  // per workspace and repeat (the first workspace of the first repeat)
	PeakDirtyMB   float64 `json:"peak_dirty_mb"`  // max over repeats
	MeanDirtyMB   float64 `json:"mean_dirty_mb"`  // mean over repeats
	PeakWritebkMB float64 `json:"peak_writeback_mb"`
	MeanUtilPct   float64 `json:"mean_util_pct"`
	PeakUtilPct   float64 `json:"peak_util_pct"`
	MeanAwaitMs   float64 `json:"mean_await_ms"`
	PeakAwaitMs   float64 `json:"peak_await_ms"`
	MeanDiskWMBs  float64 `json:"mean_disk_write_mb_s"`
	PeakDiskWMBs  float64 `json:"peak_disk_write_mb_s"`
	PeakLoad1     float64 `json:"peak_load1"`
	MeanBusyCores float64 `json:"mean_busy_cores"`
	PeakBusyCores float64 `json:"peak_busy_cores"`

	// Replicated is true when every run of the row replicated each agent
	// state database with a sidecar (the wsfs arms; the native and loopback
	// arms have the database but no replication). ReplicaVerified is true
	// only when, in every run, every replica was restored and equalled the
	// original progress table row for row; false for unreplicated rows.
	// ReplicaSync* is the final sync-and-wait latency (agentstate
	// RequestSync: upload every committed transaction, wait for the
	// replica's acknowledgement) over all workspaces and repeats.
	Replicated       bool    `json:"replicated"`
	ReplicaVerified  bool    `json:"replica_verified"`
	ReplicaSyncP50Ms float64 `json:"replica_sync_p50_ms"`
	ReplicaSyncMaxMs float64 `json:"replica_sync_max_ms"`

	// Verified is true only when every run of the row finished, every agent
	// verified every byte and its final tree, no daemon failed, and (where
	// replicated) every replica verified.
	Verified bool     `json:"verified"`
	Errors   []string `json:"errors,omitempty"`
}

// Summarize groups runs by arm, workspaces and neighbours (in first-seen
// order) and computes each group's figures.
func Summarize(runs []*RunResult) []SummaryRow {
	type key struct {
		arm    string
		ws, nb int
	}
	var order []key
	groups := map[key][]*RunResult{}
	for _, r := range runs {
		k := key{r.Arm, r.Workspaces, r.Neighbours}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var rows []SummaryRow
	for _, k := range order {
		rows = append(rows, summarizeGroup(k.arm, k.ws, k.nb, groups[k]))
	}
	return rows
}

func summarizeGroup(arm string, ws, nb int, runs []*RunResult) SummaryRow {
	row := SummaryRow{Arm: arm, Workspaces: ws, Neighbours: nb, Runs: len(runs), Verified: true,
		Replicated: len(runs) > 0, ReplicaVerified: len(runs) > 0}
	var walls, wsW, wsR []float64
	var syncs []int64
	samples := map[string][]int64{}
	for _, r := range runs {
		if r.Failed() {
			row.Verified = false
		}
		row.Replicated = row.Replicated && r.Replicated
		row.ReplicaVerified = row.ReplicaVerified && r.Replicated && r.ReplicaVerified
		syncs = append(syncs, r.ReplicaSyncNs...)
		row.Errors = append(row.Errors, r.Errors...)
		var bytes int64
		slowest := 0.0
		for _, a := range r.Agents {
			w := float64(a.WallNs) / 1e9
			walls = append(walls, w)
			slowest = max(slowest, w)
			bytes += a.BytesWritten
			if w > 0 {
				wsW = append(wsW, float64(a.BytesWritten)/1e6/w)
				wsR = append(wsR, float64(a.BytesRead)/1e6/w)
			}
			for k, s := range a.Samples {
				samples[k] = append(samples[k], s...)
			}
		}
		if row.Fsyncs == 0 && len(r.Agents) > 0 {
			row.Fsyncs = r.Agents[0].Fsyncs
		}
		row.BytesWritten = bytes
		if slowest > 0 {
			row.AggWriteMBs += float64(bytes) / 1e6 / slowest / float64(len(runs))
		}
		h := r.Host
		n := float64(len(runs))
		row.PeakDirtyMB = max(row.PeakDirtyMB, h.PeakDirtyMB)
		row.MeanDirtyMB += h.MeanDirtyMB / n
		row.PeakWritebkMB = max(row.PeakWritebkMB, h.PeakWritebackMB)
		row.MeanUtilPct += h.MeanUtilPct / n
		row.PeakUtilPct = max(row.PeakUtilPct, h.PeakUtilPct)
		row.MeanAwaitMs += h.MeanAwaitMs / n
		row.PeakAwaitMs = max(row.PeakAwaitMs, h.PeakAwaitMs)
		row.MeanDiskWMBs += h.MeanWriteMBs / n
		row.PeakDiskWMBs = max(row.PeakDiskWMBs, h.PeakWriteMBs)
		row.PeakLoad1 = max(row.PeakLoad1, h.PeakLoad1)
		row.MeanBusyCores += h.MeanBusyCores / n
		row.PeakBusyCores = max(row.PeakBusyCores, h.PeakBusyCores)
	}
	row.MedianWallS = Median(walls)
	for _, w := range walls {
		row.MaxWallS = max(row.MaxWallS, w)
	}
	row.PerWSWriteMBs = Median(wsW)
	row.PerWSReadMBs = Median(wsR)
	w := SummarizeLatency(samples[OpWrite])
	row.WriteP50Ms, row.WriteP95Ms, row.WriteP99Ms = w.P50, w.P95, w.P99
	rd := SummarizeLatency(samples[OpRead])
	row.ReadP50Ms, row.ReadP95Ms, row.ReadP99Ms = rd.P50, rd.P95, rd.P99
	f := SummarizeLatency(samples[OpFsync])
	row.FsyncP50Ms, row.FsyncP95Ms, row.FsyncP99Ms = f.P50, f.P95, f.P99
	c := SummarizeLatency(samples[OpCloseToDurable])
	row.C2DP50Ms, row.C2DP95Ms, row.C2DP99Ms = c.P50, c.P95, c.P99
	rs := SummarizeLatency(syncs)
	row.ReplicaSyncP50Ms, row.ReplicaSyncMaxMs = rs.P50, rs.Max
	return row
}

// Target is one of the project's performance targets (docs/benchmarks.md)
// evaluated on this run's rows.
type Target struct {
	Name   string  `json:"name"`
	Detail string  `json:"detail"` // the numbers behind Value
	Value  float64 `json:"value"`  // the measured ratio
	Limit  float64 `json:"limit"`  // met when Value <= Limit
	Status string  `json:"status"` // met, missed, or not evaluated
}

// Target statuses.
const (
	TargetMet          = "met"
	TargetMissed       = "missed"
	TargetNotEvaluated = "not evaluated"
)

func judge(name string, value, limit float64, detail string) Target {
	st := TargetMet
	if value > limit {
		st = TargetMissed
	}
	return Target{Name: name, Value: value, Limit: limit, Detail: detail, Status: st}
}

func notEvaluated(name, why string) Target {
	return Target{Name: name, Status: TargetNotEvaluated, Detail: why}
}

// EvaluateTargets checks the project's targets against rows from one run. A
// target whose arms or workspace counts are missing is "not evaluated" with
// the reason; one computed from a failed (unverified) row is evaluated but
// says so. A slowdown s is the ratio of median wall times with and without
// neighbours; "the slowdown of wsfs at most half the slowdown of
// wsfs-syncfs" is read as the extra time: s_wsfs - 1 <= 0.5 * (s_syncfs - 1).
// (The plain ratio s_wsfs <= 0.5 * s_syncfs would demand that wsfs get
// faster with neighbours whenever syncfs slows by less than 2x.)
func EvaluateTargets(rows []SummaryRow) []Target {
	get := func(arm string, ws, nb int) *SummaryRow {
		for i := range rows {
			if r := &rows[i]; r.Arm == arm && r.Workspaces == ws && r.Neighbours == nb {
				return r
			}
		}
		return nil
	}
	var counts, nbs []int
	for _, r := range rows {
		if !slices.Contains(counts, r.Workspaces) {
			counts = append(counts, r.Workspaces)
		}
		if r.Neighbours > 0 && !slices.Contains(nbs, r.Neighbours) {
			nbs = append(nbs, r.Neighbours)
		}
	}
	slices.Sort(counts)
	slices.Sort(nbs)
	note := func(rs ...*SummaryRow) string {
		for _, r := range rs {
			if !r.Verified {
				return " (from a run that FAILED verification)"
			}
		}
		return ""
	}
	var out []Target
	if len(counts) == 0 {
		return out
	}
	for _, n := range counts {
		name := fmt.Sprintf("wsfs <= 0.5x native-fsync median wall, N=%d", n)
		w, nf := get(ArmWsfs, n, 0), get(ArmNativeFsync, n, 0)
		if w == nil || nf == nil || nf.MedianWallS == 0 {
			out = append(out, notEvaluated(name, "needs the wsfs and native-fsync arms at this N without neighbours"))
		} else {
			out = append(out, judge(name, w.MedianWallS/nf.MedianWallS, 0.5,
				fmt.Sprintf("wsfs %.2fs / native-fsync %.2fs%s", w.MedianWallS, nf.MedianWallS, note(w, nf))))
		}
	}
	for _, n := range counts {
		name := fmt.Sprintf("wsfs <= 1.5x loopback median wall, N=%d", n)
		w, lb := get(ArmWsfs, n, 0), get(ArmLoopback, n, 0)
		if w == nil || lb == nil || lb.MedianWallS == 0 {
			out = append(out, notEvaluated(name, "needs the wsfs and loopback arms at this N without neighbours"))
		} else {
			out = append(out, judge(name, w.MedianWallS/lb.MedianWallS, 1.5,
				fmt.Sprintf("wsfs %.2fs / loopback %.2fs%s", w.MedianWallS, lb.MedianWallS, note(w, lb))))
		}
	}
	base := counts[0]
	for _, n := range counts[1:] {
		name := fmt.Sprintf("degradation wsfs(%d)/wsfs(%d) <= native-fsync(%d)/native-fsync(%d)", n, base, n, base)
		w1, wn, f1, fn := get(ArmWsfs, base, 0), get(ArmWsfs, n, 0), get(ArmNativeFsync, base, 0), get(ArmNativeFsync, n, 0)
		if w1 == nil || wn == nil || f1 == nil || fn == nil || w1.MedianWallS == 0 || f1.MedianWallS == 0 {
			out = append(out, notEvaluated(name, "needs the wsfs and native-fsync arms at both N without neighbours"))
			continue
		}
		dw, df := wn.MedianWallS/w1.MedianWallS, fn.MedianWallS/f1.MedianWallS
		out = append(out, judge(name, dw, df,
			fmt.Sprintf("wsfs %.2fs -> %.2fs (%.2fx), native-fsync %.2fs -> %.2fs (%.2fx)%s",
				w1.MedianWallS, wn.MedianWallS, dw, f1.MedianWallS, fn.MedianWallS, df, note(w1, wn, f1, fn))))
	}
	if len(nbs) == 0 {
		out = append(out, notEvaluated("noisy neighbours: wsfs slowdown-1 <= 0.5x (wsfs-syncfs slowdown-1)", "run with --neighbours 0,1 (or more) to evaluate"))
	}
	for _, nb := range nbs {
		for _, n := range counts {
			name := fmt.Sprintf("noisy neighbours (%d): wsfs slowdown-1 <= 0.5x (wsfs-syncfs slowdown-1), N=%d", nb, n)
			w0, w1, s0, s1 := get(ArmWsfs, n, 0), get(ArmWsfs, n, nb), get(ArmWsfsSyncfs, n, 0), get(ArmWsfsSyncfs, n, nb)
			if w0 == nil || w1 == nil || s0 == nil || s1 == nil || w0.MedianWallS == 0 || s0.MedianWallS == 0 {
				out = append(out, notEvaluated(name, "needs the wsfs and wsfs-syncfs arms with and without neighbours"))
				continue
			}
			sw, ss := w1.MedianWallS/w0.MedianWallS, s1.MedianWallS/s0.MedianWallS
			out = append(out, judge(name, sw-1, 0.5*(ss-1),
				fmt.Sprintf("extra time: wsfs %.2fs -> %.2fs (%.2fx), wsfs-syncfs %.2fs -> %.2fs (%.2fx)%s",
					w0.MedianWallS, w1.MedianWallS, sw, s0.MedianWallS, s1.MedianWallS, ss, note(w0, w1, s0, s1))))
		}
	}
	top := counts[len(counts)-1]
	name := fmt.Sprintf("wsfs read p50 at N=%d <= 2x read p50 at N=%d", top, base)
	r1, rn := get(ArmWsfs, base, 0), get(ArmWsfs, top, 0)
	switch {
	case top == base:
		out = append(out, notEvaluated(name, "needs at least two workspace counts"))
	case r1 == nil || rn == nil || r1.ReadP50Ms == 0:
		out = append(out, notEvaluated(name, "needs the wsfs arm at both N without neighbours"))
	default:
		out = append(out, judge(name, rn.ReadP50Ms/r1.ReadP50Ms, 2,
			fmt.Sprintf("%.3f ms -> %.3f ms%s", r1.ReadP50Ms, rn.ReadP50Ms, note(r1, rn))))
	}
	return out
}

// WriteTable prints the summary as an aligned table.
func WriteTable(w io.Writer, rows []SummaryRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "arm\tws\tnb\tmedian s\tmax s\twrite p50\tp95\tread p50\tp95\tfsync p99\tc2d p99\tagg MB/s\tws MB/s\tdirty MB\tutil %\tawait ms\tload\tbusy\treplica\tverified\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.3f\t%.3f\t%.3f\t%.3f\t%.2f\t%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f\t%.1f\t%.1f\t%s\t%v\t\n",
			r.Arm, r.Workspaces, r.Neighbours, r.MedianWallS, r.MaxWallS, r.WriteP50Ms, r.WriteP95Ms,
			r.ReadP50Ms, r.ReadP95Ms, r.FsyncP99Ms, r.C2DP99Ms, r.AggWriteMBs, r.PerWSWriteMBs,
			r.PeakDirtyMB, r.MeanUtilPct, r.MeanAwaitMs, r.PeakLoad1, r.MeanBusyCores, replicaCell(r), r.Verified)
	}
	tw.Flush()
	fmt.Fprintln(w, "(latencies in ms; write = open-write-close; c2d = close to durable on every fsynced file;"+
		" dirty = peak Dirty; util, await = mean over the run; load = peak 1-min load; busy = mean busy cores;"+
		" replica = agent state replica restored and equal row for row (- = arm without a sidecar))")
}

// writeReport writes report.md.
func writeReport(path string, res *Results) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# wsfs stress report\n\n")
	fmt.Fprintf(&b, "Command: `%s`\n\n", res.Command)
	fmt.Fprintf(&b, "Profile `%s`: %d files, %.1f MB per workspace (workspace 0 at seed %d). Layout `%s`.\n",
		res.Profile, res.Files, float64(res.Bytes)/1e6, res.Seed, res.Layout)
	fmt.Fprintf(&b, "Host: Linux %s, %d CPUs, %d MB memory, root=%v. Device under the output directory: %s.\n\n",
		res.Host.Kernel, res.Host.CPUs, res.Host.MemoryMB, res.Host.Root, orNA(res.Device, res.DeviceNote))
	if res.Host.CPUs > 0 && res.Host.Load1AtStart > float64(res.Host.CPUs) {
		fmt.Fprintf(&b, "**Warning: the host was busy before the first run (1-minute load %.1f on %d CPUs); other work competed with every arm and the figures are noisy. Compare arms within this run only, and repeat (--repeat) before drawing conclusions.**\n\n",
			res.Host.Load1AtStart, res.Host.CPUs)
	}
	caches := "the page cache was not dropped between runs (not root)"
	if res.Host.Root {
		caches = "the page cache was dropped between runs (echo 1 > /proc/sys/vm/drop_caches, after the data was deleted; no sync)"
	}
	fmt.Fprintf(&b, "Every run starts in fresh directories; its data is removed after it (unless --keep), and %s. "+
		"All agents of a run are released at the same moment; wall time is measured by each agent from its first write to the end of its walk.\n\n", caches)
	b.WriteString("## Summary\n\n")
	b.WriteString("| arm | ws | nb | median s | max s | write p50 | write p95 | read p50 | read p95 | fsync p99 | c2d p99 | agg MB/s | ws MB/s | peak dirty MB | mean util % | mean await ms | peak load | busy cores | replica | verified |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n")
	for _, r := range res.Summary {
		fmt.Fprintf(&b, "| %s | %d | %d | %.2f | %.2f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f | %.0f | %.0f | %.0f | %.0f | %.2f | %.1f | %.1f | %s | %v |\n",
			r.Arm, r.Workspaces, r.Neighbours, r.MedianWallS, r.MaxWallS, r.WriteP50Ms, r.WriteP95Ms,
			r.ReadP50Ms, r.ReadP95Ms, r.FsyncP99Ms, r.C2DP99Ms, r.AggWriteMBs, r.PerWSWriteMBs,
			r.PeakDirtyMB, r.MeanUtilPct, r.MeanAwaitMs, r.PeakLoad1, r.MeanBusyCores, replicaCell(r), r.Verified)
	}
	b.WriteString("\nLatencies in milliseconds. write = open-write-close; fsync = the fsync call on every 50th file " +
		"(every file in native-fsync); c2d = close to durable (close, reopen, fsync). Host figures are sampled every 100 ms.\n")
	if len(res.NotRun) > 0 {
		b.WriteString("\n## Arms not run\n\n")
		for _, nr := range res.NotRun {
			fmt.Fprintf(&b, "- `%s`: %s\n", nr.Arm, nr.Reason)
		}
	}
	writeReplication(&b, res.Summary)
	b.WriteString("\n## Targets\n\n")
	b.WriteString("Ratios of median wall times measured in this run. The targets are stated for profile `seed` at 1, 3, 9 and 21 workspaces; other profiles give indicative values.\n\n")
	for _, t := range res.Targets {
		if t.Status == TargetNotEvaluated {
			fmt.Fprintf(&b, "- **not evaluated**: %s — %s\n", t.Name, t.Detail)
			continue
		}
		fmt.Fprintf(&b, "- **%s**: %s — %.2f against a limit of %.2f (%s)\n", t.Status, t.Name, t.Value, t.Limit, t.Detail)
	}
	var failed []string
	for _, r := range res.Runs {
		for _, e := range r.Errors {
			failed = append(failed, fmt.Sprintf("- %s ws=%d nb=%d repeat %d: %s", r.Arm, r.Workspaces, r.Neighbours, r.Repeat, e))
		}
	}
	if len(failed) > 0 {
		b.WriteString("\n## Failures\n\n" + strings.Join(failed, "\n") + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// replicaCell is the replica column of the tables: "ok", "FAILED", or "-"
// for an arm without replication.
func replicaCell(r SummaryRow) string {
	switch {
	case r.ReplicaVerified:
		return "ok"
	case r.Replicated || armReplicates(r.Arm):
		return "FAILED"
	}
	return "-"
}

// armReplicates reports whether the harness runs a replication sidecar per
// workspace in arm (see replica.go).
func armReplicates(arm string) bool { return arm == ArmWsfs || arm == ArmWsfsSyncfs }

// writeReplication writes report.md's section on agent state replication.
func writeReplication(b *strings.Builder, rows []SummaryRow) {
	b.WriteString("\n## Agent state replication\n\n")
	b.WriteString("Every stub agent records its progress (a row every 100 files and one per phase end) in its SQLite agent " +
		"state database, opened as agents open it (`agentstate.OpenDB`: WAL mode, `wal_autocheckpoint=0`, synchronous FULL). " +
		"In the wsfs arms a real replication sidecar (`wsfs sidecar NAME`: Litestream, 1 s sync interval, the file replica " +
		"under the pool) runs per workspace from before the agents start, as on a wsfs host. After the agents finish the " +
		"harness asks each sidecar for a sync-and-wait (latency below, measured while any neighbours still write), stops it " +
		"with SIGTERM (a last sync, exit 0 required), restores the database from the replica and compares every progress " +
		"row with the original; any difference fails the run.\n\n")
	b.WriteString("The native and loopback arms keep the same database, written the same way, but without replication: " +
		"`wsfs sidecar` replicates a workspace of a wsfs host, which those arms do not have, and charging the replication " +
		"cost to the wsfs arms alone can only make wsfs look slower, never faster, so a target met here is met with that " +
		"cost included.\n\n")
	b.WriteString("| arm | ws | nb | replicated | replica verified | sync-and-wait p50 ms | max ms |\n|---|--:|--:|---|---|--:|--:|\n")
	for _, r := range rows {
		if !r.Replicated && !armReplicates(r.Arm) {
			fmt.Fprintf(b, "| %s | %d | %d | no (no sidecar in this arm) | - | - | - |\n", r.Arm, r.Workspaces, r.Neighbours)
			continue
		}
		fmt.Fprintf(b, "| %s | %d | %d | %v | %v | %.1f | %.1f |\n", r.Arm, r.Workspaces, r.Neighbours,
			r.Replicated, r.ReplicaVerified, r.ReplicaSyncP50Ms, r.ReplicaSyncMaxMs)
	}
}

func orNA(s, why string) string {
	if s != "" {
		return s
	}
	return "n/a (" + why + ")"
}

// writeBench writes one Go benchmark line per run, so benchstat can compare
// invocations: ns/op is the run's median per-workspace wall time.
func writeBench(path string, res *Results) error {
	var b strings.Builder
	fmt.Fprintf(&b, "goos: linux\npkg: wsfs/stress\nprofile: %s\n", res.Profile)
	for _, r := range res.Runs {
		if r.Failed() {
			continue // a failed run has no meaningful time
		}
		row := summarizeGroup(r.Arm, r.Workspaces, r.Neighbours, []*RunResult{r})
		fmt.Fprintf(&b, "BenchmarkStress/arm=%s/ws=%d/nb=%d\t1\t%.0f ns/op\t%.0f max-ns/op\t%.2f MB/s\t%.4f write-p50-ms\t%.4f write-p95-ms\t%.4f read-p50-ms\t%.4f read-p95-ms\t%.4f fsync-p99-ms\t%.1f peak-dirty-MB\n",
			r.Arm, r.Workspaces, r.Neighbours, row.MedianWallS*1e9, row.MaxWallS*1e9, row.AggWriteMBs,
			row.WriteP50Ms, row.WriteP95Ms, row.ReadP50Ms, row.ReadP95Ms, row.FsyncP99Ms, row.PeakDirtyMB)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeOutputs writes results.json, report.md, bench.txt, the plots, and the
// table on stdout.
func writeOutputs(opts Options, res *Results) error {
	if err := writeJSONFile(filepath.Join(opts.Out, "results.json"), compactResults(res)); err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	if err := writeReport(filepath.Join(opts.Out, "report.md"), res); err != nil {
		return fmt.Errorf("report.md: %w", err)
	}
	if err := writeBench(filepath.Join(opts.Out, "bench.txt"), res); err != nil {
		return fmt.Errorf("bench.txt: %w", err)
	}
	if err := writePlots(opts.Out, res.Summary); err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	if opts.Stdout != nil {
		WriteTable(opts.Stdout, res.Summary)
		for _, t := range res.Targets {
			if t.Status != TargetNotEvaluated {
				fmt.Fprintf(opts.Stdout, "target %s: %s (%.2f, limit %.2f; %s)\n", t.Status, t.Name, t.Value, t.Limit, t.Detail)
			}
		}
		fmt.Fprintf(opts.Stdout, "wrote %s\n", strings.Join([]string{
			filepath.Join(opts.Out, "results.json"), filepath.Join(opts.Out, "report.md"),
			filepath.Join(opts.Out, "bench.txt"), filepath.Join(opts.Out, "plot.png"),
			filepath.Join(opts.Out, "fsync_p99.png")}, ", "))
	}
	return nil
}

// compactResults returns a copy of res for results.json: each agent's raw
// samples are replaced by their percentiles, which keeps the file small at
// 21 workspaces of the seed profile.
func compactResults(res *Results) *Results {
	c := *res
	c.Runs = nil
	for _, r := range res.Runs {
		rc := *r
		rc.Agents = nil
		for _, a := range r.Agents {
			ac := *a
			ac.Latency = map[string]LatencySummary{}
			for k, s := range a.Samples {
				ac.Latency[k] = SummarizeLatency(s)
			}
			ac.Samples = nil
			rc.Agents = append(rc.Agents, &ac)
		}
		c.Runs = append(c.Runs, &rc)
	}
	return &c
}
