package stress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SampleInterval is how often the host sampler reads /proc.
const SampleInterval = 100 * time.Millisecond

// memInfo holds the /proc/meminfo fields the sampler uses, in bytes.
type memInfo struct {
	Dirty, Writeback int64
}

// parseMeminfo reads Dirty and Writeback from /proc/meminfo text.
func parseMeminfo(b []byte) (memInfo, error) {
	var m memInfo
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		var dst *int64
		switch f[0] {
		case "Dirty:":
			dst = &m.Dirty
		case "Writeback:":
			dst = &m.Writeback
		default:
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return m, fmt.Errorf("meminfo: %s %q: %w", f[0], f[1], err)
		}
		if len(f) > 2 && f[2] == "kB" {
			v *= 1024
		}
		*dst = v
		found++
	}
	if found != 2 {
		return m, fmt.Errorf("meminfo: Dirty or Writeback missing")
	}
	return m, nil
}

// diskStat holds the /proc/diskstats counters of one device.
type diskStat struct {
	Reads, ReadTicksMs     uint64
	Writes, WriteTicksMs   uint64
	SectorsWritten, IOMsec uint64
}

// parseDiskstats returns the counters of device name from /proc/diskstats
// text (fields per Documentation/admin-guide/iostats.rst).
func parseDiskstats(b []byte, name string) (diskStat, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 14 || f[2] != name {
			continue
		}
		var v [11]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[3+i], 10, 64)
			if err != nil {
				return diskStat{}, fmt.Errorf("diskstats %s field %d: %w", name, 4+i, err)
			}
			v[i] = n
		}
		return diskStat{
			Reads: v[0], ReadTicksMs: v[3],
			Writes: v[4], SectorsWritten: v[6], WriteTicksMs: v[7],
			IOMsec: v[9],
		}, nil
	}
	return diskStat{}, fmt.Errorf("diskstats: no device %q", name)
}

// parseLoadavg returns the one-minute load average.
func parseLoadavg(b []byte) (float64, error) {
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0, fmt.Errorf("loadavg: empty")
	}
	return strconv.ParseFloat(f[0], 64)
}

// cpuStat holds the aggregate jiffies of /proc/stat's "cpu" line.
type cpuStat struct {
	Total, Idle uint64 // Idle includes iowait: a core waiting for I/O is not busy
	CPUs        int    // number of cpuN lines
}

func parseProcStat(b []byte) (cpuStat, error) {
	var c cpuStat
	ok := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			c.CPUs++
			continue
		}
		if len(f) < 6 {
			return c, fmt.Errorf("stat: short cpu line %q", line)
		}
		for i, s := range f[1:] {
			if i >= 8 { // guest and guest_nice are already counted in user and nice
				break
			}
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return c, fmt.Errorf("stat: cpu field %d: %w", i+1, err)
			}
			c.Total += n
			if i == 3 || i == 4 { // idle, iowait
				c.Idle += n
			}
		}
		ok = true
	}
	if !ok {
		return c, fmt.Errorf("stat: no aggregate cpu line")
	}
	return c, nil
}

// BlockDevice returns the name of the block device (as /proc/diskstats
// names it) holding path, resolved through st_dev and /sys/dev/block. It
// returns "" and an error for a filesystem without a block device (tmpfs,
// overlay).
func BlockDevice(sysRoot, path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", path, err)
	}
	maj, min := unix.Major(st.Dev), unix.Minor(st.Dev)
	link := filepath.Join(sysRoot, "dev", "block", fmt.Sprintf("%d:%d", maj, min))
	target, err := os.Readlink(link)
	if err != nil {
		return "", fmt.Errorf("%s is on device %d:%d, which is not a block device (%v); disk figures unavailable", path, maj, min, err)
	}
	return filepath.Base(target), nil
}

