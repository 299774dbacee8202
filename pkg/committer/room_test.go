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

package committer

import (
	"strings"
	"testing"

	v1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2stats "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestMemoryIn checks which of a cgroup's counts are taken for the memory
// CRIU dumps, on cgroup v2 and v1.
func TestMemoryIn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		metrics any
		want    uint64
		wantErr string
	}{
		{"cgroup v2: anonymous and shared", &v2stats.Metrics{Memory: &v2stats.MemoryStat{Anon: 300 << 20, Shmem: 20 << 20, File: 900 << 20}}, 320 << 20, ""},
		{"cgroup v1: RSS of the hierarchy", &v1stats.Metrics{Memory: &v1stats.MemoryStat{RSS: 1 << 20, TotalRSS: 256 << 20, TotalCache: 900 << 20}}, 256 << 20, ""},
		{"something else", durationpb.New(0), 0, "unknown type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := typeurl.MarshalAny(tc.metrics)
			if err != nil {
				t.Fatal(err)
			}
			got, err := memoryIn(a)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("memoryIn: got %d, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("memoryIn: got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
