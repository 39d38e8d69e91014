package stress

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"wsfs/internal/agentstate"
)

// The agent process protocol, over the agent's stdin and stdout:
//
//	agent -> harness  "ready\n"                        prepared, waiting for the start signal
//	harness -> agent  any line                         start now (EOF instead: exit without running)
//	agent -> harness  "progress <phase> <done> <total>\n" at most every progressInterval, and at phase ends
//	agent -> harness  "done\n"                          result file written
//
// The result is written as JSON to the result path, also when the run
// failed (then Verified is false and Error says why), so the harness can
// report the failing file. All agents of a run are started together by
// releasing their stdin at the same moment.
const (
	msgReady    = "ready"
	msgProgress = "progress"
	msgDone     = "done"

	progressInterval = 200 * time.Millisecond
)

// AgentEnvState is the environment variable naming the agent's state
// database: the one a wsfs host gives its agents.
const AgentEnvState = agentstate.EnvVar

// RunAgentProcess is the body of `wsfs agent`: prepare, announce readiness,
// wait for the start line, run the workload, write the result JSON.
func RunAgentProcess(ctx context.Context, cfg AgentConfig, resultPath string, stdin io.Reader, stdout io.Writer) error {
	var mu sync.Mutex
	out := bufio.NewWriter(stdout)
	say := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		out.WriteString(line + "\n")
		out.Flush()
	}
	var last time.Time
	lastPhase := ""
	cfg.Progress = func(phase string, done, total int) {
		now := time.Now()
		if phase == lastPhase && done != total && now.Sub(last) < progressInterval {
			return
		}
		last, lastPhase = now, phase
		say(fmt.Sprintf("%s %s %d %d", msgProgress, phase, done, total))
	}
	a, err := NewAgent(cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	say(msgReady)
	if stdin != nil {
		// A line starts the run; EOF before it means the harness gave up
		// (another workspace failed to get ready) and the agent leaves.
		if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil {
			return fmt.Errorf("agent: no start signal on stdin: %w", err)
		}
	}
	res, runErr := a.Run(ctx)
	if err := writeJSONFile(resultPath, res); err != nil {
		return err
	}
	say(msgDone)
	return runErr
}

// writeJSONFile writes v as indented JSON via a temporary file and rename,
// so a reader never sees half a file.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// agentMsg is one parsed line from an agent's stdout.
type agentMsg struct {
	kind        string
	phase       string
	done, total int
}

func parseAgentLine(line string) (agentMsg, bool) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return agentMsg{}, false
	}
	switch f[0] {
	case msgReady, msgDone:
		return agentMsg{kind: f[0]}, len(f) == 1
	case msgProgress:
		if len(f) != 4 {
			return agentMsg{}, false
		}
		d, err1 := strconv.Atoi(f[2])
		t, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			return agentMsg{}, false
		}
		return agentMsg{kind: msgProgress, phase: f[1], done: d, total: t}, true
	}
	return agentMsg{}, false
}
