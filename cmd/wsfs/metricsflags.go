package main

import (
	"fmt"

	"wsfs/internal/metrics"
)

// checkMetricsFile refuses, as usage errors before anything starts,
// --metrics-file without --metrics and a file that may not receive the
// address (metrics.CheckAddrFile: a missing directory, or an existing file
// that is not an address file).
func checkMetricsFile(addr, file string) error {
	if file != "" && addr == "" {
		return usageError{"--metrics-file needs --metrics ADDR (it receives the address --metrics bound)"}
	}
	if file != "" {
		if err := metrics.CheckAddrFile(file); err != nil {
			return usageError{"--metrics-file: " + err.Error()}
		}
	}
	return nil
}

// serveMetrics serves m on addr (a usage error if it cannot listen there)
// and, if file is set, publishes the bound address in it
// (metrics.Server.PublishAddr; Close removes it).
func serveMetrics(m *metrics.Metrics, addr, file string) (*metrics.Server, error) {
	ms, err := m.Serve(addr)
	if err != nil {
		return nil, metricsListenError(err)
	}
	if file != "" {
		if err := ms.PublishAddr(file); err != nil {
			ms.Close()
			return nil, err
		}
	}
	return ms, nil
}

// metricsListenError is the usage error (exit 2) of a --metrics address
// that cannot be listened on: in use, or malformed.
func metricsListenError(err error) error {
	return usageError{fmt.Sprintf("--metrics: %v (choose another HOST:PORT; port 0 picks a free one)", err)}
}