// HostSample is one reading of the host, rates over the preceding interval.
type HostSample struct {
	AtMs        int64   `json:"at_ms"` // since the sampler started
	DirtyMB     float64 `json:"dirty_mb"`
	WritebackMB float64 `json:"writeback_mb"`
	UtilPct     float64 `json:"util_pct"`
	AwaitMs     float64 `json:"await_ms"` // mean wait of I/Os completed in the interval; 0 when none
	WriteMBs    float64 `json:"write_mb_s"`
	Load1       float64 `json:"load1"`
	BusyCores   float64 `json:"busy_cores"`
}

// HostSummary aggregates the samples of one run.
type HostSummary struct {
	Device          string  `json:"device,omitempty"` // "" when the output directory has no block device
	Samples         int     `json:"samples"`
	PeakDirtyMB     float64 `json:"peak_dirty_mb"`
	MeanDirtyMB     float64 `json:"mean_dirty_mb"`
	PeakWritebackMB float64 `json:"peak_writeback_mb"`
	MeanWritebackMB float64 `json:"mean_writeback_mb"`
	PeakUtilPct     float64 `json:"peak_util_pct"`
	MeanUtilPct     float64 `json:"mean_util_pct"`
	PeakAwaitMs     float64 `json:"peak_await_ms"`
	MeanAwaitMs     float64 `json:"mean_await_ms"` // over the whole run: wait ticks / I/Os
	PeakWriteMBs    float64 `json:"peak_write_mb_s"`
	MeanWriteMBs    float64 `json:"mean_write_mb_s"`
	PeakLoad1       float64 `json:"peak_load1"`
	MeanLoad1       float64 `json:"mean_load1"`
	PeakBusyCores   float64 `json:"peak_busy_cores"`
	MeanBusyCores   float64 `json:"mean_busy_cores"`
}

// Sampler reads the host every SampleInterval while a run is in progress.
type Sampler struct {
	procRoot string
	device   string
	start    time.Time
	prev     snapshot // last snapshot taken; owned by the sampling goroutine until done is closed
	cancel   context.CancelFunc
	done     chan struct{}

	mu struct {
		sync.Mutex
		samples     []HostSample
		first, last diskStat
		haveDisk    bool
		err         error // first read error; sampling stops at it
	}
}

// snapshot is one raw read of the counters.
type snapshot struct {
	at   time.Time
	mem  memInfo
	disk diskStat
	cpu  cpuStat
	load float64
}

func (s *Sampler) read() (snapshot, error) {
	sn := snapshot{at: time.Now()}
	b, err := os.ReadFile(filepath.Join(s.procRoot, "meminfo"))
	if err == nil {
		sn.mem, err = parseMeminfo(b)
	}
	if err != nil {
		return sn, err
	}
	if s.device != "" {
		if b, err = os.ReadFile(filepath.Join(s.procRoot, "diskstats")); err == nil {
			sn.disk, err = parseDiskstats(b, s.device)
		}
		if err != nil {
			return sn, err
		}
	}
	if b, err = os.ReadFile(filepath.Join(s.procRoot, "stat")); err == nil {
		sn.cpu, err = parseProcStat(b)
	}
	if err != nil {
		return sn, err
	}
	if b, err = os.ReadFile(filepath.Join(s.procRoot, "loadavg")); err == nil {
		sn.load, err = parseLoadavg(b)
	}
	return sn, err
}

// StartSampler begins sampling; device is the /proc/diskstats name of the
// measured device or "" for none. Stop ends it.
func StartSampler(procRoot, device string) (*Sampler, error) {
	s := &Sampler{procRoot: procRoot, device: device, done: make(chan struct{})}
	prev, err := s.read()
	if err != nil {
		return nil, fmt.Errorf("host sampler: %w", err)
	}
	s.mu.first, s.mu.last, s.mu.haveDisk = prev.disk, prev.disk, device != ""
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.start, s.prev = prev.at, prev
	go func() {
		defer close(s.done)
		t := time.NewTicker(SampleInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur, err := s.read()
			s.mu.Lock()
			if err != nil {
				s.mu.err = err
				s.mu.Unlock()
				return
			}
			s.mu.samples = append(s.mu.samples, sampleBetween(s.prev, cur, s.start))
			s.mu.last = cur.disk
			s.prev = cur
			s.mu.Unlock()
		}
	}()
	return s, nil
}

