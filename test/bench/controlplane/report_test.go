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

package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeResults writes rs as result files and returns their paths.
func writeResults(t *testing.T, rs ...result) []string {
	t.Helper()
	var files []string
	for i, r := range rs {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), string(rune('a'+i))+".json")
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

func TestLoadResultsPairsTrials(t *testing.T) {
	files := writeResults(t,
		result{Trial: 2, N: 20, OverallRate: 30},
		result{Trial: 1, N: 20, OverallRate: 10},
		result{Mode: modeLimit, Trial: 1, N: 20, OverallRate: 20},
		result{Mode: modeOpenSandbox, Trial: 1, N: 20, OverallRate: 5},
		result{Mode: modeOpenSandbox, Trial: 2, N: 20, OverallRate: 10},
	)
	bySize, err := loadResults(files)
	if err != nil {
		t.Fatal(err)
	}
	rs := bySize[20]
	if len(rs) != 2 || rs[0].Trial != 1 || rs[1].Trial != 2 {
		t.Fatalf("bursts of N=20: %+v, want trials 1 and 2 in order", rs)
	}
	if rs[0].limit == nil || rs[0].limit.OverallRate != 20 || rs[1].limit != nil {
		t.Errorf("write-only client results: %v, %v; want trial 1's only", rs[0].limit, rs[1].limit)
	}
	if rs[0].openSandbox.OverallRate != 5 || rs[1].openSandbox.OverallRate != 10 {
		t.Errorf("OpenSandbox results not paired by trial: %v, %v", rs[0].openSandbox, rs[1].openSandbox)
	}

	// Each ratio is the mean of the trials' ratios: (10/5 + 30/10) / 2.
	if got := mean(rs, over(openSandboxOf, throughput)); got != 2.5 {
		t.Errorf("throughput / OpenSandbox's = %v, want 2.5", got)
	}
	// A trial without a write-only client's run leaves no ratio.
	if got := mean(rs, over(limitOf, throughput)); !math.IsNaN(got) {
		t.Errorf("throughput / write-only client's = %v, want NaN", got)
	}
	if got := mean(rs, of(openSandboxOf, throughput)); got != 7.5 {
		t.Errorf("OpenSandbox's throughput = %v, want 7.5", got)
	}
}

func TestLoadResultsUnknownMode(t *testing.T) {
	if _, err := loadResults(writeResults(t, result{Mode: "other", N: 1})); err == nil {
		t.Error("want an error for an unknown mode")
	}
}

func TestReport(t *testing.T) {
	ours := result{Trial: 1, N: 500, Succeeded: 500, OverallRate: 40, ObjectWrites: 2000, Events: 500, WallSecs: 12.5}
	ours.ToSucceed.P99 = 2
	limit := result{Mode: modeLimit, Trial: 1, N: 500, Succeeded: 500, OverallRate: 50, ObjectWrites: 2000, WallSecs: 10}
	osb := result{Mode: modeOpenSandbox, Trial: 1, N: 500, Succeeded: 500, OverallRate: 10, ObjectWrites: 3000, Events: 1000, WallSecs: 50}
	osb.ToSucceed.P99 = 8
	var out bytes.Buffer
	if err := report(&out, true, writeResults(t, ours, limit, osb)); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	for _, want := range []struct{ row, cells string }{
		{"throughput (N / burst -> last Succeed)", "| 40.0 | 50.0 | 10.0 | 0.80x | 4.00x | >= 0.8 x write-only | ok |"},
		{"creation -> Succeed, p99", "| 2.00 | 0.00 | 8.00 | - | 0.25x | - | - |"},
		{"API writes / snapshot (objects + events)", "| 5.00 | 4.00 | 8.00 | 1.25x | 0.62x | <= 5.00 | ok |"},
	} {
		line := lineOf(out.String(), want.row)
		if !strings.HasSuffix(line, want.cells) {
			t.Errorf("row %q: %q, want it to end in %q", want.row, line, want.cells)
		}
	}
}

// lineOf returns the line of s that holds sub.
func lineOf(s, sub string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			return line
		}
	}
	return ""
}
