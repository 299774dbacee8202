//go:build e2e_node

/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package e2enode

import (
	"strings"
	"testing"
	"time"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// metricsService is the controller's metrics Service and port
// (config/500-controller.yaml), as the API server's service proxy names it.
const metricsService = "sandbox-snapshot-controller:http-metrics"

// scrapeCounts reads the in-cluster controller's /metrics through its
// Service, as a Prometheus scrape config would, and returns the sample count
// of each histogram series asked for, given as name{key=value,...} in key
// order (name alone for none).
func scrapeCounts(t *testing.T, series ...string) map[string]uint64 {
	t.Helper()
	body := nodeframework.Run(t, "", "kubectl", "get", "--raw",
		"/api/v1/namespaces/"+test.SystemNamespace+"/services/"+metricsService+"/proxy/metrics")
	m, err := test.ParseMetrics(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing the controller's metrics: %v", err)
	}
	out := map[string]uint64{}
	for _, s := range series {
		name, labels, _ := strings.Cut(strings.TrimSuffix(s, "}"), "{")
		out[s] = m.Histogram(t, name, labels).GetSampleCount()
	}
	return out
}

// snapshotSeries are the series one successful snapshot adds a sample to.
var snapshotSeries = []string{
	`sandbox_snapshot_duration_seconds{reason=Succeeded,status=succeeded}`,
	`sandbox_snapshot_pause_window_seconds`,
	`sandbox_snapshot_commit_duration_seconds{status=succeeded}`,
	`sandbox_snapshot_taskrun_creation_latency_seconds`,
}

// assertOneMoreSnapshot checks that the controller's metrics, scraped
// through its Service, count at least one more successful snapshot in each
// of snapshotSeries than before (a scrape from before it was created).
func assertOneMoreSnapshot(t *testing.T, before map[string]uint64) {
	t.Helper()
	var after map[string]uint64
	// The controller records a snapshot's end right after the status write
	// the test saw: give it a moment.
	nodeframework.Eventually(t, "the controller's metrics to count the snapshot", 30*time.Second, func() (bool, error) {
		after = scrapeCounts(t, snapshotSeries...)
		for _, s := range snapshotSeries {
			if after[s] < before[s]+1 {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("metrics through Service %s: %v", metricsService, after)
}