// sampleBetween turns two snapshots into a sample of rates.
func sampleBetween(prev, cur snapshot, start time.Time) HostSample {
	dt := cur.at.Sub(prev.at).Seconds()
	hs := HostSample{
		AtMs:        cur.at.Sub(start).Milliseconds(),
		DirtyMB:     float64(cur.mem.Dirty) / 1e6,
		WritebackMB: float64(cur.mem.Writeback) / 1e6,
		Load1:       cur.load,
	}
	if dt > 0 {
		d := cur.disk
		p := prev.disk
		hs.UtilPct = min(100, float64(d.IOMsec-p.IOMsec)/(dt*1000)*100)
		hs.WriteMBs = float64(d.SectorsWritten-p.SectorsWritten) * 512 / 1e6 / dt
		if ios := (d.Reads - p.Reads) + (d.Writes - p.Writes); ios > 0 {
			hs.AwaitMs = float64((d.ReadTicksMs-p.ReadTicksMs)+(d.WriteTicksMs-p.WriteTicksMs)) / float64(ios)
		}
	}
	if tot := cur.cpu.Total - prev.cpu.Total; tot > 0 {
		busy := float64(tot-(cur.cpu.Idle-prev.cpu.Idle)) / float64(tot)
		hs.BusyCores = busy * float64(max(cur.cpu.CPUs, 1))
	}
	return hs
}

// Stop ends sampling and returns the samples and their summary. It takes a
// last sample first, so a run shorter than SampleInterval still has one.
func (s *Sampler) Stop() ([]HostSample, HostSummary, error) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.err == nil {
		if cur, err := s.read(); err != nil {
			s.mu.err = err
		} else if cur.at.After(s.prev.at) {
			s.mu.samples = append(s.mu.samples, sampleBetween(s.prev, cur, s.start))
			s.mu.last = cur.disk
		}
	}
	sum := summarizeHost(s.mu.samples)
	sum.Device = s.device
	if s.mu.haveDisk {
		f, l := s.mu.first, s.mu.last
		if ios := (l.Reads - f.Reads) + (l.Writes - f.Writes); ios > 0 {
			sum.MeanAwaitMs = float64((l.ReadTicksMs-f.ReadTicksMs)+(l.WriteTicksMs-f.WriteTicksMs)) / float64(ios)
		}
	}
	return s.mu.samples, sum, s.mu.err
}

// summarizeHost computes peaks and means (MeanAwaitMs is left for the
// caller, which has the whole-run counters).
func summarizeHost(ss []HostSample) HostSummary {
	h := HostSummary{Samples: len(ss)}
	if len(ss) == 0 {
		return h
	}
	n := float64(len(ss))
	for _, s := range ss {
		h.PeakDirtyMB = max(h.PeakDirtyMB, s.DirtyMB)
		h.PeakWritebackMB = max(h.PeakWritebackMB, s.WritebackMB)
		h.PeakUtilPct = max(h.PeakUtilPct, s.UtilPct)
		h.PeakAwaitMs = max(h.PeakAwaitMs, s.AwaitMs)
		h.PeakWriteMBs = max(h.PeakWriteMBs, s.WriteMBs)
		h.PeakLoad1 = max(h.PeakLoad1, s.Load1)
		h.PeakBusyCores = max(h.PeakBusyCores, s.BusyCores)
		h.MeanDirtyMB += s.DirtyMB / n
		h.MeanWritebackMB += s.WritebackMB / n
		h.MeanUtilPct += s.UtilPct / n
		h.MeanWriteMBs += s.WriteMBs / n
		h.MeanLoad1 += s.Load1 / n
		h.MeanBusyCores += s.BusyCores / n
	}
	return h
}
